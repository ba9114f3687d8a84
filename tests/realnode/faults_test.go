package realnode_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/stack"
)

// fault is an application of testdata/faults and what its environment's
// status and its pull request's comment must say.
type fault struct {
	app string
	// says are texts the status and the comment both show; the pull
	// request's short commit id replaces {sha}.
	says []string
	// final: the failure is not retried (one deploy Job, one pod).
	final bool
}

var faultTable = []fault{
	{app: "noimage", says: []string{"ImagePullFailed", "example-app:never-pushed-{sha}"}, final: true},
	{app: "crash", says: []string{"ContainerCrashed", "cannot reach the database at db:5432: connection refused"}, final: true},
	{app: "unready", says: []string{"20s", "eadiness probe"}},
	{app: "unschedulable", says: []string{"Unschedulable", "node affinity/selector"}},
}

// faults opens a pull request for each fault application at once and
// checks that each environment fails (not Ready), that its status and
// its pull request's comment name the fault, and that a final fault ran
// one deploy pod only.
func faults(t *testing.T, s *stack.Stack) {
	ctx := context.Background()
	shas := map[string]string{}
	for i, f := range faultTable {
		pr, err := s.OpenPullRequestOn(ctx, "petri-dev/"+f.app, 100+i, "Fault: "+f.app)
		require.NoError(t, err)
		shas[f.app] = pr.HeadSHA[:7]
	}
	optOut, err := s.OpenPullRequestOn(ctx, "petri-dev/nowait", 100+len(faultTable), "Opt out of waiting")
	require.NoError(t, err)
	for i, f := range faultTable {
		t.Run(f.app, func(t *testing.T) {
			want := make([]string, len(f.says))
			for j, w := range f.says {
				want[j] = strings.ReplaceAll(w, "{sha}", shas[f.app])
			}
			env := waitFailed(t, s, fmt.Sprintf("%s-pr-%d-", f.app, 100+i), want)
			comment := waitComment(t, s, "petri-dev/"+f.app, 100+i, want)
			t.Logf("%s: comment:\n%s", f.app, comment)
			ready := meta.FindStatusCondition(env.Status.Conditions, petriv1.ConditionReady)
			require.NotNil(t, ready)
			assert.Equal(t, "False", string(ready.Status), "an environment whose pods do not run is not Ready")
			if f.final {
				var pods corev1.PodList
				require.NoError(t, s.Client.List(ctx, &pods, client.InNamespace(stack.ManagementNamespace), client.MatchingLabels{petriv1.LabelEnvironment: env.Name}))
				deploys := 0
				for _, p := range pods.Items {
					if strings.Contains(p.Name, "-deploy-") {
						deploys++
					}
				}
				assert.Equal(t, 1, deploys, "a final fault is not retried")
			}
		})
	}
	t.Run("nowait", func(t *testing.T) {
		// Opted out of waiting, the environment is Ready while its container
		// crashes, and says it was not waited for.
		env := waitFailed(t, s, fmt.Sprintf("nowait-pr-%d-", optOut.Number), []string{"not waited for: release.wait is false"})
		ready := meta.FindStatusCondition(env.Status.Conditions, petriv1.ConditionReady)
		require.NotNil(t, ready)
		assert.Equal(t, "True", string(ready.Status))
		assert.Contains(t, ready.Message, "release.wait is false")
	})
}

// waitFailed waits until the environment whose name starts with prefix
// says every text of want in its status, and returns it.
func waitFailed(t *testing.T, s *stack.Stack, prefix string, want []string) *petriv1.EphemeralEnvironment {
	t.Helper()
	var found *petriv1.EphemeralEnvironment
	var last string
	eventually(t, 4*time.Minute, func() bool {
		var list petriv1.EphemeralEnvironmentList
		if err := s.Client.List(context.Background(), &list, client.InNamespace(stack.ManagementNamespace)); err != nil {
			return false
		}
		for i := range list.Items {
			if e := &list.Items[i]; strings.HasPrefix(e.Name, prefix) {
				data, _ := json.Marshal(e.Status)
				last = string(data)
				found = e
				return containsAll(last, want)
			}
		}
		return false
	}, func() string {
		return fmt.Sprintf("the environment %s* never said %q; its status: %s", prefix, want, last)
	})
	return found
}

// waitComment waits until sync's comment on the pull request says every
// text of want.
func waitComment(t *testing.T, s *stack.Stack, repo string, number int, want []string) string {
	t.Helper()
	var body string
	eventually(t, time.Minute, func() bool {
		cs := s.GitHub.Comments(repo, number)
		if len(cs) == 0 {
			return false
		}
		body = cs[len(cs)-1].Body
		return containsAll(body, want)
	}, func() string { return fmt.Sprintf("the comment on %s#%d never said %q: %s", repo, number, want, body) })
	return body
}

func containsAll(s string, want []string) bool {
	for _, w := range want {
		if !strings.Contains(s, w) {
			return false
		}
	}
	return true
}

// eventually checks cond every half second until it holds, and fails with
// explain's text when timeout passes first.
func eventually(t *testing.T, timeout time.Duration, cond func() bool, explain func() string) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatal(explain())
		case <-tick.C:
		}
	}
}
