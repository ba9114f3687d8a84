package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/clusters"
)

// placements serialises the operator's placement decisions and remembers
// the ones its cache may not show yet, so two environments placed at once
// do not both take a cluster's last room.
type placements struct {
	mu sync.Mutex
	// recent are the environments placed by this operator, by UID, with
	// their cluster, until the cache shows them placed.
	recent map[types.UID]recentPlacement
}

type recentPlacement struct {
	cluster string
	env     *petriv1.EphemeralEnvironment
}

// candidate is one workload cluster as placement sees it.
type candidate struct {
	cluster   *petriv1.WorkloadCluster
	reachable bool
	// connecting says the operator has not heard from the cluster since it
	// started (it is not reachable yet, and not known to be unreachable).
	connecting bool
	load       clusters.Load
	// sameApp is how many of the environment's application's environments
	// it has (Spread).
	sameApp int
}

// choice is placement's answer: a cluster, or why none. connecting says
// that the only clusters that would fit have not been heard from yet since
// the operator started: the pass waits for them and says nothing.
type choice struct {
	cluster         string
	reason, message string
	connecting      bool
}

// choose picks the cluster for an environment with placement p among
// candidates (sorted by name), adding requests: the named one, or the
// selector's best by strategy; none when none has room (ClusterAtCapacity),
// none matches (ClusterNotFound), or the only ones with room do not answer
// (ClusterUnreachable). Pure: the decision is tested on its own.
func choose(p *petriv1.Placement, requests clusters.Load, candidates []candidate) choice {
	var fits []candidate
	var full, down []string
	matched, connecting := 0, 0
	for _, c := range candidates {
		if !placementMatches(p, c.cluster) {
			continue
		}
		matched++
		switch why := room(c, requests); {
		case why != "":
			full = append(full, c.cluster.Name+" ("+why+")")
		case !c.reachable && c.connecting:
			connecting++
		case !c.reachable:
			down = append(down, c.cluster.Name)
		default:
			fits = append(fits, c)
		}
	}
	switch {
	case matched == 0 && p.Cluster != "":
		return choice{reason: petriv1.ReasonClusterNotFound, message: fmt.Sprintf("no WorkloadCluster %s is registered", p.Cluster)}
	case matched == 0:
		return choice{reason: petriv1.ReasonClusterNotFound, message: "no WorkloadCluster matches the placement's selector"}
	case len(fits) == 0 && connecting > 0:
		return choice{connecting: true}
	case len(fits) == 0 && len(down) > 0:
		return choice{reason: petriv1.ReasonClusterUnreachable, message: "waiting for a workload cluster to answer: " + strings.Join(down, ", ") + " does not"}
	case len(fits) == 0:
		return choice{reason: petriv1.ReasonClusterAtCapacity, message: "waiting for room: " + strings.Join(full, ", ")}
	}
	best := fits[0]
	for _, c := range fits[1:] {
		if better(p.Strategy, c, best, requests) {
			best = c
		}
	}
	return choice{cluster: best.cluster.Name}
}

func placementMatches(p *petriv1.Placement, wc *petriv1.WorkloadCluster) bool {
	if p.Cluster != "" {
		return wc.Name == p.Cluster
	}
	sel, err := metav1.LabelSelectorAsSelector(p.Selector)
	return err == nil && sel.Matches(labels.Set(wc.Labels))
}

// room says which cap of c the environment would pass, or "".
func room(c candidate, requests clusters.Load) string {
	spec := c.cluster.Spec
	switch {
	case spec.Cordoned:
		return "cordoned"
	case c.load.Environments+1 > int(spec.Capacity.Environments):
		return fmt.Sprintf("%d of %d environments", c.load.Environments, spec.Capacity.Environments)
	case exceeds(c.load.CPU, requests.CPU, spec.Capacity.CPU):
		return fmt.Sprintf("cpu %s of %s requested", c.load.CPU.String(), spec.Capacity.CPU.String())
	case exceeds(c.load.Memory, requests.Memory, spec.Capacity.Memory):
		return fmt.Sprintf("memory %s of %s requested", c.load.Memory.String(), spec.Capacity.Memory.String())
	}
	return ""
}

func exceeds(used, more resource.Quantity, capacity *resource.Quantity) bool {
	if capacity == nil {
		return false
	}
	used.Add(more)
	return used.Cmp(*capacity) > 0
}

// fill is how full c would be with the environment: its fullest cap, as a
// fraction.
func fill(c candidate, requests clusters.Load) float64 {
	spec := c.cluster.Spec
	f := float64(c.load.Environments+1) / float64(spec.Capacity.Environments)
	frac := func(used, more resource.Quantity, capacity *resource.Quantity) float64 {
		if capacity == nil || capacity.IsZero() {
			return 0
		}
		used.Add(more)
		return used.AsApproximateFloat64() / capacity.AsApproximateFloat64()
	}
	return max(f, frac(c.load.CPU, requests.CPU, spec.Capacity.CPU), frac(c.load.Memory, requests.Memory, spec.Capacity.Memory))
}

// better reports whether a is a better place than b: Spread prefers fewer
// environments of the same application, then (and LeastLoaded only) the
// emptier cluster; the name breaks ties, so the choice is deterministic.
func better(strategy petriv1.PlacementStrategy, a, b candidate, requests clusters.Load) bool {
	if strategy == petriv1.PlacementSpread && a.sameApp != b.sameApp {
		return a.sameApp < b.sameApp
	}
	if fa, fb := fill(a, requests), fill(b, requests); fa != fb {
		return fa < fb
	}
	return a.cluster.Name < b.cluster.Name
}

// placer chooses the workload cluster of an environment not yet placed,
// one decision at a time.
type placer struct {
	client     client.Client
	clusters   *clusters.Registry
	placements *placements
}

// place decides the cluster of an environment whose placement is not
// decided yet and returns it, or "" with ClusterPlaced False saying why
// (the pass then waits: a WorkloadCluster's change or an environment
// leaving one wakes it). The caller commits the choice with the
// namespace's name while holding the returned release: until then the
// decision holds the lock, so the next one counts it.
func (pl placer) place(ctx context.Context, env *petriv1.EphemeralEnvironment) (string, func(committed bool), error) {
	pl.placements.mu.Lock()
	release := func(committed bool) {
		if committed {
			pl.placements.remember(env)
		}
		pl.placements.mu.Unlock()
	}
	if pl.clusters == nil {
		setCondition(env, petriv1.ConditionClusterPlaced, metav1.ConditionFalse, petriv1.ReasonClusterNotFound, "this operator runs with --workload-clusters=false: spec.placement cannot be honoured")
		return "", release, nil
	}
	candidates, err := pl.candidates(ctx, env)
	if err != nil {
		return "", release, err
	}
	var requests clusters.Load
	requests.Add(env)
	requests.Environments = 0
	ch := choose(env.Spec.Placement, requests, candidates)
	if ch.connecting {
		log.FromContext(ctx).V(1).Info("Waiting for the workload clusters' first probes before placing")
		return "", release, nil
	}
	if ch.cluster == "" {
		setCondition(env, petriv1.ConditionClusterPlaced, metav1.ConditionFalse, ch.reason, ch.message)
		return "", release, nil
	}
	log.FromContext(ctx).Info("Placed in workload cluster", "cluster", ch.cluster)
	return ch.cluster, release, nil
}

// candidates are the registered clusters, each with what is placed there:
// the cache's count plus this operator's placements the cache does not
// show yet.
func (pl placer) candidates(ctx context.Context, env *petriv1.EphemeralEnvironment) ([]candidate, error) {
	var list petriv1.WorkloadClusterList
	if err := pl.client.List(ctx, &list, client.InNamespace(env.Namespace)); err != nil {
		return nil, fmt.Errorf("list workload clusters: %w", err)
	}
	app := env.Labels[petriv1.LabelApplication]
	var out []candidate
	for i := range list.Items {
		wc := &list.Items[i]
		var placed petriv1.EphemeralEnvironmentList
		if err := pl.client.List(ctx, &placed, client.InNamespace(env.Namespace), client.MatchingFields{clusters.PlacementIndex: wc.Name}); err != nil {
			return nil, fmt.Errorf("list environments placed in %s: %w", wc.Name, err)
		}
		// Not heard from yet: since the operator started, or since the
		// cluster was registered (no probe has said anything of it).
		t, _, pending := pl.clusters.State(wc.Name)
		unprobed := apimeta.FindStatusCondition(wc.Status.Conditions, petriv1.ConditionReachable) == nil
		c := candidate{cluster: wc, reachable: t != nil, connecting: pending || (t == nil && unprobed)}
		seen := map[types.UID]bool{}
		for j := range placed.Items {
			e := &placed.Items[j]
			seen[e.UID] = true
			c.load.Add(e)
			if app != "" && e.Labels[petriv1.LabelApplication] == app {
				c.sameApp++
			}
		}
		for uid, p := range pl.placements.recentIn(wc.Name) {
			if !seen[uid] {
				c.load.Add(p)
				if app != "" && p.Labels[petriv1.LabelApplication] == app {
					c.sameApp++
				}
			}
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b candidate) int { return strings.Compare(a.cluster.Name, b.cluster.Name) })
	return out, nil
}

// remember keeps env's placement until forget (called with mu held).
func (p *placements) remember(env *petriv1.EphemeralEnvironment) {
	if p.recent == nil {
		p.recent = map[types.UID]recentPlacement{}
	}
	p.recent[env.UID] = recentPlacement{cluster: env.Status.Cluster, env: env.DeepCopy()}
}

// recentIn are the remembered placements in cluster (called with mu held).
func (p *placements) recentIn(cluster string) map[types.UID]*petriv1.EphemeralEnvironment {
	out := map[types.UID]*petriv1.EphemeralEnvironment{}
	for uid, rp := range p.recent {
		if rp.cluster == cluster {
			out[uid] = rp.env
		}
	}
	return out
}

// seen forgets a placement once a pass reads the environment placed (its
// cache shows it from then on).
func (p *placements) seen(env *petriv1.EphemeralEnvironment) {
	if env.Status.Cluster == "" {
		return
	}
	p.mu.Lock()
	delete(p.recent, env.UID)
	p.mu.Unlock()
}

// clusterPlaced records that the environment's cluster answers.
func clusterPlaced(env *petriv1.EphemeralEnvironment) {
	if env.Status.Cluster == "" {
		return
	}
	if c := apimeta.FindStatusCondition(env.Status.Conditions, petriv1.ConditionClusterPlaced); c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != env.Generation {
		setCondition(env, petriv1.ConditionClusterPlaced, metav1.ConditionTrue, petriv1.ReasonClusterPlaced, "placed in workload cluster "+env.Status.Cluster)
	}
}
