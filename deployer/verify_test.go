package deployer_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/api/contract"
	"github.com/petri-dev/petri/deployer"
)

// Verify reads the releases' latest records: all there at the expected
// revision is "Verified"; a release deleted behind the deployer's back is
// ReleaseMissing, one upgraded by someone else RevisionMismatch, both named.
func TestVerifyFindsMissingAndMovedReleases(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ns := namespace(t)
	d := newDeployer(t, ns)
	ch := localChart(t, "greeter")
	for _, name := range []string{"web", "api", "db"} {
		rel, err := d.Deploy(ctx, deployer.DeployRequest{Release: name, Chart: ch})
		require.NoError(t, err)
		assert.Equal(t, "Deployed: revision 1", deployer.DeployedMessage(rel))
	}
	expect := []deployer.Expectation{{Release: "web", Revision: 1}, {Release: "api", Revision: 1}, {Release: "db"}}
	res, err := d.Verify(ctx, expect)
	require.NoError(t, err)
	assert.Equal(t, contract.OutcomeSucceeded, res.Outcome)
	assert.Empty(t, res.Drifted)
	assert.Equal(t, "Verified: web=1 api=1 db=1", res.Message)

	require.NoError(t, env.Client.DeleteAllOf(ctx, &corev1.Secret{}, client.InNamespace(ns), client.MatchingLabels{"owner": "helm", "name": "web"}))
	_, err = d.Deploy(ctx, deployer.DeployRequest{Release: "api", Chart: ch})
	require.NoError(t, err)
	res, err = d.Verify(ctx, expect)
	require.NoError(t, err)
	assert.Equal(t, contract.OutcomeDrifted, res.Outcome)
	assert.Equal(t, contract.ReasonReleaseMissing, res.Reason)
	assert.Equal(t, []string{"web", "api"}, res.Drifted, "the releases to deploy again, as data")
	assert.Equal(t, "ReleaseMissing: web; RevisionMismatch: api 2 != 1", res.Message)
}

func TestParseExpectation(t *testing.T) {
	e, err := deployer.ParseExpectation("web=4")
	require.NoError(t, err)
	assert.Equal(t, deployer.Expectation{Release: "web", Revision: 4}, e)
	e, err = deployer.ParseExpectation("web")
	require.NoError(t, err)
	assert.Equal(t, deployer.Expectation{Release: "web"}, e)
	for _, bad := range []string{"web=x", "web=-1", "Web=1", "=1"} {
		_, err := deployer.ParseExpectation(bad)
		assert.ErrorIs(t, err, deployer.ErrInvalidArguments, bad)
	}
}
