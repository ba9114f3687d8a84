package controllers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/petri-dev/petri/api/contract"
	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/jobs"
)

func jsonValues(v map[string]any) *apiextensionsv1.JSON {
	data, _ := json.Marshal(v)
	return &apiextensionsv1.JSON{Raw: data}
}

// component is a component of a chart the deployer image carries or a test
// repository serves. Its pods run nowhere here (the local node does not
// know the example charts' image), so it opts out of the wait for them;
// the tests of the wait (wait_test.go) use charts whose pods run.
func component(name, repository, chart, version string, dependsOn ...string) petriv1.Component {
	return petriv1.Component{Name: name, Chart: petriv1.ChartReference{Repository: repository, Name: chart, Version: version}, DependsOn: dependsOn,
		Release: noWait()}
}

// noWait is the release options of a component whose pods run nowhere here.
func noWait() petriv1.ReleaseOptions { return petriv1.ReleaseOptions{Wait: new(false)} }

func ready(e *petriv1.EphemeralEnvironment) bool {
	return e.Status.ObservedGeneration == e.Generation && conditionIs(e, petriv1.ConditionReady, metav1.ConditionTrue, petriv1.ReasonSucceeded)
}

// jobEvents records, per Job of one environment, the revision at which it was
// created and at which it finished (its pod succeeded, or the Job says it
// finished, whichever came first): etcd's global order of events.
//
// Its watches are read by goroutines of their own, and the test reads the
// environment on another connection: the environment can show what a Job
// did before the Job's event has been read here. So every accessor first
// waits until the events of every Job and pod the API server lists now are
// in (caughtUp).
type jobEvents struct {
	t        testing.TB
	envName  string
	mu       sync.Mutex
	created  map[string]uint64
	finished map[string]uint64
	byName   map[string]*batchv1.Job
	// seen is the newest revision read of each Job and pod.
	seen map[types.UID]uint64
	stop func()
}

func watchJobs(t *testing.T, envName string) *jobEvents {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := env.Client.Watch(ctx, &batchv1.JobList{}, client.InNamespace(mgmtNS), client.MatchingLabels{petriv1.LabelEnvironment: envName})
	require.NoError(t, err)
	je := &jobEvents{t: t, envName: envName, created: map[string]uint64{}, finished: map[string]uint64{}, byName: map[string]*batchv1.Job{}, seen: map[types.UID]uint64{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			j, ok := ev.Object.(*batchv1.Job)
			if !ok {
				continue
			}
			n, _ := strconv.ParseUint(j.ResourceVersion, 10, 64)
			key := j.Labels[contract.LabelAction] + "/" + j.Labels[contract.LabelComponent] + "/" + j.Labels[contract.LabelGeneration]
			je.mu.Lock()
			je.seen[j.UID] = max(je.seen[j.UID], n)
			if ev.Type == watch.Added {
				if _, seen := je.created[key]; !seen {
					je.created[key] = n
				}
			}
			if fin, _, _ := jobs.Finished(j); fin {
				if was, seen := je.finished[key]; !seen || n < was {
					je.finished[key] = n
				}
			}
			je.byName[key] = j
			je.mu.Unlock()
		}
	}()
	pw, err := env.Client.Watch(ctx, &corev1.PodList{}, client.InNamespace(mgmtNS), client.MatchingLabels{petriv1.LabelEnvironment: envName})
	require.NoError(t, err)
	podsDone := make(chan struct{})
	go func() {
		defer close(podsDone)
		for ev := range pw.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			n, _ := strconv.ParseUint(p.ResourceVersion, 10, 64)
			je.mu.Lock()
			je.seen[p.UID] = max(je.seen[p.UID], n)
			if p.Status.Phase == corev1.PodSucceeded {
				key := p.Labels[contract.LabelAction] + "/" + p.Labels[contract.LabelComponent] + "/" + p.Labels[contract.LabelGeneration]
				if fin, seen := je.finished[key]; !seen || n < fin {
					je.finished[key] = n
				}
			}
			je.mu.Unlock()
		}
	}()
	je.stop = func() { cancel(); w.Stop(); pw.Stop(); <-done; <-podsDone }
	t.Cleanup(je.stop)
	return je
}

// caughtUp waits until the watches have read every Job and pod of the
// environment at least at the revision the API server lists it at now.
func (je *jobEvents) caughtUp() {
	je.t.Helper()
	ctx := context.Background()
	sel := client.MatchingLabels{petriv1.LabelEnvironment: je.envName}
	var jobList batchv1.JobList
	var pods corev1.PodList
	require.NoError(je.t, env.Client.List(ctx, &jobList, client.InNamespace(mgmtNS), sel))
	require.NoError(je.t, env.Client.List(ctx, &pods, client.InNamespace(mgmtNS), sel))
	want := map[types.UID]uint64{}
	for _, j := range jobList.Items {
		want[j.UID], _ = strconv.ParseUint(j.ResourceVersion, 10, 64)
	}
	for _, p := range pods.Items {
		want[p.UID], _ = strconv.ParseUint(p.ResourceVersion, 10, 64)
	}
	require.True(je.t, eventually(30*time.Second, func() bool {
		je.mu.Lock()
		defer je.mu.Unlock()
		for uid, rv := range want {
			if je.seen[uid] < rv {
				return false
			}
		}
		return true
	}), "the watches of %s's Jobs and pods caught up with the API server", je.envName)
}

func (je *jobEvents) get(key string) (created, finished uint64) {
	je.caughtUp()
	je.mu.Lock()
	defer je.mu.Unlock()
	return je.created[key], je.finished[key]
}

// step returns when the one Job whose key starts with prefix was created and
// finished; zeros when there is none, or more than one.
func (je *jobEvents) step(prefix string) (created, finished uint64) {
	je.caughtUp()
	je.mu.Lock()
	defer je.mu.Unlock()
	var key string
	for k := range je.created {
		if strings.HasPrefix(k, prefix) {
			if key != "" {
				return 0, 0
			}
			key = k
		}
	}
	return je.created[key], je.finished[key]
}

func (je *jobEvents) count(prefix string) int {
	je.caughtUp()
	je.mu.Lock()
	defer je.mu.Unlock()
	n := 0
	for k := range je.created {
		if strings.HasPrefix(k, prefix) {
			n++
		}
	}
	return n
}

// helmReleases returns release name -> version -> status from Helm's storage
// Secrets in the namespace.
func helmReleases(t *testing.T, ns string) map[string]map[int]string {
	t.Helper()
	var secrets corev1.SecretList
	require.NoError(t, env.Client.List(context.Background(), &secrets, client.InNamespace(ns), client.MatchingLabels{"owner": "helm"}))
	out := map[string]map[int]string{}
	for _, s := range secrets.Items {
		v, _ := strconv.Atoi(s.Labels["version"])
		if out[s.Labels["name"]] == nil {
			out[s.Labels["name"]] = map[int]string{}
		}
		out[s.Labels["name"]][v] = s.Labels["status"]
	}
	return out
}

func configMap(t *testing.T, ns, name string) map[string]string {
	t.Helper()
	cm := &corev1.ConfigMap{}
	require.NoError(t, env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, cm))
	return cm.Data
}

// A chain (db <- api) and a parallel branch (cache), from an OCI registry, an
// https repository and a path, reach Ready; a value change re-deploys in
// place; deletion undeploys in reverse order before the namespace goes.
func TestGraphDeploysRedeploysAndTearsDownInOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	je := watchJobs(t, "graph")
	e := newEnv("graph",
		component("db", registry.Repository(), "greeter", "0.1.0"),
		component("api", chartRepo.URL, "greeter", "0.1.0", "db"),
		component("cache", imageCharts, "strict", "0.1.0"),
	)
	e.Spec.Values = map[string]apiextensionsv1.JSON{
		"api":   *jsonValues(map[string]any{"message": "hello from pr 7", "image": map[string]any{"tag": "abc1234"}}),
		"cache": *jsonValues(map[string]any{"replicas": 2}),
	}
	start := testClock.Now()
	require.NoError(t, env.Client.Create(ctx, e))
	e = waitFor(t, "graph", "ready", ready)
	t.Logf("create to Ready: %s", time.Since(start).Round(10*time.Millisecond))
	ns := e.Status.TargetNamespace

	// The releases exist with the resolved values.
	rels := helmReleases(t, ns)
	for _, name := range []string{"db", "api", "cache"} {
		assert.Equal(t, map[int]string{1: "deployed"}, rels[name], "release %s", name)
	}
	assert.Equal(t, map[string]string{"message": "hello from pr 7", "imageTag": "abc1234"}, configMap(t, ns, "api-greeter"))
	assert.Equal(t, "Hello from Petri", configMap(t, ns, "db-greeter")["message"])

	// Dependency order and parallelism, in etcd's revision order.
	dbCreated, dbDone := je.get("deploy/db/1")
	apiCreated, _ := je.get("deploy/api/1")
	cacheCreated, cacheDone := je.get("deploy/cache/1")
	require.NotZero(t, dbDone)
	assert.Greater(t, apiCreated, dbDone, "api starts only after db is deployed")
	assert.Less(t, cacheCreated, dbDone, "cache runs while db runs")
	assert.Less(t, dbCreated, cacheDone, "db runs while cache runs")
	assert.Equal(t, 3, je.count("deploy/"), "one Job per component")
	for _, cs := range e.Status.Components {
		assert.Equal(t, petriv1.ComponentDeployed, cs.Phase)
		assert.NotEmpty(t, cs.Job)
		assert.NotNil(t, cs.StartedAt)
		assert.NotNil(t, cs.FinishedAt)
	}

	// The metrics say so too: Jobs observed, environments counted by phase.
	families, err := ctrlmetrics.Registry.Gather()
	require.NoError(t, err)
	seen := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			labels := f.GetName()
			for _, l := range m.GetLabel() {
				labels += "," + l.GetName() + "=" + l.GetValue()
			}
			switch {
			case m.GetHistogram() != nil:
				seen[labels] = float64(m.GetHistogram().GetSampleCount())
			case m.GetGauge() != nil:
				seen[labels] = m.GetGauge().GetValue()
			}
		}
	}
	assert.GreaterOrEqual(t, seen["petri_job_duration_seconds,action=deploy,outcome=succeeded"], 3.0)
	assert.GreaterOrEqual(t, seen["petri_environments,phase=Ready"], 1.0)

	// A value change re-deploys in place.
	e.Spec.Values["api"] = *jsonValues(map[string]any{"message": "hello again", "image": map[string]any{"tag": "def5678"}})
	require.NoError(t, env.Client.Update(ctx, e))
	e = waitFor(t, "graph", "ready at generation 2", func(e *petriv1.EphemeralEnvironment) bool { return e.Generation == 2 && ready(e) })
	assert.Equal(t, ns, e.Status.TargetNamespace)
	assert.Equal(t, int64(2), e.Status.ObservedGeneration)
	assert.Equal(t, map[int]string{1: "superseded", 2: "deployed"}, helmReleases(t, ns)["api"])
	assert.Equal(t, map[string]string{"message": "hello again", "imageTag": "def5678"}, configMap(t, ns, "api-greeter"))

	// Deletion: undeploy api before db, then the namespace. Each undeploy is
	// one Job, of the generation the deletion started at.
	require.NoError(t, env.Client.Delete(ctx, e))
	waitGone(t, e)
	apiUndeployCreated, apiUndeployDone := je.step("undeploy/api/")
	dbUndeployCreated, _ := je.step("undeploy/db/")
	require.NotZero(t, apiUndeployDone, "api was undeployed by a Job")
	require.NotZero(t, dbUndeployCreated, "db was undeployed by a Job")
	assert.Greater(t, dbUndeployCreated, apiUndeployDone, "db is undeployed only after api, which depends on it")
	assert.NotZero(t, apiUndeployCreated)
	_, cacheUndeployDone := je.step("undeploy/cache/")
	assert.NotZero(t, cacheUndeployDone)
	err = env.Client.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{})
	assert.True(t, client.IgnoreNotFound(err) == nil && err != nil, "namespace %s is gone", ns)
}

// Each failure ends in Failed with a message naming the cause; dependants of
// a failed component never start; an unrelated branch still finishes.
func TestFailuresNameTheCauseAndBlockDependants(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	je := watchJobs(t, "failures")
	e := newEnv("failures",
		component("badref", imageCharts+"/missing", "missing", "0.1.0"),
		component("badver", registry.Repository(), "greeter", "9.9.9"),
		component("badvals", imageCharts, "strict", "0.1.0"),
		component("after", imageCharts, "greeter", "0.1.0", "badvals"),
		component("fine", imageCharts, "greeter", "0.1.0"),
	)
	e.Spec.Values = map[string]apiextensionsv1.JSON{"badvals": *jsonValues(map[string]any{"replicas": 0})}
	require.NoError(t, env.Client.Create(ctx, e))
	e = waitFor(t, "failures", "failed", func(e *petriv1.EphemeralEnvironment) bool {
		return e.Status.Phase == petriv1.EnvironmentFailed && e.Status.ObservedGeneration == e.Generation
	})
	byName := map[string]petriv1.ComponentStatus{}
	for _, cs := range e.Status.Components {
		byName[cs.Name] = cs
	}
	assert.Equal(t, petriv1.ComponentFailed, byName["badref"].Phase)
	assert.True(t, strings.HasPrefix(byName["badref"].LastError, "ChartNotFound:"), byName["badref"].LastError)
	assert.Equal(t, petriv1.ComponentFailed, byName["badver"].Phase)
	assert.True(t, strings.HasPrefix(byName["badver"].LastError, "VersionNotFound:"), byName["badver"].LastError)
	assert.Contains(t, byName["badver"].LastError, "9.9.9")
	assert.Equal(t, petriv1.ComponentFailed, byName["badvals"].Phase)
	assert.True(t, strings.HasPrefix(byName["badvals"].LastError, "ValuesInvalid:"), byName["badvals"].LastError)
	assert.Equal(t, petriv1.ComponentPending, byName["after"].Phase)
	assert.Equal(t, "blocked: depends on badvals, which failed", byName["after"].Message)
	assert.Empty(t, byName["after"].Job)
	assert.Equal(t, petriv1.ComponentDeployed, byName["fine"].Phase, "an unrelated branch finishes")
	assert.Zero(t, je.count("deploy/after/"), "no Job was created for a blocked component")

	c := findCondition(e, petriv1.ConditionComponentsDeployed)
	assert.Equal(t, petriv1.ReasonDeployFailed, c.Reason)
	assert.Contains(t, c.Message, "not started: after")
	assert.Equal(t, petriv1.ReasonDeployFailed, findCondition(e, petriv1.ConditionReady).Reason)
}

// A deployer pod killed while Helm waits leaves a pending-install release;
// the next Job unlocks and upgrades it to deployed.
func TestKilledDeployIsRecoveredByTheNextJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := component("slow", imageCharts, "greeter", "0.1.0")
	c.Release = petriv1.ReleaseOptions{Wait: new(true), Timeout: &metav1.Duration{Duration: 10 * time.Minute}}
	// One attempt: the failure of the killed Job stays, for the next
	// generation to recover from.
	c.Retry = &petriv1.RetryPolicy{Attempts: ptr.To[int32](1)}
	e := newEnv("killed", c)
	require.NoError(t, env.Client.Create(ctx, e))
	e = waitFor(t, "killed", "bound", bound)
	ns := e.Status.TargetNamespace
	// The example app's image is unknown to the local node, so its pod stays
	// Pending and Helm keeps waiting with the release in pending-install.
	require.True(t, eventually(60*time.Second, func() bool {
		var s corev1.SecretList
		err := env.Client.List(ctx, &s, client.InNamespace(ns), client.MatchingLabels{"owner": "helm", "name": "slow", "status": "pending-install"})
		return err == nil && len(s.Items) == 1
	}), "release reaches pending-install")
	e = get(t, "killed")
	var pods corev1.PodList
	require.NoError(t, env.Client.List(ctx, &pods, client.InNamespace(mgmtNS), client.MatchingLabels{batchv1.JobNameLabel: e.Status.Components[0].Job}))
	require.Len(t, pods.Items, 1)
	require.NoError(t, env.Node.Kill(mgmtNS, pods.Items[0].Name))
	e = waitFor(t, "killed", "failed", func(e *petriv1.EphemeralEnvironment) bool { return e.Status.Phase == petriv1.EnvironmentFailed })
	assert.Equal(t, map[int]string{1: "pending-install"}, helmReleases(t, ns)["slow"], "the killed pod left the release locked")

	// The next Job (a new generation that no longer waits) recovers it.
	e.Spec.Components[0].Release = noWait()
	require.NoError(t, env.Client.Update(ctx, e))
	waitFor(t, "killed", "ready", ready)
	rels := helmReleases(t, ns)["slow"]
	assert.Equal(t, "deployed", rels[len(rels)], "latest revision deployed: %v", rels)
	assert.NotEqual(t, "pending-install", rels[1], "the stale record was unlocked")
}

// An operator restarted in the middle of a chain creates no second Job for
// any component and converges.
func restartMidGraphCreatesNoDuplicateJobs(t *testing.T) {
	ctx := context.Background()
	je := watchJobs(t, "restart")
	require.NoError(t, env.Client.Create(ctx, newEnv("restart", greeter("one"), greeter("two", "one"), greeter("three", "two"))))
	require.True(t, eventually(60*time.Second, func() bool { c, _ := je.get("deploy/one/1"); return c != 0 }))
	restartOperator(t)
	require.True(t, eventually(60*time.Second, func() bool { c, _ := je.get("deploy/two/1"); return c != 0 }))
	restartOperator(t)
	waitFor(t, "restart", "ready", ready)
	var list batchv1.JobList
	require.NoError(t, env.Client.List(ctx, &list, client.InNamespace(mgmtNS), client.MatchingLabels{petriv1.LabelEnvironment: "restart", contract.LabelAction: contract.ActionDeploy}))
	perComponent := map[string]int{}
	for _, j := range list.Items {
		perComponent[j.Labels[contract.LabelComponent]]++
	}
	assert.Equal(t, map[string]int{"one": 1, "two": 1, "three": 1}, perComponent, fmt.Sprintf("jobs: %d", len(list.Items)))
}

// An undeploy that keeps failing is retried with backoff (a new Job per
// attempt) and reported; force-delete still releases the environment.
func TestFailingUndeployIsRetriedAndReported(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// Every undeploy Job fails, as one that cannot read the release's
	// record does.
	standIn(t, "stuck", func(job standInJob) standInReply {
		if job.Action == contract.ActionUndeploy {
			return failedWith(job, contract.ReasonFailed, "release app: the record is not a release")
		}
		return succeedAll(job)
	})
	require.NoError(t, env.Client.Create(ctx, newEnv("stuck", greeter("app"))))
	e := waitFor(t, "stuck", "ready", ready)
	require.NoError(t, env.Client.Delete(ctx, e))
	e = waitFor(t, "stuck", "undeploy retried", func(e *petriv1.EphemeralEnvironment) bool {
		return len(e.Status.Components) == 1 && e.Status.Components[0].Attempt >= 3 &&
			findCondition(e, petriv1.ConditionReady).Reason == petriv1.ReasonTeardownFailed
	})
	msg := findCondition(e, petriv1.ConditionReady).Message
	assert.Contains(t, msg, "undeploy failed")
	assert.Contains(t, msg, "app: undeploy failed (attempt")
	assert.NotEmpty(t, e.Status.Components[0].LastError)
	assert.Contains(t, e.Finalizers, petriv1.Finalizer, "the environment is held while undeploy fails")
	var list batchv1.JobList
	require.NoError(t, env.Client.List(ctx, &list, client.InNamespace(mgmtNS), client.MatchingLabels{petriv1.LabelEnvironment: "stuck", contract.LabelAction: contract.ActionUndeploy}))
	assert.GreaterOrEqual(t, len(list.Items), 3, "one Job per attempt")

	forceDelete(t, e)
	ns := &corev1.Namespace{}
	err := env.Client.Get(ctx, client.ObjectKey{Name: e.Status.TargetNamespace}, ns)
	assert.True(t, err != nil || !ns.DeletionTimestamp.IsZero(), "force-delete deletes the verified namespace")
}

// A deploy Job that the operator's cache does not know (created a moment
// ago, or no longer matching the cache's label selector) still counts as
// running: the next generation's Job starts only after it has finished, so
// two Helm operations never run on one release.
func TestOlderJobUnknownToTheCacheHoldsTheNextGeneration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	je := watchJobs(t, "inflight")
	_, job, finish := deployingForLong(t, "inflight")
	// Out of the operator's cache, which selects Jobs by this label.
	patch := client.MergeFrom(job.DeepCopy())
	delete(job.Labels, petriv1.LabelManagedBy)
	require.NoError(t, env.Client.Patch(ctx, job, patch))

	updateEnv(t, "inflight", func(e *petriv1.EphemeralEnvironment) {
		e.Spec.Components[0].Values = jsonValues(map[string]any{"message": "generation 2"})
	})
	waitFor(t, "inflight", "generation 2 waits for generation 1's Job", func(e *petriv1.EphemeralEnvironment) bool {
		return e.Generation == 2 && strings.Contains(findCondition(e, petriv1.ConditionReady).Message, "waiting for Jobs of an older generation to finish: "+job.Name)
	})
	finish()
	waitFor(t, "inflight", "ready at generation 2", func(e *petriv1.EphemeralEnvironment) bool { return e.Generation == 2 && ready(e) })
	_, oldDone := je.get("deploy/app/1")
	newCreated, _ := je.get("deploy/app/2")
	require.NotZero(t, oldDone, "generation 1's Job finished")
	require.NotZero(t, newCreated, "generation 2 ran a Job")
	assert.Greater(t, newCreated, oldDone, "generation 2's Job starts only after generation 1's finished")
}

// Components that do not depend on one another start in the same pass, their
// Jobs' creates sent at once; a dependant starts after them.
func TestIndependentComponentsStartTogether(t *testing.T) {
	t.Parallel()
	// Its deployer Jobs are not what this is about: the stand-in's succeed
	// at once (succeedAll).
	standIn(t, "together", succeedAll)
	je := watchJobs(t, "together")
	hold := holdJobCreates(t, "together", 3, 20*time.Second)
	e := newEnv("together",
		component("one", imageCharts, "strict", "0.1.0"),
		component("two", imageCharts, "strict", "0.1.0"),
		component("three", imageCharts, "strict", "0.1.0"),
		component("after", imageCharts, "strict", "0.1.0", "one", "two"),
	)
	require.NoError(t, env.Client.Create(context.Background(), e))
	e = waitFor(t, "together", "ready", ready)
	assert.Equal(t, 3, hold.mostAtOnce(), "the three independent components' Job creates were in flight together")
	_, oneDone := je.get("deploy/one/1")
	_, twoDone := je.get("deploy/two/1")
	afterCreated, _ := je.get("deploy/after/1")
	assert.Greater(t, afterCreated, max(oneDone, twoDone), "after starts once both its dependencies are deployed")
	assert.Equal(t, 4, je.count("deploy/"), "one Job per component")
	for _, cs := range e.Status.Components {
		assert.Equal(t, petriv1.ComponentDeployed, cs.Phase, cs.Name)
	}
}

// A Job deleted while its pod runs can leave the pod running: for its grace
// period under a kubelet, to its end when the Job is deleted with its pods
// orphaned (as here). The operator starts the release's next Job only once
// that pod has ended, so no two Helm operations on the release run at once.
func TestPodOfADeletedJobHoldsTheNextJob(t *testing.T) {
	t.Parallel()
	e, job, finish := deployingForLong(t, "orphaned")
	waiting := func() bool {
		cs := componentNamed(current("orphaned"), "app")
		return cs != nil && strings.Contains(cs.Message, "waiting for job "+job.Name)
	}
	assertNextJobWaitsForOrphanedPod(t, job, client.MatchingLabels{petriv1.LabelEnvironmentUID: string(e.UID), contract.LabelAction: contract.ActionDeploy}, waiting, finish)
}

// assertNextJobWaitsForOrphanedPod deletes job, whose one pod runs, with its
// pod orphaned; once the operator says it waits for that Job (waiting), it
// lets the pod end (finish), waits until another Job that sel matches is
// there, and checks that this next Job was not created before the pod
// ended.
func assertNextJobWaitsForOrphanedPod(t *testing.T, job *batchv1.Job, sel client.MatchingLabels, waiting func() bool, finish func()) {
	t.Helper()
	ctx := context.Background()
	var pods corev1.PodList
	require.NoError(t, env.Client.List(ctx, &pods, client.InNamespace(mgmtNS), client.MatchingLabels{batchv1.JobNameLabel: job.Name}))
	require.Len(t, pods.Items, 1)
	pod := pods.Items[0]
	require.NoError(t, env.Client.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationOrphan)))
	require.True(t, eventually(time.Minute, waiting), "the operator waits for the deleted Job's pod")
	assert.Empty(t, nextJob(t, job, sel), "no next Job while the deleted Job's pod runs")
	finish()

	var ended time.Time
	require.True(t, eventually(time.Minute, func() bool {
		var p corev1.Pod
		if env.Client.Get(ctx, client.ObjectKeyFromObject(&pod), &p) != nil || len(p.Status.ContainerStatuses) == 0 {
			return false
		}
		if term := p.Status.ContainerStatuses[0].State.Terminated; term != nil {
			ended = term.FinishedAt.Time
			return true
		}
		return false
	}), "the orphaned pod ends")
	var next *batchv1.Job
	require.True(t, eventually(time.Minute, func() bool {
		next = nextJob(t, job, sel)
		return next != nil
	}), "the operator starts the Job again")
	assert.False(t, next.CreationTimestamp.Time.Before(ended.Truncate(time.Second)),
		"the next Job (created %s) started before the deleted Job's pod ended (%s)", next.CreationTimestamp.Time, ended)
}

// nextJob is a Job sel matches other than job; nil when there is none.
func nextJob(t *testing.T, job *batchv1.Job, sel client.MatchingLabels) *batchv1.Job {
	t.Helper()
	var list batchv1.JobList
	require.NoError(t, env.Client.List(context.Background(), &list, client.InNamespace(mgmtNS), sel))
	for i := range list.Items {
		if list.Items[i].UID != job.UID {
			return &list.Items[i]
		}
	}
	return nil
}

// deployingForLong creates an environment whose one component's first
// deploy Job (a stand-in's) runs until finish is called, and returns it
// once that Job's pod runs. Every later Job of it succeeds at once.
func deployingForLong(t *testing.T, name string) (*petriv1.EphemeralEnvironment, *batchv1.Job, func()) {
	t.Helper()
	first := make(chan struct{})
	var once sync.Once
	finish := func() { once.Do(func() { close(first) }) }
	t.Cleanup(finish)
	standIn(t, name, func(job standInJob) standInReply {
		if job.Action == contract.ActionDeploy && job.Generation == "1" {
			return blockUntil(job, first, succeedAll)
		}
		return succeedAll(job)
	})
	require.NoError(t, env.Client.Create(context.Background(), newEnv(name, greeter("app"))))
	e := waitFor(t, name, "deploying", func(e *petriv1.EphemeralEnvironment) bool {
		cs := componentNamed(e, "app")
		return cs != nil && cs.Phase == petriv1.ComponentDeploying && cs.Job != ""
	})
	return e, runningJob(t, componentNamed(e, "app").Job), finish
}

// A deploy pod on a node that was lost never finishes: its phase stays
// Running and no kubelet confirms it gone. It holds its release only while
// its node may still run it: the next deploy waits for it, naming the pod,
// and starts once the node is not Ready, saying why it stopped waiting (the
// deployer's own Lease on the release keeps two Helm operations apart if
// the node comes back).
func TestPodOnALostNodeNoLongerHoldsItsRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	require.NoError(t, env.Client.Create(ctx, newEnv("lostnode", greeter("app"))))
	e := waitFor(t, "lostnode", "ready", ready)
	var pods corev1.PodList
	require.NoError(t, env.Client.List(ctx, &pods, client.InNamespace(mgmtNS), client.MatchingLabels{batchv1.JobNameLabel: componentNamed(e, "app").Job}))
	require.NotEmpty(t, pods.Items, "the deploy Job's pod")

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "lost-" + string(e.UID)[:8]}}
	require.NoError(t, env.Client.Create(ctx, node))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), node) })
	setNodeReady(t, node, corev1.ConditionTrue)

	// What a lost node leaves: a pod of an earlier deploy of the release,
	// its Job gone, Running on that node for good.
	// The release's labels, as Petri's Jobs give their pods; not those the
	// Job controller selects its own pods by, which would make it delete
	// this one as a pod of the first deploy's Job.
	labels := map[string]string{batchv1.JobNameLabel: "lostnode-app-deploy-gone"}
	for k, v := range pods.Items[0].Labels {
		if !strings.Contains(k, "controller-uid") && !strings.Contains(k, "job-name") {
			labels[k] = v
		}
	}
	stuck := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: mgmtNS, Name: "lostnode-stuck", Labels: labels},
		Spec: corev1.PodSpec{
			NodeName:      node.Name,
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "deployer", Image: "petri.dev/on-a-lost-node"}},
		},
	}
	require.NoError(t, env.Client.Create(ctx, stuck))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), stuck) })
	stuck.Status.Phase = corev1.PodRunning
	require.NoError(t, env.Client.Status().Update(ctx, stuck))

	e = get(t, "lostnode")
	e.Spec.Values = map[string]apiextensionsv1.JSON{"app": *jsonValues(map[string]any{"message": "pushed"})}
	require.NoError(t, env.Client.Update(ctx, e))
	waitFor(t, "lostnode", "the next deploy waits for the stuck pod", func(e *petriv1.EphemeralEnvironment) bool {
		cs := componentNamed(e, "app")
		return cs != nil && strings.Contains(cs.Message, "its pod lostnode-stuck still runs")
	})
	assert.NotEqual(t, petriv1.ComponentDeploying, componentNamed(get(t, "lostnode"), "app").Phase, "no deploy of the new generation started while the pod's node is Ready")

	setNodeReady(t, node, corev1.ConditionUnknown)
	e = waitFor(t, "lostnode", "ready at the new generation", func(e *petriv1.EphemeralEnvironment) bool {
		cs := componentNamed(e, "app")
		return ready(e) && cs != nil && cs.Generation == e.Generation
	})
	why := "pod lostnode-stuck of job lostnode-app-deploy-gone: its node " + node.Name + " is not Ready"
	require.True(t, eventually(10*time.Second, func() bool {
		var events corev1.EventList
		if env.Client.List(ctx, &events, client.InNamespace(mgmtNS)) != nil {
			return false
		}
		for _, ev := range events.Items {
			if ev.InvolvedObject.UID == e.UID && ev.Reason == petriv1.ReasonReleaseHolderLost && strings.Contains(ev.Message, why) {
				return true
			}
		}
		return false
	}), "an Event says why the deploy no longer waited for the pod: %s", eventsOf(e.UID))
}

// setNodeReady writes node's Ready condition, as a kubelet (Ready) or the
// node lifecycle controller (Unknown, once the kubelet stopped reporting)
// would.
func setNodeReady(t *testing.T, node *corev1.Node, status corev1.ConditionStatus) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(node), node))
	node.Status.Conditions = []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: status, Reason: "NodeStatusUnknown",
		LastHeartbeatTime: metav1.NewTime(testClock.Now()), LastTransitionTime: metav1.NewTime(testClock.Now()),
	}}
	require.NoError(t, env.Client.Status().Update(ctx, node))
}

// eventsOf lists the reasons and messages of the Events of the object uid,
// for a failure's message.
func eventsOf(uid types.UID) string {
	var events corev1.EventList
	if err := env.Client.List(context.Background(), &events, client.InNamespace(mgmtNS)); err != nil {
		return err.Error()
	}
	var out []string
	for _, ev := range events.Items {
		if ev.InvolvedObject.UID == uid {
			out = append(out, ev.Reason+": "+ev.Message)
		}
	}
	return strings.Join(out, "\n")
}
