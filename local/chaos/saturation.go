package chaos

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/stack"
)

// leaderElectionDefaults are the operator's own leader election timings
// (controllers.DefaultOptions), which the saturation scenario plays with in
// place of the suite's shorter ones (OperatorFlags): riding out a slow API
// server is what they are for.
var leaderElectionDefaults = []string{"--leader-election-lease-duration=60s", "--leader-election-renew-deadline=40s", "--leader-election-retry-period=5s"}

// floodNamespace holds the ServiceAccounts the flood sends its requests as.
const floodNamespace = "chaos-flood"

// playSaturation floods kube-apiserver while environments deploy: many
// clients, each a ServiceAccount of its own (so at the workload-low
// priority level, beside the deployer Jobs, where every ServiceAccount's
// requests go), list every pod and ConfigMap of the cluster as fast as it
// answers, for a minute (20 s in the short version) from the first create.
// The operator must keep its Lease (no restart, no new holder), no deployer
// may cancel its Helm operation for a release Lease it could not renew
// ("release lock lost"), and every environment must be Ready after.
func playSaturation(ctx context.Context, sc *scene) error {
	n := sc.size(100, 8)
	clients := sc.size(48, 12)
	floodFor := time.Duration(sc.size(60, 20)) * time.Second
	timeout := stepTimeout

	if err := sc.st.SetOperatorFlags(ctx, leaderElectionDefaults...); err != nil {
		return err
	}
	defer func() {
		if err := sc.st.SetOperatorFlags(context.WithoutCancel(ctx), OperatorFlags...); err != nil {
			sc.logf("the suite's operator flags could not be set again: %v", err)
		}
	}()
	leader, err := sc.waitLiveOperatorLeader(ctx, 2*time.Minute)
	if err != nil {
		return err
	}
	before, err := sc.operatorLease(ctx)
	if err != nil {
		return err
	}
	f, err := sc.newFlood(ctx, clients)
	if err != nil {
		return err
	}

	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("s10-e%02d", i+1)
	}
	floodCtx, stopFlood := context.WithTimeout(ctx, floodFor)
	defer stopFlood()
	flooded := make(chan struct{})
	go func() { defer close(flooded); f.run(floodCtx) }()
	sc.logf("kube-apiserver flooded by %d clients for %s while %d environments deploy", clients, floodFor, n)
	for _, name := range names {
		sc.expectPresent(name)
		if err := sc.create(ctx, newEnvironment(name, sc.tag(), light, 1)); err != nil {
			return err
		}
	}
	<-flooded
	sc.logf("flood over: %d requests, %d refused (429), %d failed otherwise", f.requests.Load(), f.throttled.Load(), f.failed.Load())
	sc.parallel(names, func(name string) { sc.waitState(ctx, name, "deploy", true, timeout) })

	sc.checkLeaseKept(ctx, leader, before)
	lost := sc.checkReleaseLocks(ctx, names)

	sc.parallel(names, func(name string) {
		sc.expectGone(name)
		if err := sc.remove(ctx, name); err == nil {
			sc.waitState(ctx, name, "teardown", false, timeout)
		}
	})
	sc.row.Faults = fmt.Sprintf("kube-apiserver flooded for %s by %d ServiceAccounts at workload-low (%d lists, %d refused with 429) during %d deploys; operator Lease kept: %t; Helm operations cancelled for a lost release Lease: %d",
		floodFor, clients, f.requests.Load(), f.throttled.Load(), n, sc.operatorHolder(ctx) == leader, lost)
	return nil
}

// operatorLease reads the operator's leader Lease.
func (sc *scene) operatorLease(ctx context.Context) (*coordinationv1.Lease, error) {
	var l coordinationv1.Lease
	err := retryAPI(ctx, func() error {
		return sc.st.Client.Get(ctx, client.ObjectKey{Namespace: stack.ManagementNamespace, Name: operatorLease}, &l)
	})
	return &l, err
}

func (sc *scene) operatorHolder(ctx context.Context) string {
	l, err := sc.operatorLease(ctx)
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// checkLeaseKept: the operator that led before the flood leads after it,
// without a transition (a restarted process has a new identity).
func (sc *scene) checkLeaseKept(ctx context.Context, leader string, before *coordinationv1.Lease) {
	after, err := sc.operatorLease(ctx)
	if err != nil {
		sc.violate(ScenarioChecks, "s10/lease", "the operator's Lease could not be read after the flood: %v", err)
		return
	}
	holder := ""
	if after.Spec.HolderIdentity != nil {
		holder = *after.Spec.HolderIdentity
	}
	if holder != leader || ptrInt32(after.Spec.LeaseTransitions) != ptrInt32(before.Spec.LeaseTransitions) {
		sc.violate(ScenarioChecks, "s10/lease", "the operator lost its Lease under the flood: held by %q before, %q after (transitions %d, then %d)",
			leader, holder, ptrInt32(before.Spec.LeaseTransitions), ptrInt32(after.Spec.LeaseTransitions))
	}
}

func ptrInt32(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}

// checkReleaseLocks finds the deployer pods of the environments that ended
// saying "release lock lost": a Helm operation cancelled because a renewal
// of its release Lease did not get through.
func (sc *scene) checkReleaseLocks(ctx context.Context, names []string) int {
	var pods corev1.PodList
	if err := retryAPI(ctx, func() error {
		return sc.st.Client.List(ctx, &pods, client.InNamespace(stack.ManagementNamespace), client.HasLabels{petriv1.LabelEnvironment})
	}); err != nil {
		sc.violate(ScenarioChecks, "s10/pods", "the deployer pods could not be listed: %v", err)
		return 0
	}
	mine := map[string]bool{}
	for _, n := range names {
		mine[n] = true
	}
	lost := 0
	for _, p := range pods.Items {
		if !mine[p.Labels[petriv1.LabelEnvironment]] {
			continue
		}
		for _, cs := range p.Status.ContainerStatuses {
			for _, t := range []*corev1.ContainerStateTerminated{cs.State.Terminated, cs.LastTerminationState.Terminated} {
				if t == nil || !strings.Contains(t.Message, "release lock lost") {
					continue
				}
				lost++
				sc.violate(ScenarioChecks, "s10/lock/"+p.Name, "deployer pod %s of %s cancelled its Helm operation: %s", p.Name, p.Labels[petriv1.LabelEnvironment], firstLine(t.Message))
			}
		}
	}
	return lost
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// flood is the load: one client per ServiceAccount.
type flood struct {
	clients                     []kubernetes.Interface
	requests, throttled, failed atomic.Int64
}

// newFlood makes the ServiceAccounts, lets them list pods and ConfigMaps
// everywhere, and builds a client for each, unthrottled on its side.
func (sc *scene) newFlood(ctx context.Context, n int) (*flood, error) {
	c := sc.st.Client
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: floodNamespace}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "chaos-flood"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods", "configmaps"}, Verbs: []string{"list"}},
		}},
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "chaos-flood"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "chaos-flood"}}
	for i := range n {
		name := fmt.Sprintf("flood-%02d", i)
		objs = append(objs, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: floodNamespace, Name: name}})
		binding.Subjects = append(binding.Subjects, rbacv1.Subject{Kind: "ServiceAccount", Namespace: floodNamespace, Name: name})
	}
	objs = append(objs, binding)
	for _, o := range objs {
		if err := retryAPI(ctx, func() error { return c.Create(ctx, o) }); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("flood: create %T %s: %w", o, o.GetName(), err)
		}
	}
	f := &flood{}
	for i := range n {
		cfg, err := sc.st.Cluster.ServiceAccountConfig(ctx, floodNamespace, fmt.Sprintf("flood-%02d", i))
		if err != nil {
			return nil, err
		}
		cfg.QPS, cfg.Burst = -1, 0
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		f.clients = append(f.clients, cs)
	}
	return f, nil
}

// run lists as fast as kube-apiserver answers, from every client, until ctx
// ends.
func (f *flood) run(ctx context.Context) {
	var wg sync.WaitGroup
	for i, cs := range f.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				var err error
				if i%2 == 0 {
					_, err = cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
				} else {
					_, err = cs.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{})
				}
				f.requests.Add(1)
				switch {
				case err == nil, ctx.Err() != nil:
				case apierrors.IsTooManyRequests(err):
					f.throttled.Add(1)
				default:
					f.failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
}
