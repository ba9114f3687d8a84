package chaos

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

// The workload clusters scenario 9 plays on (stack.Options.Clusters 3).
const (
	cutCluster    = "east"
	steadyCluster = "west"
	// credentialsRejected is the WorkloadCluster's Reachable reason when the
	// cluster refuses Petri's credentials (controllers/clusters.go).
	credentialsRejected = "CredentialsRejected"
)

// clusterWait bounds the wait for the operator to see a workload cluster's
// change: its probe runs every second (OperatorFlags).
const clusterWait = 30 * time.Second

// clusterFaults is scenario 9 being played: the environments left in the
// cut cluster and in the steady one, and what was injected.
type clusterFaults struct {
	sc       *scene
	east     []string
	west     []string
	revision int

	cuts, revocations, waited, forced, westChanges int
	down, revoked                                  time.Duration
}

// playClusterFaults places environments into two workload clusters, then
// makes one of them unreachable (its kube-apiserver down) and revokes
// Petri's credentials there (the ServiceAccount petri-operator deleted),
// each several times: the environments there say so, naming the cluster,
// nothing is deleted or deployed again there, the other cluster goes on, a
// teardown waits for the cluster and the force-delete annotation ends one
// without touching it. After each fault the environments are Ready again
// with the same namespaces and Helm revisions.
func playClusterFaults(ctx context.Context, sc *scene) error {
	clusters := sc.st.WorkloadClusters()
	if clusters[cutCluster] == nil || clusters[steadyCluster] == nil {
		return &notRunError{reason: "the stack runs no workload clusters " + cutCluster + " and " + steadyCluster + " (stack.Options.Clusters 3)"}
	}
	f := &clusterFaults{sc: sc, revision: 1}
	for i := 1; i <= sc.size(6, 3); i++ {
		f.east = append(f.east, fmt.Sprintf("s9-east-%02d", i))
	}
	for i := 1; i <= sc.size(4, 1); i++ {
		f.west = append(f.west, fmt.Sprintf("s9-west-%02d", i))
	}
	if err := f.place(ctx); err != nil {
		return err
	}
	defer func() { sc.row.Faults = f.summary() }()
	cuts := sc.size(3, 1)
	for i := 1; i <= cuts; i++ {
		if err := f.cut(ctx, i, i == cuts); err != nil {
			return err
		}
	}
	for i := 1; i <= sc.size(2, 1); i++ {
		if err := f.revoke(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

// place creates the environments, each placed by name in its cluster, and
// waits until they are Ready there.
func (f *clusterFaults) place(ctx context.Context) error {
	sc := f.sc
	all := append(append([]string{}, f.east...), f.west...)
	for cluster, names := range map[string][]string{cutCluster: f.east, steadyCluster: f.west} {
		for _, n := range names {
			env := newEnvironment(n, sc.tag(), light, f.revision)
			env.Spec.Placement = &petriv1.Placement{Cluster: cluster}
			sc.expectPresent(n)
			if err := sc.create(ctx, env); err != nil {
				return err
			}
		}
	}
	sc.parallel(all, func(n string) { sc.waitState(ctx, n, "deploy", true, stepTimeout) })
	for _, n := range all {
		env, err := sc.getEnv(ctx, n)
		if err != nil {
			return err
		}
		if env != nil && env.Status.Cluster != env.Spec.Placement.Cluster {
			sc.violate(Converges, "s9/placed/"+n, "environment %s was placed in %q, its spec names %q", n, env.Status.Cluster, env.Spec.Placement.Cluster)
		}
	}
	return nil
}

// cut keeps the cut cluster's kube-apiserver down for a while. Meanwhile
// its environments must turn Ready False naming it, one of them is deleted
// and must wait for it (and, when force, another is deleted and released
// by the force-delete annotation), and a spec change in the steady cluster
// is deployed. Afterwards the environments there are Ready again, nothing
// was deleted or deployed again for them, and the waiting teardown ends.
func (f *clusterFaults) cut(ctx context.Context, round int, force bool) error {
	sc := f.sc
	key := fmt.Sprintf("s9/cut%d", round)
	before, err := sc.snapshot(ctx, f.east)
	if err != nil {
		return err
	}
	doomed := f.east[0]
	f.east = f.east[1:]
	forced := ""
	if force {
		forced = f.east[0]
		f.east = f.east[1:]
	}
	// Long enough for the operator's probe (every second) and the checks
	// below; a longer cut only adds to the backoff of the cluster's own
	// controllers and node, whose watches reconnect later the longer it
	// lasted.
	down := 12 * time.Second
	if sc.full() {
		down = sc.between(10*time.Second, 30*time.Second)
	}
	sc.logf("kube-apiserver of workload cluster %s down for %s (cut %d)", cutCluster, down.Round(100*time.Millisecond), round)
	restarted := make(chan error, 1)
	back := make(chan struct{})
	go func() {
		restarted <- sc.st.WorkloadClusters()[cutCluster].RestartAPIServer(ctx, down)
		close(back)
	}()
	westDone := make(chan error, 1)
	go func() { westDone <- f.westGoesOn(ctx, key, back) }()

	if sc.waitReachable(ctx, cutCluster, metav1.ConditionFalse, petriv1.ReasonClusterUnreachable, key+"/reachable", clusterWait) {
		sc.logf("WorkloadCluster %s: Reachable False, %s", cutCluster, petriv1.ReasonClusterUnreachable)
	}
	cutNames := append([]string{doomed}, f.east...)
	if forced != "" {
		cutNames = append(cutNames, forced)
	}
	sc.parallel(cutNames, func(n string) {
		sc.waitCondition(ctx, n, petriv1.ConditionReady, metav1.ConditionFalse, petriv1.ReasonClusterUnreachable, cutCluster, key+"/ready/"+n, clusterWait)
	})
	if err := f.deleteWaiting(ctx, key, doomed); err != nil {
		return err
	}
	waited := make(chan error, 1)
	go func() { waited <- f.staysUntil(ctx, key, doomed, back) }()
	if forced != "" {
		if err := f.forceDelete(ctx, key, forced); err != nil {
			return err
		}
	}
	if err := <-westDone; err != nil {
		return err
	}
	if err := <-waited; err != nil {
		return err
	}
	if err := <-restarted; err != nil {
		return fmt.Errorf("restart the kube-apiserver of workload cluster %s: %w", cutCluster, err)
	}
	f.cuts++
	f.down += down
	sc.logf("kube-apiserver of workload cluster %s back (cut %d)", cutCluster, round)
	f.recovered(ctx, key, before, "cut "+fmt.Sprint(round))
	sc.waitState(ctx, doomed, "teardown waiting for its cluster", false, stepTimeout)
	if forced != "" {
		return f.leftInCluster(ctx, key, forced, before[forced])
	}
	return nil
}

// deleteWaiting deletes an environment of the cut cluster: its teardown
// must wait, Stalled naming the cluster.
func (f *clusterFaults) deleteWaiting(ctx context.Context, key, name string) error {
	sc := f.sc
	sc.expectGone(name)
	if err := sc.remove(ctx, name); err != nil {
		return err
	}
	f.waited++
	if sc.waitCondition(ctx, name, petriv1.ConditionStalled, metav1.ConditionTrue, petriv1.ReasonClusterUnreachable, cutCluster, key+"/stalled/"+name, clusterWait) {
		sc.logf("environment %s deleted: its teardown waits for workload cluster %s", name, cutCluster)
	}
	return nil
}

// staysUntil checks that a deleted environment of the cut cluster is still
// there until the cluster comes back (back closed).
func (f *clusterFaults) staysUntil(ctx context.Context, key, name string, back chan struct{}) error {
	sc := f.sc
	for {
		select {
		case <-back:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
		env, err := sc.getEnv(ctx, name)
		if err != nil {
			return err
		}
		if env == nil {
			select {
			case <-back:
				return nil
			default:
			}
			sc.violate(ScenarioChecks, key+"/gone/"+name, "environment %s was gone while workload cluster %s did not answer: its teardown did not wait for the cluster", name, cutCluster)
			return nil
		}
	}
}

// forceDelete deletes an environment of the cut cluster and, once its
// teardown waits, sets the force-delete annotation: it must be gone from
// the management cluster while the cluster is still cut.
func (f *clusterFaults) forceDelete(ctx context.Context, key, name string) error {
	sc := f.sc
	sc.expectGone(name)
	if err := sc.remove(ctx, name); err != nil {
		return err
	}
	sc.waitCondition(ctx, name, petriv1.ConditionStalled, metav1.ConditionTrue, petriv1.ReasonClusterUnreachable, cutCluster, key+"/stalled/"+name, clusterWait)
	if err := sc.forceDelete(ctx, name); err != nil {
		return err
	}
	f.forced++
	ok := waitFor(ctx, clusterWait, 200*time.Millisecond, func() bool {
		env, err := sc.getEnv(ctx, name)
		return err == nil && env == nil
	})
	if ok {
		sc.logf("environment %s released by %s while workload cluster %s does not answer", name, petriv1.AnnotationForceDelete, cutCluster)
	}
	if !ok && ctx.Err() == nil {
		sc.violate(ScenarioChecks, key+"/forced/"+name, "environment %s was not released within %s of its %s annotation while workload cluster %s did not answer [%s]",
			name, clusterWait, petriv1.AnnotationForceDelete, cutCluster, sc.explain(ctx, name))
	}
	return nil
}

// leftInCluster checks that a force-deleted environment's namespace is
// still in the cut cluster as it was (the operator did not touch it), and
// then deletes it, as the person who forced the deletion is told to.
func (f *clusterFaults) leftInCluster(ctx context.Context, key, name string, was placedState) error {
	sc := f.sc
	cl, _, err := sc.clientsIn(cutCluster)
	if err != nil {
		return err
	}
	var ns corev1.Namespace
	err = retryAPI(ctx, func() error { return cl.Get(ctx, client.ObjectKey{Name: was.namespace}, &ns) })
	switch {
	case apierrors.IsNotFound(err):
		sc.violate(ScenarioChecks, key+"/left/"+name, "namespace %s of force-deleted environment %s is gone from workload cluster %s: the operator touched a cluster that did not answer", was.namespace, name, cutCluster)
		return nil
	case err != nil:
		return err
	case ns.UID != was.uid || ns.DeletionTimestamp != nil:
		sc.violate(ScenarioChecks, key+"/left/"+name, "namespace %s of force-deleted environment %s in workload cluster %s was deleted (uid %s, now %s, deleting %t)", was.namespace, name, cutCluster, was.uid, ns.UID, ns.DeletionTimestamp != nil)
	}
	if err := retryAPI(ctx, func() error { return cl.Delete(ctx, &ns) }); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete namespace %s left in workload cluster %s: %w", was.namespace, cutCluster, err)
	}
	return nil
}

// westGoesOn changes one steady-cluster environment's spec while the other
// cluster is faulty and waits until it is deployed, then checks that every
// steady-cluster environment is Ready; back, when not nil, is closed once
// the fault is over, which must not come first.
func (f *clusterFaults) westGoesOn(ctx context.Context, key string, back chan struct{}) error {
	sc := f.sc
	f.revision++
	name := f.west[f.westChanges%len(f.west)]
	if err := sc.redeploy(ctx, name, f.revision); err != nil {
		return err
	}
	f.westChanges++
	start := time.Now()
	sc.waitState(ctx, name, "spec change while "+cutCluster+" is faulty", true, stepTimeout)
	select {
	case <-back:
		sc.violate(ScenarioChecks, key+"/west-late", "the spec change of %s (workload cluster %s) was not deployed before workload cluster %s answered again", name, steadyCluster, cutCluster)
	default:
		sc.logf("spec change of %s deployed in workload cluster %s in %s while %s is faulty", name, steadyCluster, time.Since(start).Round(100*time.Millisecond), cutCluster)
	}
	for _, n := range f.west {
		why, err := sc.converged(ctx, n)
		if err != nil {
			return err
		}
		if len(why) > 0 {
			sc.violate(ScenarioChecks, key+"/west/"+n, "environment %s of workload cluster %s was not Ready while %s was faulty: %v", n, steadyCluster, cutCluster, why)
		}
	}
	return nil
}

// recovered waits until the cut cluster answers again and its environments
// are Ready, and checks that their namespaces and releases there are those
// from before the fault.
func (f *clusterFaults) recovered(ctx context.Context, key string, before map[string]placedState, fault string) {
	sc := f.sc
	sc.waitReachable(ctx, cutCluster, metav1.ConditionTrue, "", key+"/back", 2*clusterWait)
	start := time.Now()
	sc.parallel(f.east, func(n string) { sc.waitState(ctx, n, "recovery after "+fault, true, stepTimeout) })
	sc.logf("environments of workload cluster %s Ready %s after it answers again (%s)", cutCluster, time.Since(start).Round(100*time.Millisecond), fault)
	kept := map[string]placedState{}
	for _, n := range f.east {
		kept[n] = before[n]
	}
	sc.unchanged(ctx, kept, fault)
}

// revoke deletes Petri's ServiceAccount in the cut cluster, which
// invalidates the token of its Secret: the WorkloadCluster must say
// CredentialsRejected, its environments Ready False naming it, nothing
// deleted there, the steady cluster going on; then valid credentials are
// written again and the environments must be as before.
func (f *clusterFaults) revoke(ctx context.Context, round int) error {
	sc := f.sc
	key := fmt.Sprintf("s9/revoke%d", round)
	before, err := sc.snapshot(ctx, f.east)
	if err != nil {
		return err
	}
	sc.logf("credentials of workload cluster %s revoked (revocation %d)", cutCluster, round)
	start := time.Now()
	rv, err := sc.st.RevokeClusterCredentials(ctx, cutCluster)
	if err != nil {
		return err
	}
	f.revocations++
	if sc.waitReachable(ctx, cutCluster, metav1.ConditionFalse, credentialsRejected, key+"/reachable", clusterWait) {
		sc.logf("WorkloadCluster %s: Reachable False, %s", cutCluster, credentialsRejected)
	}
	sc.parallel(f.east, func(n string) {
		sc.waitCondition(ctx, n, petriv1.ConditionReady, metav1.ConditionFalse, petriv1.ReasonClusterUnreachable, cutCluster, key+"/ready/"+n, clusterWait)
	})
	if err := f.westGoesOn(ctx, key, nil); err != nil {
		return err
	}
	sc.unchanged(ctx, before, fmt.Sprintf("revocation %d, while revoked", round))
	if err := rv.Restore(ctx); err != nil {
		return err
	}
	f.revoked += time.Since(start)
	sc.logf("credentials of workload cluster %s restored (revocation %d)", cutCluster, round)
	f.recovered(ctx, key, before, fmt.Sprintf("revocation %d", round))
	return nil
}

// summary is the row's Faults.
func (f *clusterFaults) summary() string {
	return fmt.Sprintf("workload cluster %s: %d kube-apiserver cuts (down %s in all), %d credential revocations (ServiceAccount %s deleted there, valid credentials written again after %s in all); "+
		"deleted while %s was cut: %d environments (teardown waited for it), %d released by %s (namespace left there, then deleted); %d spec changes deployed in %s meanwhile",
		cutCluster, f.cuts, f.down.Round(100*time.Millisecond), f.revocations, "petri-operator", f.revoked.Round(time.Second),
		cutCluster, f.waited, f.forced, petriv1.AnnotationForceDelete, f.westChanges, steadyCluster)
}
