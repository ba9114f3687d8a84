package deployer_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/petri-dev/petri/deployer"
)

// openAPIRequests is how many OpenAPI documents the API server has served,
// from its own request counter.
func openAPIRequests(t *testing.T) float64 {
	t.Helper()
	m, err := env.APIServerMetrics(context.Background())
	require.NoError(t, err)
	total := 0.0
	for k, v := range m {
		if strings.HasPrefix(k, "apiserver_request_total{") && strings.Contains(k, `subresource="openapi`) {
			total += v
		}
	}
	return total
}

// A deploy reads no OpenAPI document: Helm's client-side validation would
// fetch and parse one per API group only to learn that the API server
// validates fields itself, and then skip (every deploy Job paid that, in
// CPU and in the API server's). Not parallel, so no other test's deploys
// are counted.
func TestDeployReadsNoOpenAPIDocument(t *testing.T) {
	ctx := testContext(t)
	ns := namespace(t)
	before := openAPIRequests(t)
	d := newDeployer(t, ns)
	_, err := d.Deploy(ctx, deployer.DeployRequest{Release: "web", Chart: localChart(t, "greeter"), Values: greeterValues("one", "v1")})
	require.NoError(t, err)
	_, err = d.Deploy(ctx, deployer.DeployRequest{Release: "web", Chart: localChart(t, "greeter"), Values: greeterValues("two", "v2")})
	require.NoError(t, err)
	assert.Equal(t, before, openAPIRequests(t), "OpenAPI documents served during an install and an upgrade")
}
