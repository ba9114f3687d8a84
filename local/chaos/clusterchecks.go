package chaos

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/controlplane"
	"github.com/petri-dev/petri/local/stack"
)

// clientsIn are the administrator's clients of a cluster: the management
// cluster's for "", else the named workload cluster's.
func (r *run) clientsIn(cluster string) (client.Client, kubernetes.Interface, error) {
	if cluster == "" {
		return r.st.Client, r.st.Cluster.Clientset, nil
	}
	c := r.st.WorkloadClusters()[cluster]
	if c == nil {
		return nil, nil, fmt.Errorf("the stack runs no workload cluster %s", cluster)
	}
	return c.Client, c.Clientset, nil
}

// clusterOf is the cluster an environment was last seen placed in.
func (r *recorder) clusterOf(e *envRecord) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return e.lastStatus.Cluster
}

// watchWorkload records the Jobs Petri creates in a workload cluster and
// their pods, as start does in the management cluster, so that the Job and
// Helm invariants cover the environments placed there.
func (r *recorder) watchWorkload(ctx context.Context, cfg *rest.Config) error {
	owned := labels.SelectorFromSet(labels.Set{petriv1.LabelManagedBy: petriv1.ManagedByOperator})
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 50, 100
	c, err := cache.New(cfg, cache.Options{
		Scheme: controlplane.Scheme(),
		ByObject: map[client.Object]cache.ByObject{
			&batchv1.Job{}: {Label: owned},
			&corev1.Pod{}:  {Label: owned},
		},
	})
	if err != nil {
		return fmt.Errorf("watch cache of %s: %w", cfg.Host, err)
	}
	return runHandlers(ctx, c, "watch cache of "+cfg.Host, []handled{{&batchv1.Job{}, r.onJob}, {&corev1.Pod{}, r.onPod}})
}

// watchWorkloadClusters starts watchWorkload for every workload cluster of
// the stack.
func (r *run) watchWorkloadClusters(ctx context.Context) error {
	for _, c := range r.st.WorkloadClusters() {
		if err := r.rec.watchWorkload(ctx, c.Config); err != nil {
			return err
		}
	}
	return nil
}

// alive are the UIDs of the environments that exist.
func (r *recorder) alive() map[types.UID]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[types.UID]bool{}
	for uid, e := range r.envs {
		if e.gone.IsZero() {
			out[uid] = true
		}
	}
	return out
}

// workloadOrphans lists the namespaces Petri made in a workload cluster
// whose environment is gone, by cluster/name. A cluster that cannot be
// read is listed as such.
func (r *run) workloadOrphans(ctx context.Context) map[string]orphan {
	out := map[string]orphan{}
	alive := r.rec.alive()
	for name, c := range r.st.WorkloadClusters() {
		var list corev1.NamespaceList
		if err := c.Client.List(ctx, &list, client.MatchingLabels{petriv1.LabelManagedBy: petriv1.ManagedByOperator}); err != nil {
			out[name+"/"] = orphan{why: fmt.Sprintf("the namespaces of workload cluster %s could not be read: %v", name, err)}
			continue
		}
		for _, ns := range list.Items {
			uid := types.UID(ns.Labels[petriv1.LabelEnvironmentUID])
			if uid == "" || alive[uid] {
				continue
			}
			out[name+"/"+ns.Name] = orphan{env: ns.Labels[petriv1.LabelEnvironment],
				why: fmt.Sprintf("namespace %s of workload cluster %s (environment uid %s) is left after its environment is gone", ns.Name, name, uid)}
		}
	}
	return out
}

// placedState is what an environment has in its workload cluster, read
// from that cluster's API server: its namespace's UID and each component's
// newest Helm release revision.
type placedState struct {
	namespace string
	uid       types.UID
	deleting  bool
	revisions map[string]int
}

func (p placedState) String() string {
	var parts []string
	for c, v := range p.revisions {
		parts = append(parts, fmt.Sprintf("%s revision %d", c, v))
	}
	sort.Strings(parts)
	state := ""
	if p.deleting {
		state = ", being deleted"
	}
	return fmt.Sprintf("namespace %s (uid %s%s), %s", p.namespace, p.uid, state, strings.Join(parts, ", "))
}

// placed reads an environment's placedState in its cluster.
func (sc *scene) placed(ctx context.Context, name string) (placedState, error) {
	env, err := sc.getEnv(ctx, name)
	if err != nil {
		return placedState{}, err
	}
	if env == nil || env.Status.TargetNamespace == "" {
		return placedState{}, fmt.Errorf("environment %s has no namespace", name)
	}
	cl, cs, err := sc.clientsIn(env.Status.Cluster)
	if err != nil {
		return placedState{}, err
	}
	st := placedState{namespace: env.Status.TargetNamespace, revisions: map[string]int{}}
	var ns corev1.Namespace
	if err := retryAPI(ctx, func() error { return cl.Get(ctx, client.ObjectKey{Name: st.namespace}, &ns) }); err != nil {
		return placedState{}, fmt.Errorf("namespace %s of environment %s: %w", st.namespace, name, err)
	}
	st.uid, st.deleting = ns.UID, ns.DeletionTimestamp != nil
	for _, c := range env.Spec.Components {
		rel, err := latestReleaseIn(ctx, cs, st.namespace, c.Name)
		if err != nil {
			return placedState{}, err
		}
		if rel != nil {
			st.revisions[c.Name] = rel.Version
		}
	}
	return st, nil
}

// snapshot reads the placedState of each environment.
func (sc *scene) snapshot(ctx context.Context, names []string) (map[string]placedState, error) {
	out := map[string]placedState{}
	for _, n := range names {
		st, err := sc.placed(ctx, n)
		if err != nil {
			return nil, err
		}
		out[n] = st
	}
	return out, nil
}

// unchanged reports each environment whose namespace or releases in its
// cluster differ from before: something was deleted or deployed again for
// it.
func (sc *scene) unchanged(ctx context.Context, before map[string]placedState, after string) {
	for n, was := range before {
		now, err := sc.placed(ctx, n)
		if err == nil && now.String() == was.String() {
			continue
		}
		detail := fmt.Sprintf("environment %s changed in its cluster across %s: before %s, after ", n, after, was)
		if err != nil {
			detail += err.Error()
		} else {
			detail += now.String()
		}
		sc.violate(ScenarioChecks, fmt.Sprintf("s9/unchanged/%s/%s", after, n), "%s", detail)
	}
}

// condition is an environment and its condition typ; nil when it has
// none or is gone.
func (sc *scene) condition(ctx context.Context, name, typ string) (*petriv1.EphemeralEnvironment, *metav1.Condition) {
	env, err := sc.getEnv(ctx, name)
	if err != nil || env == nil {
		return env, nil
	}
	return env, apimeta.FindStatusCondition(env.Status.Conditions, typ)
}

// waitCondition waits until an environment's condition typ is status with
// reason and a message naming cluster; a timeout is a scenario violation
// under key.
func (sc *scene) waitCondition(ctx context.Context, name, typ string, status metav1.ConditionStatus, reason, cluster, key string, timeout time.Duration) bool {
	var last *metav1.Condition
	ok := waitFor(ctx, timeout, 200*time.Millisecond, func() bool {
		_, last = sc.condition(ctx, name, typ)
		return last != nil && last.Status == status && last.Reason == reason && strings.Contains(last.Message, "workload cluster "+cluster)
	})
	if !ok && ctx.Err() == nil {
		seen := "none"
		if last != nil {
			seen = fmt.Sprintf("%s %s: %s", last.Status, last.Reason, oneLine(last.Message))
		}
		sc.violate(ScenarioChecks, key, "environment %s: %s was not %s %s naming workload cluster %s within %s (last: %s)", name, typ, status, reason, cluster, timeout, seen)
	}
	return ok
}

// waitReachable waits until the WorkloadCluster's Reachable condition is
// status (with reason, when not empty); a timeout is a scenario violation.
func (sc *scene) waitReachable(ctx context.Context, cluster string, status metav1.ConditionStatus, reason, key string, timeout time.Duration) bool {
	var last *metav1.Condition
	ok := waitFor(ctx, timeout, 200*time.Millisecond, func() bool {
		var wc petriv1.WorkloadCluster
		if err := sc.st.Client.Get(ctx, client.ObjectKey{Namespace: stack.ManagementNamespace, Name: cluster}, &wc); err != nil {
			return false
		}
		last = apimeta.FindStatusCondition(wc.Status.Conditions, petriv1.ConditionReachable)
		return last != nil && last.Status == status && (reason == "" || last.Reason == reason)
	})
	if !ok && ctx.Err() == nil {
		seen := "none"
		if last != nil {
			seen = fmt.Sprintf("%s %s: %s", last.Status, last.Reason, oneLine(last.Message))
		}
		sc.violate(ScenarioChecks, key, "WorkloadCluster %s: Reachable was not %s %s within %s (last: %s)", cluster, status, reason, timeout, seen)
	}
	return ok
}
