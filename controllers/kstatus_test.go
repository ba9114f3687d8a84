package controllers_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/controlplane"
)

// expectedKStatus is what a tool must read from the operator's own account
// of an object (its phase and the generation it speaks of). The second
// result is false for an object the operator has not written yet.
func expectedKStatus(u *unstructured.Unstructured) (kstatus.Status, bool) {
	if u.GetDeletionTimestamp() != nil {
		return kstatus.TerminatingStatus, true
	}
	phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
	if phase == "" {
		return "", false
	}
	observed, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
	if observed != u.GetGeneration() {
		return kstatus.InProgressStatus, true
	}
	switch petriv1.EnvironmentPhase(phase) {
	case petriv1.EnvironmentReady:
		return kstatus.CurrentStatus, true
	case petriv1.EnvironmentFailed, petriv1.EnvironmentStalled:
		return kstatus.FailedStatus, true
	default:
		// Degraded too: Reconciling stays True while the operator waits
		// for the workload to run again, so kstatus reads InProgress.
		// Sleeping too: Ready is False while asleep (it serves nothing), so
		// kstatus reads InProgress, never Failed.
		return kstatus.InProgressStatus, true
	}
}

// reconciling reports whether the object's Reconciling condition is True.
func reconciling(u *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == petriv1.ConditionReconciling {
			return m["status"] == "True"
		}
	}
	return false
}

// argoHealth is the Argo CD health each kstatus reading stands for; an
// asleep environment (Sleeping, not Reconciling) is Suspended.
var argoHealth = map[kstatus.Status]string{
	kstatus.InProgressStatus:  "Progressing",
	kstatus.TerminatingStatus: "Progressing",
	kstatus.CurrentStatus:     "Healthy",
	kstatus.FailedStatus:      "Degraded",
}

// healthCheck is the Argo CD health check of docs/integrations.md: the
// first lua block there.
func healthCheck(t *testing.T) string {
	t.Helper()
	root, err := controlplane.RepoRoot()
	require.NoError(t, err)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "integrations.md"))
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)```lua\n(.*?)```").FindSubmatch(doc)
	require.NotNil(t, m, "docs/integrations.md has a lua block")
	return string(m[1])
}

// runHealthCheck runs the health check on obj the way Argo CD does: the
// object as a Lua table in the global obj, the script's result a table.
func runHealthCheck(t *testing.T, script string, u *unstructured.Unstructured) (status, message string) {
	t.Helper()
	L := lua.NewState()
	defer L.Close()
	L.SetGlobal("obj", toLua(L, u.Object))
	require.NoError(t, L.DoString(script))
	hs, ok := L.Get(-1).(*lua.LTable)
	require.True(t, ok, "the health check returns a table")
	return lua.LVAsString(hs.RawGetString("status")), lua.LVAsString(hs.RawGetString("message"))
}

func toLua(L *lua.LState, v any) lua.LValue {
	switch v := v.(type) {
	case nil:
		return lua.LNil
	case bool:
		return lua.LBool(v)
	case string:
		return lua.LString(v)
	case int64:
		return lua.LNumber(v)
	case float64:
		return lua.LNumber(v)
	case map[string]any:
		t := L.NewTable()
		for k, e := range v {
			t.RawSetString(k, toLua(L, e))
		}
		return t
	case []any:
		t := L.NewTable()
		for _, e := range v {
			t.Append(toLua(L, e))
		}
		return t
	default:
		panic(fmt.Sprintf("no Lua value for %T", v))
	}
}

// healthFollower reads every version of one object that the API server
// stores, as the JSON a tool sees, and checks each against kstatus and the
// documented Argo CD health check.
type healthFollower struct {
	t      *testing.T
	w      watch.Interface
	script string
	// seen counts the versions by (phase, kstatus reading).
	seen map[string]int
	last *unstructured.Unstructured
}

func followHealth(t *testing.T, list string, name string) *healthFollower {
	t.Helper()
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(petriv1.GroupVersion.WithKind(list))
	w, err := env.Client.Watch(context.Background(), l, client.InNamespace(mgmtNS),
		client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", name)})
	require.NoError(t, err)
	t.Cleanup(w.Stop)
	return &healthFollower{t: t, w: w, script: healthCheck(t), seen: map[string]int{}}
}

// check reads one version of the object.
func (f *healthFollower) check(u *unstructured.Unstructured) {
	t := f.t
	t.Helper()
	res, err := kstatus.Compute(u)
	require.NoError(t, err)
	argo, msg := runHealthCheck(t, f.script, u)
	phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	where := fmt.Sprintf("%s generation %d, phase %q, conditions %v", u.GetName(), u.GetGeneration(), phase, conds)
	want, written := expectedKStatus(u)
	if !written {
		// Before the operator's first write kstatus has nothing to read
		// (docs/integrations.md); the health check waits.
		assert.Equal(t, "Progressing", argo, where)
		f.seen["unwritten/"+string(res.Status)]++
		return
	}
	if u.GetDeletionTimestamp() != nil {
		phase = "deleting"
	}
	assert.Equal(t, want, res.Status, "kstatus reads %s (%s)", res.Status, where)
	wantArgo := argoHealth[want]
	if phase == string(petriv1.EnvironmentSleeping) && !reconciling(u) {
		wantArgo = "Suspended"
	}
	if phase == string(petriv1.EnvironmentDegraded) && want == kstatus.InProgressStatus {
		// Deployed, a workload stopped: Argo CD's own word for it.
		wantArgo = "Degraded"
	}
	assert.Equal(t, wantArgo, argo, "Argo CD health check reads %s: %s (%s)", argo, msg, where)
	f.seen[phase+"/"+string(res.Status)]++
}

// until reads versions until cond holds for one, and returns that one; a
// deleted object ends the wait too.
func (f *healthFollower) until(what string, cond func(*unstructured.Unstructured) bool) *unstructured.Unstructured {
	t := f.t
	t.Helper()
	timeout := time.After(90 * time.Second)
	for {
		select {
		case ev, ok := <-f.w.ResultChan():
			require.True(t, ok, "watch closed while waiting for %s", what)
			u, isObj := ev.Object.(*unstructured.Unstructured)
			require.True(t, isObj, "watch event %s: %v", ev.Type, ev.Object)
			if ev.Type == watch.Deleted {
				require.Equal(t, "deleted", what, "object deleted while waiting for %s", what)
				return u
			}
			f.check(u)
			f.last = u
			if cond(u) {
				return u
			}
		case <-timeout:
			require.FailNowf(t, "never reached", "%s; last version: %v", what, f.last)
		}
	}
}

func phaseAt(phase petriv1.EnvironmentPhase) func(*unstructured.Unstructured) bool {
	return func(u *unstructured.Unstructured) bool {
		p, _, _ := unstructured.NestedString(u.Object, "status", "phase")
		o, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
		return p == string(phase) && o == u.GetGeneration()
	}
}

// kubectlWait runs kubectl wait in the background; the channel gets its
// error (nil: the condition was met) and output.
func kubectlWait(args ...string) chan string {
	done := make(chan string, 1)
	go func() {
		cmd := exec.Command(filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl"),
			append([]string{"--kubeconfig", env.Kubeconfig, "-n", mgmtNS, "wait"}, args...)...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		done <- fmt.Sprintf("err=%v %s", err, strings.TrimSpace(out.String()))
	}()
	return done
}

// Every version of an environment the API server stores, through a whole
// life (deploy, spec change, failed deploy, invalid spec, recovery,
// deletion), reads right through kstatus, the documented Argo CD health
// check and kubectl wait.
func TestEnvironmentHealthReadsRightThroughKStatus(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const name = "kstatus"
	// What is read is the status, not Helm: the Jobs are the stand-in's.
	standIn(t, name, succeedUnlessMissing)
	f := followHealth(t, "EphemeralEnvironmentList", name)

	require.NoError(t, env.Client.Create(ctx, newEnv(name, greeter("app"))))
	waited := kubectlWait("--for=condition=Ready", "ee/"+name, "--timeout=90s")
	f.until("ready", phaseAt(petriv1.EnvironmentReady))
	assert.Positive(t, f.seen["Deploying/InProgress"], "deploying is InProgress: %v", f.seen)
	assert.Positive(t, f.seen["Ready/Current"], "ready is Current: %v", f.seen)
	assert.Equal(t, "err=<nil> ephemeralenvironment.petri.dev/"+name+" condition met", <-waited)

	// A spec change: InProgress from the moment it is stored.
	update := func(change func(*petriv1.EphemeralEnvironment)) {
		e := get(t, name)
		change(e)
		require.NoError(t, env.Client.Update(ctx, e))
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(petriv1.GroupVersion.WithKind("EphemeralEnvironment"))
		require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(e), u))
		// Checked while the operator has not observed the change yet; it
		// may have, already, when the change needs no Job (a spec it
		// refuses).
		observed, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
		if u.GetGeneration() == e.Generation && observed < e.Generation {
			res, err := kstatus.Compute(u)
			require.NoError(t, err)
			assert.Equal(t, kstatus.InProgressStatus, res.Status, "generation %d is not observed yet", e.Generation)
		}
	}
	update(func(e *petriv1.EphemeralEnvironment) {
		e.Spec.Components[0].Values = jsonValues(map[string]any{"message": "changed"})
	})
	f.until("ready again", phaseAt(petriv1.EnvironmentReady))

	// A chart that does not exist: the deploy Job fails.
	update(func(e *petriv1.EphemeralEnvironment) {
		e.Spec.Components[0].Chart.Repository = missingChart
	})
	f.until("failed", phaseAt(petriv1.EnvironmentFailed))
	assert.Positive(t, f.seen["Failed/Failed"], "failed is Failed: %v", f.seen)
	notReady := kubectlWait("--for=condition=Ready", "ee/"+name, "--timeout=1s")
	assert.Contains(t, <-notReady, "timed out", "kubectl wait does not take a failed environment for ready")

	// An invalid spec (a cycle CEL cannot see): Stalled.
	update(func(e *petriv1.EphemeralEnvironment) {
		e.Spec.Components = []petriv1.Component{greeter("app", "b"), greeter("b", "app")}
	})
	f.until("stalled", phaseAt(petriv1.EnvironmentStalled))
	assert.Positive(t, f.seen["Stalled/Failed"], "stalled is Failed: %v", f.seen)

	// Fixed: Current again, nothing of the failure left.
	update(func(e *petriv1.EphemeralEnvironment) { e.Spec.Components = []petriv1.Component{greeter("app")} })
	last := f.until("ready after the fix", phaseAt(petriv1.EnvironmentReady))
	res, err := kstatus.Compute(last)
	require.NoError(t, err)
	assert.Equal(t, kstatus.CurrentStatus, res.Status)

	require.NoError(t, env.Client.Delete(ctx, get(t, name)))
	f.until("deleted", func(*unstructured.Unstructured) bool { return false })
	assert.Positive(t, f.seen["deleting/Terminating"], "deleting is Terminating: %v", f.seen)
}

// The same for a shared workload: deploying, ready, a failed deploy,
// recovery and deletion.
func TestSharedWorkloadHealthReadsRightThroughKStatus(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const name = "kstatus-sw"
	standIn(t, name, succeedUnlessMissing)
	f := followHealth(t, "SharedWorkloadList", name)
	sw := sharedWorkload(name, t.TempDir())
	require.NoError(t, env.Client.Create(ctx, sw))
	f.until("ready", phaseAt(petriv1.EnvironmentReady))
	assert.Positive(t, f.seen["Deploying/InProgress"], "deploying is InProgress: %v", f.seen)
	assert.Positive(t, f.seen["Ready/Current"], "ready is Current: %v", f.seen)

	update := func(repository string) {
		cur := &petriv1.SharedWorkload{}
		require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(sw), cur))
		cur.Spec.Chart.Repository = repository
		require.NoError(t, env.Client.Update(ctx, cur))
	}
	// A chart that does not exist: the deploy Job fails.
	update(missingChart)
	f.until("failed", phaseAt(petriv1.EnvironmentFailed))
	assert.Positive(t, f.seen["Failed/Failed"], "failed is Failed: %v", f.seen)

	update(imageCharts)
	f.until("ready again", phaseAt(petriv1.EnvironmentReady))

	require.NoError(t, env.Client.Delete(ctx, sw))
	f.until("deleted", func(*unstructured.Unstructured) bool { return false })
	assert.Positive(t, f.seen["deleting/Terminating"], "deleting is Terminating: %v", f.seen)
}
