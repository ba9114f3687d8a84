package syncer

import (
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/sync/render"
)

func TestPullRequestIndexKeysByRepositoryAndNumber(t *testing.T) {
	env := func(repo, number string, owned bool) *petriv1.EphemeralEnvironment {
		e := &petriv1.EphemeralEnvironment{ObjectMeta: metav1.ObjectMeta{
			Labels:      map[string]string{render.LabelPullRequest: number},
			Annotations: map[string]string{render.AnnotationRepository: repo},
		}}
		if owned {
			e.Labels[petriv1.LabelManagedBy] = render.ManagedBy
			e.Labels[render.LabelApplication] = "shop"
		}
		return e
	}
	assert.Equal(t, []string{"acme/shop#7"}, pullRequestIndex(env("Acme/Shop", "7", true)), "repository names are case-insensitive")
	assert.Equal(t, pullRequestKey("ACME/shop", "7"), pullRequestIndex(env("acme/shop", "7", true))[0])
	assert.NotEqual(t, pullRequestIndex(env("acme/shop", "7", true)), pullRequestIndex(env("acme/web", "7", true)), "one number in two repositories")
	gitea := env("acme/shop", "7", true)
	gitea.Annotations[render.AnnotationForge] = "gitea"
	assert.Equal(t, []string{"gitea:acme/shop#7"}, pullRequestIndex(gitea), "acme/shop on Gitea is another repository")
	assert.Nil(t, pullRequestIndex(env("acme/shop", "7", false)), "an environment sync did not write")
	assert.Nil(t, pullRequestIndex(env("", "7", true)), "no repository")
	assert.Nil(t, pullRequestIndex(env("acme/shop", "", true)), "no pull request")
}
