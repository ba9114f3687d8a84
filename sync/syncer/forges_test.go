package syncer_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/githubapi"
	"github.com/petri-dev/petri/sync/config"
	"github.com/petri-dev/petri/sync/render"
)

// onForge is the harness's application under another name on a forge.
func onForge(name, forge string) string {
	y := strings.Replace(appYAML(""), "name: shop\n", "name: "+name+"\n", 1)
	return strings.Replace(y, "repository: ", "forge: "+forge+"\nrepository: ", 1)
}

// states are the forge and repository of each PullRequestState in the
// harness's namespace, as forge:repository#number.
func (h *harness) states() []string {
	var list petriv1.PullRequestStateList
	require.NoError(h.t, h.c.List(h.ctx, &list, client.InNamespace(h.ns)))
	var out []string
	for _, st := range list.Items {
		out = append(out, st.Spec.Forge+":"+st.Spec.Repository+"#"+itoa(int(st.Spec.Number)))
	}
	return out
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestRepositoriesRoutedToTheirForge: acme/shop on GitHub and acme/shop on
// a second forge are two repositories, each listed on and reported to its
// own forge; an application on a forge sync has no credentials for is a
// file:line error and the others run; when a repository leaves the config
// its PullRequestStates are deleted and the other forge's stay.
func TestRepositoriesRoutedToTheirForge(t *testing.T) {
	// The second forge is played by another GitHub stand-in: the router
	// needs only the provider roles, whoever plays them.
	other := githubapi.New(githubapi.Options{Tokens: []string{"ghp_test"}})
	t.Cleanup(other.Close)
	h := newHarness(t, harnessOptions{
		forges: map[string]*githubapi.Server{config.ForgeGitea: other},
		files: map[string]string{
			"shop.yaml":  appYAML(""),
			"gitea.yaml": onForge("shop-gitea", config.ForgeGitea),
			"lab.yaml":   onForge("shop-lab", config.ForgeGitLab),
		},
	})
	_, apps := h.s.Applications()
	var broken []string
	for _, a := range apps {
		broken = append(broken, a.Errors...)
	}
	require.Len(t, broken, 1, "%+v", apps)
	assert.Contains(t, broken[0], "lab.yaml:4: forge: repository acme/shop is on gitlab, for which sync has no credentials")

	onGitHub := h.open(githubapi.PullRequest{Labels: []string{"preview"}})
	onGitea := other.OpenPullRequest(ghRepo, githubapi.PullRequest{Number: 40, Labels: []string{"preview"}})
	h.resync()

	ghEnv := h.waitEnv(render.EnvironmentName("shop", ghRepo, onGitHub.Number), nil)
	assert.NotContains(t, ghEnv.Annotations, render.AnnotationForge)
	giteaEnv := h.waitEnv(render.EnvironmentName("shop-gitea", "gitea:"+ghRepo, onGitea.Number), nil)
	assert.Equal(t, config.ForgeGitea, giteaEnv.Annotations[render.AnnotationForge])
	assert.Equal(t, onGitea.HeadSHA, giteaEnv.Spec.Source.SHA)
	_, err := h.get(render.EnvironmentName("shop", ghRepo, onGitea.Number))
	assert.Error(t, err, "GitHub's application has no pull request #%d", onGitea.Number)

	// Each pull request's comment is on its own forge.
	require.Eventually(t, func() bool {
		return len(other.Comments(ghRepo, onGitea.Number)) == 1 && len(h.gh.Comments(ghRepo, onGitHub.Number)) == 1
	}, 15*time.Second, 10*time.Millisecond)
	assert.Empty(t, h.gh.Comments(ghRepo, onGitea.Number))
	require.Eventually(t, func() bool { return len(h.states()) == 2 }, 15*time.Second, 10*time.Millisecond)
	assert.ElementsMatch(t, []string{"github:acme/shop#" + itoa(onGitHub.Number), "gitea:acme/shop#40"}, h.states())

	// The Gitea application leaves the config: its repository's states
	// go, GitHub's stay.
	h.pushConfig(map[string]string{"gitea.yaml": ""})
	require.Eventually(t, func() bool { return len(h.states()) == 1 }, 15*time.Second, 10*time.Millisecond, "%v", h.states())
	assert.Equal(t, []string{"github:acme/shop#" + itoa(onGitHub.Number)}, h.states())
}
