package syncer

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/util/validation"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

// A repository key's Repository is named with a valid object name, the same
// each time, and two keys that read alike once made a name never share one.
func TestRepositoryObjectName(t *testing.T) {
	keys := []string{"acme/shop", "Acme/Shop", "acme-shop", "gitea:acme/shop", "gitlab:group/sub/project",
		"gitlab:" + strings.Repeat("very-long-group/", 20) + "project", "--/..", "acme/shop.git"}
	seen := map[string]string{}
	for _, k := range keys {
		name := repositoryObjectName(k)
		assert.Empty(t, validation.IsDNS1123Label(name), "name %q of %q", name, k)
		assert.Equal(t, name, repositoryObjectName(k), "the name of %q is stable", k)
		if other, ok := seen[name]; ok {
			t.Errorf("%q and %q share the name %q", k, other, name)
		}
		seen[name] = k
	}
	assert.True(t, strings.HasPrefix(repositoryObjectName("gitea:acme/shop"), "gitea-acme-shop-"), "the name reads as its key")
}

// The marks on a Repository are read back as they were recorded, other
// annotations left alone; taken, they name what the pass looks at again.
func TestRefreshMarksTaken(t *testing.T) {
	at := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	pending := marks{}
	pending.add("acme/shop", markPullRequest+"12", at.Add(time.Second))
	pending.add("acme/shop", markPullRequest+"12", at) // the earlier delivery's time is kept
	pending.add("acme/shop", markComments+"7", at.Add(2*time.Second))
	pending.add("acme/shop", markResync, at.Add(3*time.Second))
	annotations := map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{}"}
	for name, when := range pending["acme/shop"] {
		annotations[petriv1.RefreshAnnotationPrefix+name] = when.Format(time.RFC3339Nano)
	}

	taken := refreshMarks(annotations)
	assert.Equal(t, map[string]time.Time{markPullRequest + "12": at, markComments + "7": at.Add(2 * time.Second), markResync: at.Add(3 * time.Second)}, taken)

	rs := newRepoState("acme/shop", new(sync.Mutex))
	rs.take(taken)
	assert.Equal(t, map[int]bool{12: true}, rs.hints, "the pull request is read when the listing does not show it")
	assert.Equal(t, map[int]bool{7: true}, rs.commentHints, "the pull request's comments are listed")
	assert.True(t, rs.resyncDue, "a resync mark lists the repository's recent comments")
	assert.Equal(t, at, rs.pendingSince, "the oldest webhook's time")
}
