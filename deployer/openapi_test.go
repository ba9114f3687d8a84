package deployer_test

import (
	"context"
	"fmt"
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
// CPU and in the API server's: an install and an upgrade read 3). Not
// parallel, so no other test's deploys are counted; the API server's
// counter is shared with its other clients, which now and then read one
// document of their own, so an install and three upgrades may see one.
func TestDeployReadsNoOpenAPIDocument(t *testing.T) {
	ctx := testContext(t)
	ns := namespace(t)
	before := openAPIRequests(t)
	d := newDeployer(t, ns)
	for i, v := range []string{"one", "two", "three", "four"} {
		_, err := d.Deploy(ctx, deployer.DeployRequest{Release: "web", Chart: localChart(t, "greeter"), Values: greeterValues(v, fmt.Sprintf("v%d", i+1))})
		require.NoError(t, err)
	}
	assert.LessOrEqual(t, openAPIRequests(t)-before, 1.0, "OpenAPI documents served during an install and three upgrades")
}
