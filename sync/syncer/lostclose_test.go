package syncer_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/petri-dev/petri/local/githubapi"
)

// A pull request whose opened webhook came while GitHub's listing did not
// show it gets its environment from reading it on its own; closed later
// with its closed webhook lost, and still not listed (the listing shows
// open pull requests only), its environment goes at the next resync: the
// opened webhook's snapshot is not taken for the pull request's state.
func TestLostCloseOfAnUnlistedPullRequest(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{files: shopFiles("")})
	h.gh.SetFault(&githubapi.Fault{EmptyList: true, Match: func(r *http.Request) bool { return strings.HasSuffix(r.URL.Path, "/pulls") }})
	pr, _ := h.deployed()

	h.gh.SetFault(nil)
	h.gh.UpdatePullRequest(ghRepo, pr.Number, func(p *githubapi.PullRequest) { p.State = "closed" })
	require.Eventually(t, func() bool {
		h.resync()
		_, err := h.get(envName(pr.Number))
		return apierrors.IsNotFound(err)
	}, 10*time.Second, 100*time.Millisecond, "the closed pull request's environment goes")
}
