package chaos

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/sync/render"
)

// The invariant checkers judge what the watches delivered; these tests feed
// them the objects a watch would and check each one tells a breach from a
// legitimate history.

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func at(s int) metav1.Time { return metav1.NewTime(t0.Add(time.Duration(s) * time.Second)) }

// helmPod is a deployer pod of a Helm action on ns/release that ran from
// start to end (seconds after t0; end < 0: still running).
func helmPod(uid, action, ns, release string, start, end int) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-" + uid, UID: types.UID(uid), Labels: map[string]string{batchv1.JobNameLabel: "job-" + uid}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Args: []string{action, "--release", release, "--namespace", ns}}}},
	}
	cs := corev1.ContainerStatus{Name: "main"}
	if end < 0 {
		cs.State.Running = &corev1.ContainerStateRunning{StartedAt: at(start)}
	} else {
		cs.State.Terminated = &corev1.ContainerStateTerminated{StartedAt: at(start), FinishedAt: at(end)}
	}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{cs}
	return p
}

func TestHelmOverlaps(t *testing.T) {
	for _, tc := range []struct {
		name string
		pods []*corev1.Pod
		// deleted pods were deleted (at deletedAt) before reporting an end.
		deleted   string
		deletedAt int
		want      int
	}{
		{name: "one after the other", pods: []*corev1.Pod{helmPod("a", "deploy", "ns", "web", 0, 5), helmPod("b", "deploy", "ns", "web", 5, 9)}},
		{name: "at once", pods: []*corev1.Pod{helmPod("a", "deploy", "ns", "web", 0, 5), helmPod("b", "deploy", "ns", "web", 3, 9)}, want: 1},
		{name: "undeploy during deploy", pods: []*corev1.Pod{helmPod("a", "deploy", "ns", "web", 0, 10), helmPod("b", "undeploy", "ns", "web", 2, 4)}, want: 1},
		{name: "other releases", pods: []*corev1.Pod{helmPod("a", "deploy", "ns", "web", 0, 5), helmPod("b", "deploy", "ns", "api", 1, 4), helmPod("c", "deploy", "other", "web", 1, 4)}},
		{name: "still running", pods: []*corev1.Pod{helmPod("a", "deploy", "ns", "web", 0, -1), helmPod("b", "deploy", "ns", "web", 30, 40)}, want: 1},
		{name: "deleted while running, then the next one", pods: []*corev1.Pod{helmPod("a", "deploy", "ns", "web", 0, -1), helmPod("b", "deploy", "ns", "web", 8, 12)}, deleted: "a", deletedAt: 6},
		{name: "deleted while the next one ran", pods: []*corev1.Pod{helmPod("a", "deploy", "ns", "web", 0, -1), helmPod("b", "deploy", "ns", "web", 4, 12)}, deleted: "a", deletedAt: 6, want: 1},
		{name: "not a Helm operation", pods: []*corev1.Pod{helmPod("a", "deploy", "ns", "web", 0, 5), helmPod("b", "verify", "ns", "web", 1, 2)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRecorder(nil)
			for _, p := range tc.pods {
				r.onPod(p, false)
			}
			if tc.deleted != "" {
				r.onPod(helmPod(tc.deleted, "deploy", "ns", "web", 0, -1), true)
				r.pods[types.UID(tc.deleted)].deleted = t0.Add(time.Duration(tc.deletedAt) * time.Second)
			}
			got := r.helmOverlaps(t0.Add(time.Minute))
			assert.Len(t, got, tc.want, "%v", got)
			for _, v := range got {
				assert.Equal(t, NoHelmOverlap, v.Invariant)
			}
		})
	}
}

// job is a Job of an environment's work, created s seconds after t0.
func job(uid, env, action, generation string, created int, failed, succeeded int) *batchv1.Job {
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{
		Name: "job-" + uid, UID: types.UID(uid), CreationTimestamp: at(created),
		Labels: map[string]string{
			petriv1.LabelEnvironmentUID: "env-" + env, petriv1.LabelEnvironment: env,
			labelComponent: "web", labelAction: action, labelGeneration: generation,
		},
	}}
	if failed >= 0 {
		j.Status.Conditions = append(j.Status.Conditions, batchv1.JobCondition{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, LastTransitionTime: at(failed)})
	}
	if succeeded >= 0 {
		j.Status.Conditions = append(j.Status.Conditions, batchv1.JobCondition{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: at(succeeded)})
	}
	return j
}

func TestDuplicateJobs(t *testing.T) {
	for _, tc := range []struct {
		name   string
		jobs   []*batchv1.Job
		excuse int // seconds after t0 a fault hit the environment; -1 none
		want   int
	}{
		{name: "one Job per generation", jobs: []*batchv1.Job{job("a", "e", "deploy", "1", 0, -1, 5), job("b", "e", "deploy", "2", 6, -1, 9)}, excuse: -1},
		{name: "a second Job while the first runs", jobs: []*batchv1.Job{job("a", "e", "deploy", "1", 0, -1, -1), job("b", "e", "deploy", "1", 3, -1, -1)}, excuse: -1, want: 1},
		{name: "the same work again after success", jobs: []*batchv1.Job{job("a", "e", "deploy", "1", 0, -1, 5), job("b", "e", "deploy", "1", 9, -1, -1)}, excuse: -1, want: 1},
		{name: "a retry after a failure", jobs: []*batchv1.Job{job("a", "e", "undeploy", "3", 0, 4, -1), job("b", "e", "undeploy", "3", 9, -1, 12)}, excuse: -1},
		{name: "again after a fault removed the work", jobs: []*batchv1.Job{job("a", "e", "deploy", "1", 0, -1, 5), job("b", "e", "deploy", "1", 9, -1, -1)}, excuse: 7},
		{name: "a fault before the first Job excuses nothing", jobs: []*batchv1.Job{job("a", "e", "deploy", "1", 10, -1, 15), job("b", "e", "deploy", "1", 19, -1, -1)}, excuse: 2, want: 1},
		{name: "other environments", jobs: []*batchv1.Job{job("a", "e", "deploy", "1", 0, -1, -1), job("b", "f", "deploy", "1", 1, -1, -1)}, excuse: -1},
		{name: "periodic verify Jobs", jobs: []*batchv1.Job{job("a", "e", "verify", "1", 0, -1, 2), job("b", "e", "verify", "1", 30, -1, 32)}, excuse: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRecorder(nil)
			for _, j := range tc.jobs {
				r.onJob(j, false)
			}
			if tc.excuse >= 0 {
				r.excuses["env-e"] = []time.Time{t0.Add(time.Duration(tc.excuse) * time.Second)}
			}
			got := r.duplicateJobs()
			assert.Len(t, got, tc.want, "%v", got)
		})
	}
}

func env(name, uid, target string) *petriv1.EphemeralEnvironment {
	return &petriv1.EphemeralEnvironment{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(uid), Labels: map[string]string{}},
		Status:     petriv1.EphemeralEnvironmentStatus{TargetNamespace: target},
	}
}

func bound(e *petriv1.EphemeralEnvironment) *petriv1.EphemeralEnvironment {
	e.Status.Conditions = []metav1.Condition{{Type: petriv1.ConditionNamespaceBound, Status: metav1.ConditionTrue, Reason: petriv1.ReasonNamespaceBindSucceeded}}
	return e
}

func TestTargetNamespaceChanges(t *testing.T) {
	r := newRecorder(nil)
	r.onEnvironment(env("e", "u1", ""), false)
	r.onEnvironment(env("e", "u1", "e-abcd"), false)
	r.onEnvironment(bound(env("e", "u1", "e-abcd")), false)
	assert.Empty(t, r.targetMoves(), "setting it once is no change")
	r.onEnvironment(bound(env("e", "u1", "e-abcde")), false)
	got := r.targetMoves()
	require.Len(t, got, 1)
	assert.Equal(t, NamespaceStable, got[0].Invariant)
	assert.Equal(t, "e", got[0].Env)
	assert.Contains(t, got[0].Detail, "bound there")
	r.onEnvironment(env("f", "u2", "f-1234"), false)
	assert.Len(t, r.targetMoves(), 1, "another environment's namespace is its own")
}

func TestReservedTargetMayMove(t *testing.T) {
	r := newRecorder(nil)
	// g reserved g-1234, someone else took the name first, g reserved
	// g-12345 and bound it: the lock was never taken.
	r.markForeign("g-1234", "")
	r.onNamespace(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "g-1234", UID: "squat",
		Labels: map[string]string{petriv1.LabelEnvironmentUID: "u3"}}}, false)
	r.onEnvironment(env("g", "u3", "g-1234"), false)
	r.onEnvironment(env("g", "u3", "g-12345"), false)
	r.onEnvironment(bound(env("g", "u3", "g-12345")), false)
	assert.Empty(t, r.targetMoves(), "a reserved name given up is no change of the bound one")

	// h reserved h-1234 and Petri made the namespace, then the target
	// moved before the bind was seen: that breaks the lock.
	r.onNamespace(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "h-1234", UID: "made",
		Labels: map[string]string{petriv1.LabelEnvironmentUID: "u4"}}}, false)
	r.onEnvironment(env("h", "u4", "h-1234"), false)
	r.onEnvironment(env("h", "u4", "h-12345"), false)
	got := r.targetMoves()
	require.Len(t, got, 1)
	assert.Equal(t, "h", got[0].Env)
	assert.Contains(t, got[0].Detail, "Petri had made its namespace there")
}

func TestUnjustifiedDeletions(t *testing.T) {
	closed := map[int]bool{7: true}
	r := newRecorder(func(_, _ string, n int) bool { return closed[n] })
	deleting := func(e *petriv1.EphemeralEnvironment) *petriv1.EphemeralEnvironment {
		now := metav1.Now()
		e.DeletionTimestamp = &now
		return e
	}
	byPR := func(name, uid string, n string) *petriv1.EphemeralEnvironment {
		e := env(name, uid, "")
		e.Labels = map[string]string{petriv1.LabelManagedBy: render.ManagedBy, render.LabelApplication: "chaos", render.LabelPullRequest: n}
		return e
	}

	r.userDelete("u1")
	r.onEnvironment(deleting(env("by-user", "u1", "")), false)
	r.onEnvironment(deleting(byPR("closed-pr", "u2", "7")), false)
	assert.Empty(t, r.drainLive(), "a user's delete and a closed pull request justify a deletion")

	r.onEnvironment(deleting(byPR("open-pr", "u3", "8")), false)
	r.onEnvironment(env("nobody", "u4", ""), true)
	got := r.drainLive()
	require.Len(t, got, 2)
	for _, v := range got {
		assert.Equal(t, NoUnjustifiedDeletion, v.Invariant)
	}
	r.onEnvironment(env("nobody", "u4", ""), true)
	assert.Empty(t, r.drainLive(), "each deletion counts once")
}

func namespace(name, uid, envUID string) *corev1.Namespace {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(uid), CreationTimestamp: at(0)}}
	if envUID != "" {
		ns.Labels = map[string]string{petriv1.LabelManagedBy: petriv1.ManagedByOperator, petriv1.LabelEnvironmentUID: envUID}
	}
	return ns
}

func TestOrphanNamespaces(t *testing.T) {
	r := newRecorder(nil)
	r.onEnvironment(env("alive", "u1", "alive-1111"), false)
	r.onNamespace(namespace("alive-1111", "n1", "u1"), false)
	r.onEnvironment(env("gone", "u2", "gone-2222"), false)
	r.onNamespace(namespace("gone-2222", "n2", "u2"), false)
	r.onEnvironment(env("cleaned", "u3", "cleaned-3333"), false)
	r.onNamespace(namespace("cleaned-3333", "n3", "u3"), false)
	r.onEnvironment(env("tampered", "u4", "tampered-4444"), false)
	r.onNamespace(namespace("tampered-4444", "n4", ""), false)
	r.onNamespace(namespace("squat", "n5", "u2"), false)
	r.markForeign("squat", "n5")
	r.markForeign("tampered-4444", "n4")
	assert.Empty(t, r.orphanCandidates())

	r.onEnvironment(env("gone", "u2", "gone-2222"), true)
	r.onEnvironment(env("cleaned", "u3", "cleaned-3333"), true)
	r.onNamespace(namespace("cleaned-3333", "n3", "u3"), true)
	r.onEnvironment(env("tampered", "u4", "tampered-4444"), true)
	got := r.orphanCandidates()
	require.Len(t, got, 1, "%v", got)
	assert.Equal(t, "gone", got["gone-2222"].env)
}
