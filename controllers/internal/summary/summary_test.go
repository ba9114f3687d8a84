package summary

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

// Every reason of the API has a severity: the failures that are an
// outcome (the <Action>Failed reasons) are Error, the problems that need a
// person (or a cluster back) without being an outcome are Warning, the rest
// Info.
func TestSeverityOfEveryReason(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filepath.Join("..", "..", "..", "api", "v1alpha1", "conditions.go"), nil, 0)
	require.NoError(t, err)
	var reasons []string
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || len(vs.Names) != 1 || !strings.HasPrefix(vs.Names[0].Name, "Reason") || len(vs.Values) != 1 {
			return true
		}
		if lit, ok := vs.Values[0].(*ast.BasicLit); ok {
			v, err := strconv.Unquote(lit.Value)
			require.NoError(t, err)
			reasons = append(reasons, v)
		}
		return true
	})
	require.Greater(t, len(reasons), 20, "the reasons of conditions.go")
	for _, r := range reasons {
		want := Info
		switch {
		case strings.HasSuffix(r, "Failed"):
			want = Error
		case r == petriv1.ReasonNamespaceNotOwned || r == petriv1.ReasonInvalidSpec || r == petriv1.ReasonDeployerNotAuthorized,
			r == petriv1.ReasonClusterNotFound || r == petriv1.ReasonClusterUnreachable, r == petriv1.ReasonWorkloadsUnhealthy:
			want = Warning
		}
		assert.Equal(t, want, Of(r), r)
	}
}

func cond(t, reason string, status metav1.ConditionStatus, gen int64) metav1.Condition {
	return metav1.Condition{Type: t, Status: status, Reason: reason, Message: t + " says " + reason, ObservedGeneration: gen}
}

var required = []string{petriv1.ConditionNamespaceBound, petriv1.ConditionSharedWorkloadsBound, petriv1.ConditionComponentsDeployed}

// Conditions of generation 2 (boundOld of generation 1), as the tables use
// them.
var (
	bound        = cond(petriv1.ConditionNamespaceBound, petriv1.ReasonNamespaceBindSucceeded, metav1.ConditionTrue, 2)
	boundOld     = cond(petriv1.ConditionNamespaceBound, petriv1.ReasonNamespaceBindSucceeded, metav1.ConditionTrue, 1)
	bindsOK      = cond(petriv1.ConditionSharedWorkloadsBound, petriv1.ReasonBindSucceeded, metav1.ConditionTrue, 2)
	binding      = cond(petriv1.ConditionSharedWorkloadsBound, petriv1.ReasonBindProgressing, metav1.ConditionFalse, 2)
	deployed     = cond(petriv1.ConditionComponentsDeployed, petriv1.ReasonDeploySucceeded, metav1.ConditionTrue, 2)
	deployFailed = cond(petriv1.ConditionComponentsDeployed, petriv1.ReasonDeployFailed, metav1.ConditionFalse, 2)
	retrying     = cond(petriv1.ConditionComponentsDeployed, petriv1.ReasonDeployRetrying, metav1.ConditionFalse, 2)
	progressing  = cond(petriv1.ConditionComponentsDeployed, petriv1.ReasonDeployProgressing, metav1.ConditionFalse, 2)
)

func TestJudge(t *testing.T) {
	tests := map[string]struct {
		conds []metav1.Condition
		want  Outcome
		final bool
	}{
		"all met":     {[]metav1.Condition{bound, bindsOK, deployed}, Outcome{}, true},
		"nothing yet": {nil, Outcome{Pending: petriv1.ReasonProgressing, Message: "waiting for NamespaceBound"}, false},
		"an older generation's condition waits": {[]metav1.Condition{boundOld, bindsOK, deployed},
			Outcome{Pending: petriv1.ReasonProgressing, Message: "waiting for NamespaceBound"}, false},
		"failed, nothing runs": {[]metav1.Condition{bound, bindsOK, deployFailed},
			Outcome{Failed: petriv1.ReasonDeployFailed, Message: deployFailed.Message}, true},
		"retrying is not final": {[]metav1.Condition{bound, bindsOK, retrying},
			Outcome{Pending: petriv1.ReasonDeployRetrying, Message: retrying.Message}, false},
		"failed while a binding still moves": {[]metav1.Condition{bound, binding, deployFailed},
			Outcome{Failed: petriv1.ReasonDeployFailed, Pending: petriv1.ReasonBindProgressing, Message: deployFailed.Message}, false},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got := Judge(tt.conds, 2, required)
			assert.Equal(t, tt.want, got)
			assert.Equal(t, tt.final, got.Final())
		})
	}
}

func TestDecide(t *testing.T) {
	obs := func(f func(*Observations), conds ...metav1.Condition) Observations {
		o := Observations{Generation: 2, Conditions: conds, Required: required, Namespace: "shop-pr-7-c0ff", NamespaceBound: true}
		if f != nil {
			f(&o)
		}
		return o
	}
	f, t0, tr := metav1.ConditionFalse, metav1.ConditionTrue, errors.New("get job: connection refused")
	sick := "Deployment web: Available: 0/1"
	tests := map[string]struct {
		in   Observations
		want Verdict
	}{
		"ready": {obs(nil, bound, bindsOK, deployed), Verdict{Phase: petriv1.EnvironmentReady,
			Ready:       Condition{t0, petriv1.ReasonSucceeded, "environment is deployed in shop-pr-7-c0ff"},
			Reconciling: Condition{f, petriv1.ReasonSucceeded, ""}, Stalled: StalledRemoved, Observed: true}},
		"ready, some components not waited for": {obs(func(o *Observations) { o.NotWaitedFor = []string{"web", "api"} }, bound, bindsOK, deployed), Verdict{Phase: petriv1.EnvironmentReady,
			Ready:       Condition{t0, petriv1.ReasonSucceeded, "environment is deployed in shop-pr-7-c0ff; not waited for (release.wait is false): web, api"},
			Reconciling: Condition{f, petriv1.ReasonSucceeded, ""}, Stalled: StalledRemoved, Observed: true}},
		"deployed, but the pass failed: not Ready yet": {obs(func(o *Observations) { o.Err = tr }, bound, bindsOK, deployed), Verdict{Phase: petriv1.EnvironmentDeploying,
			Ready:       Condition{f, petriv1.ReasonProgressing, "retrying: " + tr.Error()},
			Reconciling: Condition{t0, petriv1.ReasonProgressing, "retrying: " + tr.Error()}, Stalled: StalledRemoved}},
		"Ready, then a pass fails: still Ready, retrying": {obs(func(o *Observations) { o.Err, o.ReadyBefore = tr, true }, bound, bindsOK, deployed), Verdict{Phase: petriv1.EnvironmentReady,
			Ready:       Condition{t0, petriv1.ReasonSucceeded, "environment is deployed in shop-pr-7-c0ff"},
			Reconciling: Condition{t0, petriv1.ReasonProgressing, "retrying: " + tr.Error()}, Stalled: StalledRemoved, Observed: true}},
		"Ready, then evidence of a loss: not Ready": {obs(func(o *Observations) { o.Err, o.ReadyBefore = tr, true }, bound, bindsOK, progressing), Verdict{Phase: petriv1.EnvironmentDeploying,
			Ready:       Condition{f, petriv1.ReasonDeployProgressing, "retrying: " + tr.Error()},
			Reconciling: Condition{t0, petriv1.ReasonDeployProgressing, "retrying: " + tr.Error()}, Stalled: StalledRemoved}},
		"deployed, but a workload stopped: Degraded": {obs(func(o *Observations) { o.Unhealthy = sick }, bound, bindsOK, deployed), Verdict{Phase: petriv1.EnvironmentDegraded,
			Ready:       Condition{f, petriv1.ReasonWorkloadsUnhealthy, sick},
			Reconciling: Condition{t0, petriv1.ReasonWorkloadsUnhealthy, sick}, Stalled: StalledRemoved, Observed: true}},
		"Degraded, then a pass fails: still Degraded, retrying": {obs(func(o *Observations) { o.Unhealthy, o.Err, o.DegradedBefore = sick, tr, true }, bound, bindsOK, deployed), Verdict{Phase: petriv1.EnvironmentDegraded,
			Ready:       Condition{f, petriv1.ReasonWorkloadsUnhealthy, sick},
			Reconciling: Condition{t0, petriv1.ReasonWorkloadsUnhealthy, "retrying: " + tr.Error()}, Stalled: StalledRemoved, Observed: true}},
		"Degraded, healed while a pass fails: Ready, retrying": {obs(func(o *Observations) { o.Err, o.DegradedBefore = tr, true }, bound, bindsOK, deployed), Verdict{Phase: petriv1.EnvironmentReady,
			Ready:       Condition{t0, petriv1.ReasonSucceeded, "environment is deployed in shop-pr-7-c0ff"},
			Reconciling: Condition{t0, petriv1.ReasonProgressing, "retrying: " + tr.Error()}, Stalled: StalledRemoved, Observed: true}},
		"still deploying: its workloads are not judged": {obs(func(o *Observations) { o.Unhealthy = sick }, bound, bindsOK, progressing), Verdict{Phase: petriv1.EnvironmentDeploying,
			Ready:       Condition{f, petriv1.ReasonDeployProgressing, progressing.Message},
			Reconciling: Condition{t0, petriv1.ReasonDeployProgressing, progressing.Message}, Stalled: StalledRemoved}},
		"failed: its workloads are not judged": {obs(func(o *Observations) { o.Unhealthy = sick }, bound, bindsOK, deployFailed), Verdict{Phase: petriv1.EnvironmentFailed,
			Ready:       Condition{f, petriv1.ReasonDeployFailed, deployFailed.Message},
			Reconciling: Condition{f, petriv1.ReasonDeployFailed, deployFailed.Message},
			Stalled:     StalledRenewed, StalledReason: petriv1.ReasonDeployFailed, StalledMessage: deployFailed.Message, Observed: true}},
		"asleep: its workloads at zero are not judged": {obs(func(o *Observations) {
			o.Sleep, o.Unhealthy = &Sleep{Reason: petriv1.ReasonSleeping, Message: "asleep"}, sick
		}, bound, bindsOK, deployed),
			Verdict{Phase: petriv1.EnvironmentSleeping, Ready: Condition{f, petriv1.ReasonSleeping, "asleep"},
				Reconciling: Condition{f, petriv1.ReasonSleeping, "asleep"}, Stalled: StalledRemoved, Observed: true}},
		"deploying": {obs(nil, bound, bindsOK, progressing), Verdict{Phase: petriv1.EnvironmentDeploying,
			Ready:       Condition{f, petriv1.ReasonDeployProgressing, progressing.Message},
			Reconciling: Condition{t0, petriv1.ReasonDeployProgressing, progressing.Message}, Stalled: StalledRemoved}},
		"pending before the namespace is bound": {obs(func(o *Observations) { o.NamespaceBound = false }), Verdict{Phase: petriv1.EnvironmentPending,
			Ready:       Condition{f, petriv1.ReasonProgressing, "waiting for NamespaceBound"},
			Reconciling: Condition{t0, petriv1.ReasonProgressing, "waiting for NamespaceBound"}, Stalled: StalledRemoved}},
		"failed: final, Stalled": {obs(nil, bound, bindsOK, deployFailed), Verdict{Phase: petriv1.EnvironmentFailed,
			Ready:       Condition{f, petriv1.ReasonDeployFailed, deployFailed.Message},
			Reconciling: Condition{f, petriv1.ReasonDeployFailed, deployFailed.Message},
			Stalled:     StalledRenewed, StalledReason: petriv1.ReasonDeployFailed, StalledMessage: deployFailed.Message, Observed: true}},
		"a terminal error is no retry": {obs(func(o *Observations) { o.Err = reconcile.TerminalError(errors.New("bad")) }, bound, bindsOK, progressing), Verdict{Phase: petriv1.EnvironmentDeploying,
			Ready:       Condition{f, petriv1.ReasonDeployProgressing, progressing.Message},
			Reconciling: Condition{t0, petriv1.ReasonDeployProgressing, progressing.Message}, Stalled: StalledRemoved}},
		"needs a person": {obs(func(o *Observations) { o.StalledReason, o.StalledMessage = petriv1.ReasonInvalidSpec, "bad spec" }, bound), Verdict{Phase: petriv1.EnvironmentStalled,
			Ready: Condition{f, petriv1.ReasonInvalidSpec, "bad spec"}, Reconciling: Condition{f, petriv1.ReasonInvalidSpec, "bad spec"},
			Stalled: StalledSet, StalledReason: petriv1.ReasonInvalidSpec, StalledMessage: "bad spec", Observed: true}},
		"tearing down": {obs(func(o *Observations) { o.Deleting = true }, bound, bindsOK, deployed), Verdict{Phase: petriv1.EnvironmentDeleting,
			Ready:       Condition{f, petriv1.ReasonTeardownProgressing, "tearing down"},
			Reconciling: Condition{t0, petriv1.ReasonTeardownProgressing, "tearing down"}}},
		"a teardown step fails": {obs(func(o *Observations) { o.Deleting, o.TeardownProblem = true, "undeploy components: boom" }), Verdict{Phase: petriv1.EnvironmentDeleting,
			Ready:       Condition{f, petriv1.ReasonTeardownFailed, "undeploy components: boom"},
			Reconciling: Condition{t0, petriv1.ReasonTeardownProgressing, "tearing down"}}},
		"a teardown that needs a person": {obs(func(o *Observations) {
			o.Deleting, o.TeardownProblem, o.StalledReason, o.StalledMessage = true, "x", petriv1.ReasonNamespaceNotOwned, "not ours"
		}), Verdict{Phase: petriv1.EnvironmentDeleting,
			Ready:       Condition{f, petriv1.ReasonNamespaceNotOwned, "not ours"},
			Reconciling: Condition{t0, petriv1.ReasonTeardownProgressing, "tearing down"},
			Stalled:     StalledSet, StalledReason: petriv1.ReasonNamespaceNotOwned, StalledMessage: "not ours"}},
		"asleep: Current, whatever the deploy's outcome": {obs(func(o *Observations) { o.Sleep = &Sleep{Reason: petriv1.ReasonSleeping, Message: "asleep"} }, bound, bindsOK, deployFailed),
			Verdict{Phase: petriv1.EnvironmentSleeping, Ready: Condition{f, petriv1.ReasonSleeping, "asleep"},
				Reconciling: Condition{f, petriv1.ReasonSleeping, "asleep"}, Stalled: StalledRemoved, Observed: true}},
		"going to sleep": {obs(func(o *Observations) {
			o.Sleep = &Sleep{Reason: petriv1.ReasonSleeping, Message: "going", Reconciling: true}
		}),
			Verdict{Phase: petriv1.EnvironmentSleeping, Ready: Condition{f, petriv1.ReasonSleeping, "going"},
				Reconciling: Condition{t0, petriv1.ReasonSleeping, "going"}, Stalled: StalledRemoved}},
		"asleep, the pass failed": {obs(func(o *Observations) { o.Sleep, o.Err = &Sleep{Reason: petriv1.ReasonSleeping, Message: "asleep"}, tr }),
			Verdict{Phase: petriv1.EnvironmentSleeping, Ready: Condition{f, petriv1.ReasonSleeping, "asleep"},
				Reconciling: Condition{t0, petriv1.ReasonSleeping, "retrying: " + tr.Error()}, Stalled: StalledRemoved}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, tt.want, Decide(tt.in), fmt.Sprintf("%+v", tt.in))
		})
	}
}
