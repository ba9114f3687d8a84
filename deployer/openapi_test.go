package deployer_test

import (
	"bufio"
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/petri-dev/petri/deployer"
)

// openAPIRequests is how many OpenAPI documents the API server has served,
// from its own request counter.
func openAPIRequests(t *testing.T) int {
	t.Helper()
	raw, err := env.Clientset.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	require.NoError(t, err)
	total := 0
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") || !strings.Contains(line, `subresource="openapi`) {
			continue
		}
		n, err := strconv.Atoi(line[strings.LastIndex(line, " ")+1:])
		require.NoError(t, err, line)
		total += n
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
