package controllers_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

// Ready means running: a component's deploy waits until its pods run and
// pass their readiness probes, unless its release says wait: false. These
// tests deploy the example application, whose pods the local node runs
// (image appImage), so the wait sees them become ready, crash or stay
// unready.

// app is a component of the example application's chart running the
// example application, with extra environment variables and its default
// release options (it waits).
func app(name string, env map[string]any) petriv1.Component {
	c := petriv1.Component{Name: name, Chart: petriv1.ChartReference{Repository: imageCharts, Name: "example-app", Version: "0.1.0"}}
	c.Values = jsonValues(map[string]any{"image": map[string]any{"repository": appImage, "tag": "dev"}, "env": env})
	return c
}

// once is a component that gets one attempt: its failure is the
// generation's outcome.
func once(c petriv1.Component, timeout time.Duration) petriv1.Component {
	c.Retry = &petriv1.RetryPolicy{Attempts: ptr.To[int32](1)}
	if timeout > 0 {
		c.Release.Timeout = &metav1.Duration{Duration: timeout}
	}
	return c
}

func failed(e *petriv1.EphemeralEnvironment) bool {
	return e.Status.ObservedGeneration == e.Generation && e.Status.Phase == petriv1.EnvironmentFailed
}

// deployArgs are the arguments of the component's latest deploy Job.
func deployArgs(t *testing.T, e *petriv1.EphemeralEnvironment, component string) []string {
	t.Helper()
	var job batchv1.Job
	require.NoError(t, env.Client.Get(context.Background(), client.ObjectKey{Namespace: mgmtNS, Name: componentNamed(e, component).Job}, &job))
	return job.Spec.Template.Spec.Containers[0].Args
}

// appPods are the pods of the environment's namespace.
func appPods(t *testing.T, e *petriv1.EphemeralEnvironment) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	require.NoError(t, env.Client.List(context.Background(), &pods, client.InNamespace(e.Status.TargetNamespace)))
	return pods.Items
}

func TestComponentWaitsForItsPodsByDefault(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	require.NoError(t, env.Client.Create(ctx, newEnv("waits", app("web", nil))))
	e := waitFor(t, "waits", "ready", ready)
	assert.Contains(t, deployArgs(t, e, "web"), "--wait", "no release options: the deploy waits")
	cs := componentNamed(e, "web")
	assert.Equal(t, petriv1.ComponentDeployed, cs.Phase)
	assert.Empty(t, cs.Message, "waited for: nothing to say")
	assert.Equal(t, "environment is deployed in "+e.Status.TargetNamespace, findCondition(e, petriv1.ConditionReady).Message)
	pods := appPods(t, e)
	require.Len(t, pods, 1)
	assert.Equal(t, corev1.PodRunning, pods[0].Status.Phase, "Ready means running")
}

// A readiness probe that never passes: the deploy waits release.timeout,
// then fails naming the pod, its container and the probe; the environment
// is not Ready and says why.
func TestUnreadyComponentFailsNamingItsProbe(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	require.NoError(t, env.Client.Create(ctx, newEnv("unready", once(app("web", map[string]any{"READY": "false"}), 5*time.Second))))
	e := waitFor(t, "unready", "failed", failed)
	cs := componentNamed(e, "web")
	assert.Equal(t, petriv1.ComponentFailed, cs.Phase)
	assert.Regexp(t, `^Timeout: install web: release\.timeout 5s elapsed; pod web-[a-z0-9]+-[a-z0-9]+ container app not ready: readiness probe failing`, cs.LastError)
	ready := findCondition(e, petriv1.ConditionReady)
	assert.Equal(t, metav1.ConditionFalse, ready.Status)
	assert.Contains(t, ready.Message, "web (Timeout: install web: release.timeout 5s elapsed; pod web-")
	assert.Contains(t, ready.Message, "container app not ready: readiness probe failing")
}

// A container that crashes on start: the deploy gives up once it was
// restarted three times, long before release.timeout, with its exit code
// and the last line it logged; the Job fails at once (no second pod), and
// the operator starts no other: a new generation is what fixes it.
func TestCrashingComponentFailsWithItsLastLogLine(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := app("web", map[string]any{"FAIL_ON_START": "cannot reach the database at postgres://app:s3cret@db:5432/shop"})
	c.Release.Timeout = &metav1.Duration{Duration: 10 * time.Minute}
	require.NoError(t, env.Client.Create(ctx, newEnv("crashing", c)))
	e := waitFor(t, "crashing", "failed", failed)
	cs := componentNamed(e, "web")
	assert.Regexp(t, `^ContainerCrashed: install web: pod web-[a-z0-9]+-[a-z0-9]+ container app crashed \(restarted [0-9]+ times, exit code 1, Error\); `+
		`last log line: "petri-example-app: cannot reach the database at postgres://\*\*\*@db:5432/shop"`, cs.LastError)
	assert.NotContains(t, cs.LastError, "s3cret", "the password in the URL is not quoted")
	assert.Nil(t, cs.NextRetryAt, "no retry: another Job deploys the same pods")
	assert.Equal(t, int32(1), cs.Attempt)
	reason, _, pods := jobFailure(t, cs.Job)
	assert.Equal(t, batchv1.JobReasonPodFailurePolicy, reason, "the deployer's final exit code ended the Job")
	assert.Len(t, pods, 1)
	stalled := findCondition(e, petriv1.ConditionStalled)
	assert.Equal(t, metav1.ConditionTrue, stalled.Status)
	assert.Contains(t, stalled.Message, `last log line: "petri-example-app: cannot reach the database`)
}

// A pod no node can take: the deploy waits release.timeout (a cluster may
// add nodes), then fails naming the pod and the scheduler's message; it
// may be retried.
func TestUnschedulableComponentNamesThePod(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := once(app("web", nil), 4*time.Second)
	c.Values = jsonValues(map[string]any{"image": map[string]any{"repository": appImage, "tag": "dev"},
		"resources": map[string]any{"requests": map[string]any{"cpu": "100000", "memory": "16Mi"}}})
	require.NoError(t, env.Client.Create(ctx, newEnv("unschedulable", c)))
	e := waitFor(t, "unschedulable", "failed", failed)
	cs := componentNamed(e, "web")
	assert.Regexp(t, `^Unschedulable: install web: release\.timeout 4s elapsed; pod web-[a-z0-9]+-[a-z0-9]+ cannot be scheduled: .*requests 100000000m`, cs.LastError)
	assert.Contains(t, cs.Message, "failed after 1 attempts", "retryable, but this component allows one attempt")
}

// wait: false deploys without waiting: the environment is Ready though its
// pod is not, and its status says it was not waited for.
func TestComponentNotWaitedForSaysSo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := app("web", map[string]any{"READY": "false"})
	c.Release.Wait = new(false)
	require.NoError(t, env.Client.Create(ctx, newEnv("nowait", c, app("api", nil))))
	e := waitFor(t, "nowait", "ready", ready)
	assert.NotContains(t, deployArgs(t, e, "web"), "--wait")
	assert.Contains(t, deployArgs(t, e, "api"), "--wait")
	assert.Equal(t, "not waited for: release.wait is false", componentNamed(e, "web").Message)
	assert.Empty(t, componentNamed(e, "api").Message)
	assert.Equal(t, "environment is deployed in "+e.Status.TargetNamespace+"; not waited for (release.wait is false): web", findCondition(e, petriv1.ConditionReady).Message)
	assert.Equal(t, "2 components deployed; not waited for (release.wait is false): web", findCondition(e, petriv1.ConditionComponentsDeployed).Message)
	unready := slices.ContainsFunc(appPods(t, e), func(p corev1.Pod) bool {
		return strings.HasPrefix(p.Name, "web-") && !podReady(p)
	})
	assert.True(t, unready, "its pod is not ready, and the environment did not wait for it")
}

func podReady(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
