package prstate_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/controlplane"
	"github.com/petri-dev/petri/sync/prstate"
	"github.com/petri-dev/petri/sync/render"
)

const namespace = "petri-system"

var cluster *controlplane.Cluster

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	cluster, err = controlplane.Start(controlplane.Options{Controllers: []string{"namespace-controller"}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cluster.Stop()
	if err := cluster.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

func TestNamesAreValidAndDistinct(t *testing.T) {
	long := strings.Repeat("group-with-a-long-name/", 12) + "project"
	keys := []prstate.Key{
		{Repository: "acme/web", Number: 1},
		{Repository: "acme/web", Number: 12},
		{Repository: "ACME/Web", Number: 1, Forge: "gitlab"},
		{Repository: "acme/web", Number: 1, Forge: "gitea"},
		{Repository: long, Number: 7, Forge: "gitlab"},
		{Repository: long + "-other", Number: 7, Forge: "gitlab"},
		{Repository: "__/__", Number: 3},
	}
	seen := map[string]prstate.Key{}
	for _, k := range keys {
		name := prstate.Name(k)
		assert.Empty(t, validation.IsDNS1123Label(name), "%+v: %s", k, name)
		assert.Equal(t, name, prstate.Name(k), "stable")
		prev, dup := seen[name]
		assert.False(t, dup, "%+v and %+v share %s", k, prev, name)
		seen[name] = k
	}
	assert.Equal(t, prstate.Name(prstate.Key{Repository: "acme/web", Number: 1}), prstate.Name(prstate.Key{Repository: "acme/web", Number: 1, Forge: "github"}), "github is the default forge")
}

// TestRoundTrip: what sync saves is what it loads, after a restart (a new
// store) too, and kubectl sees each application's expiry.
func TestRoundTrip(t *testing.T) {
	ctx := context.Background()
	s := &prstate.Store{Client: cluster.Client, Namespace: namespace}
	k := prstate.Key{Repository: "acme/round-trip", Number: 4}
	_, found, err := s.Load(ctx, k)
	require.NoError(t, err)
	assert.False(t, found, "nothing stored yet")

	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var st render.State
	st.LastCommand, st.Kept, st.ActiveSHA, st.ActiveAt = 99, true, "abc123", at
	st.Note("kept for good")
	for i := range render.MaxMergeGroups + 1 {
		st.AddMergeGroup(strings.Repeat(string(rune('a'+i)), 40))
	}
	require.Len(t, st.MergeGroups, render.MaxMergeGroups, "the oldest merge group is forgotten")
	assert.Equal(t, strings.Repeat("b", 40), st.MergeGroups[0])
	web := st.App("web")
	web.ReadySHA, web.ReadyAt, web.ExtendedUntil = "abc123", at, at.Add(48*time.Hour)
	web.Deployment, web.DeploymentSHA, web.DeploymentState = 42, "abc123", "success"
	api := st.App("api")
	api.ExpiredSHA, api.ExpiredAt = "def456", at.Add(time.Hour)
	require.NoError(t, s.Save(ctx, k, st, map[string]time.Time{"web": at.Add(48 * time.Hour)}))

	restarted := &prstate.Store{Client: cluster.Client, Namespace: namespace}
	got, found, err := restarted.Load(ctx, k)
	require.NoError(t, err)
	require.True(t, found)
	assert.Equal(t, st, got)

	var obj petriv1.PullRequestState
	require.NoError(t, cluster.Client.Get(ctx, clientKey(k), &obj))
	assert.Equal(t, "github", obj.Spec.Forge)
	require.Len(t, obj.Spec.Applications, 2)
	assert.Equal(t, "api", obj.Spec.Applications[0].Name, "applications in name order")
	assert.Nil(t, obj.Spec.Applications[0].ExpiresAt)
	assert.Equal(t, at.Add(48*time.Hour), obj.Spec.Applications[1].ExpiresAt.UTC())

	st.Kept = false
	st.DropMergeGroup(strings.Repeat("b", 40))
	delete(st.Apps, "api")
	require.NoError(t, s.Save(ctx, k, st, nil))
	got, _, err = s.Load(ctx, k)
	require.NoError(t, err)
	assert.Equal(t, st, got, "a save replaces the state: nothing of the old one is left")

	list, err := s.List(ctx, "github", "acme/round-trip")
	require.NoError(t, err)
	assert.Len(t, list, 1)
	require.NoError(t, s.Delete(ctx, k))
	require.NoError(t, s.Delete(ctx, k), "forgetting twice is no error")
	_, found, err = s.Load(ctx, k)
	require.NoError(t, err)
	assert.False(t, found)
}

// TestRefusesAStateOfAnotherPullRequest: an object under a pull request's
// name that holds another pull request's state is an error, never taken.
func TestRefusesAStateOfAnotherPullRequest(t *testing.T) {
	ctx := context.Background()
	k := prstate.Key{Repository: "acme/other", Number: 5}
	obj := &petriv1.PullRequestState{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: prstate.Name(k)},
		Spec:       petriv1.PullRequestStateSpec{Forge: "github", Repository: "acme/production", Number: 5, Kept: true},
	}
	require.NoError(t, cluster.Client.Create(ctx, obj))
	s := &prstate.Store{Client: cluster.Client, Namespace: namespace}
	_, _, err := s.Load(ctx, k)
	assert.ErrorContains(t, err, "holds github acme/production#5, not acme/other#5")
}

func TestCRDRefusesNonsense(t *testing.T) {
	ctx := context.Background()
	obj := &petriv1.PullRequestState{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "bad"},
		Spec:       petriv1.PullRequestStateSpec{Forge: "svn", Repository: "a/b", Number: 0, MergeGroups: []string{"HEAD"}},
	}
	err := cluster.Client.Create(ctx, obj)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "spec.forge")
	assert.Contains(t, err.Error(), "spec.number")
	assert.Contains(t, err.Error(), "spec.mergeGroups[0]")
}

func clientKey(k prstate.Key) client.ObjectKey {
	return client.ObjectKey{Namespace: namespace, Name: prstate.Name(k)}
}
