// Hand-over: a replica that does not lead still answers GitHub's webhooks;
// it records each event worth acting on (its kind, repository, pull request
// number and delivery id, never the payload) in a ConfigMap of sync's
// namespace, and the leader, which watches that ConfigMap, takes the entries
// and removes them. Events are hints: the leader reads the pull request's
// state from GitHub itself. The ConfigMap holds at most HandoverLimit
// entries (one per pull request and kind); beyond that the events are
// replaced by one request for a full resync, which covers them all.

package syncer

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/sync/config"
	"github.com/petri-dev/petri/sync/render"
	"github.com/petri-dev/petri/sync/webhook"
)

// Kinds of hand-over entries.
const (
	// handoverPullRequest names a pull request whose state changed.
	handoverPullRequest = "pull_request"
	// handoverRepository names a repository to reconcile (a push, a status
	// or a check run).
	handoverRepository = "repository"
	// handoverConfig asks for a fetch of the config repository.
	handoverConfig = "config"
	// handoverComment names a pull request with a new command comment;
	// the leader lists its comments.
	handoverComment = "comment"
	// handoverResync asks for a resync of every repository; it stands for
	// the events a full ConfigMap could not take.
	handoverResync = "resync"
	// resyncKey is the one entry of kind handoverResync.
	resyncKey = "resync"
)

// handoverEntry is one event handed to the leader.
type handoverEntry struct {
	Event      string    `json:"event"`
	Repository string    `json:"repository,omitempty"`
	Number     int       `json:"number,omitempty"`
	Delivery   string    `json:"delivery,omitempty"`
	Received   time.Time `json:"received"`
}

// same is what makes two entries one: the leader acts on a pull request
// once however many of its events wait.
func (e handoverEntry) same() string {
	return fmt.Sprintf("%s|%s|%d", e.Event, e.Repository, e.Number)
}

// key is the entry's ConfigMap key: the delivery id (GitHub's GUID), or a
// unique one when it has none a key may use (the time the event arrived
// and a count of such keys, so two events of one instant differ).
func (e handoverEntry) key() string {
	k := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '.', r == '_':
			return r
		}
		return -1
	}, e.Delivery)
	if k == "" || k == resyncKey || len(k) > 200 {
		k = fmt.Sprintf("event-%d-%d", e.Received.UnixNano(), unnamedEvents.Add(1))
	}
	return k
}

// unnamedEvents counts the hand-over keys made for events without a usable
// delivery id.
var unnamedEvents atomic.Uint64

// handoverOutbox holds the events received but not yet recorded in the
// ConfigMap, at most HandoverLimit; beyond that only that a resync is due.
type handoverOutbox struct {
	mu       sync.Mutex
	pending  []handoverEntry
	overflow bool
	signal   chan struct{}
}

func (o *handoverOutbox) add(e handoverEntry, limit int) {
	o.mu.Lock()
	for _, p := range o.pending {
		if p.same() == e.same() {
			o.mu.Unlock()
			return
		}
	}
	if len(o.pending) >= limit {
		o.overflow = true
	} else {
		o.pending = append(o.pending, e)
	}
	o.mu.Unlock()
	select {
	case o.signal <- struct{}{}:
	default:
	}
}

func (o *handoverOutbox) take() ([]handoverEntry, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	out, overflow := o.pending, o.overflow
	o.pending, o.overflow = nil, false
	return out, overflow
}

// putBack returns entries whose recording failed, ahead of newer ones.
func (o *handoverOutbox) putBack(entries []handoverEntry, overflow bool, limit int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	all := append(entries, o.pending...)
	if len(all) > limit {
		all, overflow = all[:limit], true
	}
	o.pending, o.overflow = all, o.overflow || overflow
}

// handOver queues an event for the leader. Events of repositories no
// application watches are dropped here, as the leader would drop them; a
// push to the config repository also refreshes this replica's config.
func (s *Syncer) handOver(ev webhook.Event) {
	le := s.opts.LeaderElection
	if le == nil {
		return
	}
	e := handoverEntry{Event: handoverRepository, Repository: config.RepositoryKey(ev.Forge, ev.Repository), Delivery: ev.Delivery, Received: ev.Received}
	if ev.Type == "push" && s.isConfigRepo(ev) {
		s.TriggerConfigFetch()
		e.Event, e.Repository = handoverConfig, ""
	} else {
		s.mu.Lock()
		watched := s.cfg == nil || s.configured(e.Repository)
		s.mu.Unlock()
		if !watched {
			return
		}
		if ev.Type == "pull_request" && ev.PullRequest != nil {
			e.Event, e.Number = handoverPullRequest, ev.PullRequest.Number
		}
		if ev.Type == "issue_comment" && ev.Comment != nil {
			e.Event, e.Number = handoverComment, ev.Comment.Number
		}
	}
	s.handover.add(e, le.HandoverLimit)
}

// handoverLastTry bounds the last recording of hand-overs when the replica
// stops.
const handoverLastTry = 2 * time.Second

// handoverLoop records queued events in the ConfigMap, in batches, and
// retries with back-off while the API server refuses. When ctx ends, once
// taken closes (the events queued then are handed over too), it tries
// once more, with time of its own, so that what the replica took is not
// lost with it.
func (s *Syncer) handoverLoop(ctx context.Context, taken <-chan struct{}) {
	le := s.opts.LeaderElection
	backoff := 100 * time.Millisecond
	defer s.lastHandovers(ctx, taken)
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.handover.signal:
		}
		for {
			batch, overflow := s.handover.take()
			if len(batch) == 0 && !overflow {
				break
			}
			err := s.recordHandovers(ctx, batch, overflow)
			if err == nil {
				backoff = 100 * time.Millisecond
				continue
			}
			s.opts.Metrics.Handovers.WithLabelValues("failed").Add(float64(len(batch)))
			s.log.Error(err, "Handing webhook events to the leader failed; retrying", "configMap", le.Namespace+"/"+le.HandoverConfigMap, "events", len(batch), "retryIn", backoff)
			s.handover.putBack(batch, overflow, le.HandoverLimit)
			select {
			case <-ctx.Done():
				return
			case <-s.clock.After(backoff):
			}
			backoff = min(2*backoff, 30*time.Second)
		}
	}
}

// lastHandovers records what waits to be handed over when the replica
// stops, within handoverLastTry.
func (s *Syncer) lastHandovers(ctx context.Context, taken <-chan struct{}) {
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), handoverLastTry)
	defer cancel()
	select {
	case <-taken:
	case <-lctx.Done():
	}
	batch, overflow := s.handover.take()
	if len(batch) == 0 && !overflow {
		return
	}
	le := s.opts.LeaderElection
	if err := s.recordHandovers(lctx, batch, overflow); err != nil {
		s.opts.Metrics.Handovers.WithLabelValues("failed").Add(float64(len(batch)))
		s.log.Error(err, "Handing webhook events to the leader failed as this replica stops; its resync finds what they named", "configMap", le.Namespace+"/"+le.HandoverConfigMap, "events", len(batch))
	}
}

// recordHandovers adds entries to the ConfigMap (creating it when it is
// missing), one per pull request and kind, at most HandoverLimit.
func (s *Syncer) recordHandovers(ctx context.Context, batch []handoverEntry, overflow bool) error {
	le := s.opts.LeaderElection
	cms := s.kube.CoreV1().ConfigMaps(le.Namespace)
	var recorded, merged, overflowed int
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		recorded, merged, overflowed = 0, 0, 0
		cm, err := cms.Get(ctx, le.HandoverConfigMap, metav1.GetOptions{})
		missing := apierrors.IsNotFound(err)
		switch {
		case missing:
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: le.Namespace, Name: le.HandoverConfigMap,
				Labels: map[string]string{petriv1.LabelManagedBy: render.ManagedBy}}}
		case err != nil:
			return fmt.Errorf("read ConfigMap %s/%s: %w", le.Namespace, le.HandoverConfigMap, err)
		}
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		waiting := map[string]bool{}
		for _, v := range cm.Data {
			var e handoverEntry
			if json.Unmarshal([]byte(v), &e) == nil {
				waiting[e.same()] = true
			}
		}
		resync := func() {
			raw, _ := json.Marshal(handoverEntry{Event: handoverResync, Received: s.clock.Now()})
			cm.Data[resyncKey] = string(raw)
		}
		if overflow {
			resync()
		}
		for _, e := range batch {
			switch {
			case waiting[e.same()]:
				merged++
			case len(cm.Data) >= le.HandoverLimit:
				if _, ok := cm.Data[resyncKey]; !ok {
					resync()
				}
				overflowed++
			default:
				raw, err := json.Marshal(e)
				if err != nil {
					return err
				}
				cm.Data[e.key()] = string(raw)
				waiting[e.same()] = true
				recorded++
			}
		}
		if missing {
			_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, le.HandoverConfigMap, err)
			}
		} else {
			_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		}
		if err != nil {
			return fmt.Errorf("write ConfigMap %s/%s: %w", le.Namespace, le.HandoverConfigMap, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	m := s.opts.Metrics.Handovers
	m.WithLabelValues("recorded").Add(float64(recorded))
	m.WithLabelValues("merged").Add(float64(merged))
	m.WithLabelValues("overflow").Add(float64(overflowed))
	if overflowed > 0 || overflow {
		s.log.Info("Hand-over ConfigMap full; the leader will resync every repository instead", "configMap", le.Namespace+"/"+le.HandoverConfigMap, "limit", le.HandoverLimit)
	}
	return nil
}

// takeHandovers is the leader's side: it watches the ConfigMap, acts on
// each entry as on a webhook and removes the entries it took.
func (s *Syncer) takeHandovers(ctx context.Context) {
	le := s.opts.LeaderElection
	log := s.log.WithValues("configMap", le.Namespace+"/"+le.HandoverConfigMap)
	factory := informers.NewSharedInformerFactoryWithOptions(s.kube, 0, informers.WithNamespace(le.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", le.HandoverConfigMap).String()
		}))
	inf := factory.Core().V1().ConfigMaps().Informer()
	changed := make(chan struct{}, 1)
	poke := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke() },
		UpdateFunc: func(any, any) { poke() },
	}); err != nil {
		log.Error(err, "Cannot watch the hand-over ConfigMap; events received by other replicas wait for the next resync")
		return
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return
	}
	poke()
	retryIn := time.Second
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
		obj, ok, _ := inf.GetStore().GetByKey(le.Namespace + "/" + le.HandoverConfigMap)
		cm, _ := obj.(*corev1.ConfigMap)
		if !ok || cm == nil || len(cm.Data) == 0 {
			continue
		}
		keys := slices.Sorted(func(yield func(string) bool) {
			for k := range cm.Data {
				if !yield(k) {
					return
				}
			}
		})
		for _, k := range keys {
			var e handoverEntry
			if err := json.Unmarshal([]byte(cm.Data[k]), &e); err != nil {
				log.Info("Dropping a hand-over entry that is not one", "key", k)
				continue
			}
			s.takeHandover(e)
		}
		if err := s.removeHandovers(ctx, keys); err != nil {
			// Taking an entry twice does no harm: the work queue merges.
			log.Error(err, "Removing taken hand-over entries failed; retrying", "retryIn", retryIn)
			select {
			case <-ctx.Done():
				return
			case <-s.clock.After(retryIn):
			}
			retryIn = min(2*retryIn, 30*time.Second)
			poke()
			continue
		}
		retryIn = time.Second
	}
}

// takeHandover acts on an entry as handleEvent acts on a webhook, without a
// payload: a pull request is read from GitHub by the reconcile.
func (s *Syncer) takeHandover(e handoverEntry) {
	s.opts.Metrics.Handovers.WithLabelValues("taken").Inc()
	switch e.Event {
	case handoverConfig:
		s.log.Info("Config repository pushed (handed over); fetching", "delivery", e.Delivery)
		s.TriggerConfigFetch()
		return
	case handoverResync:
		s.log.Info("Events were handed over beyond the ConfigMap's limit; resyncing every repository")
		s.Resync()
		return
	case handoverPullRequest, handoverRepository, handoverComment:
	default:
		return
	}
	key := strings.ToLower(e.Repository)
	r := s.configuredRepo(key)
	if r == nil {
		return
	}
	r.mu.Lock()
	if r.pendingSince.IsZero() {
		r.pendingSince = e.Received
	}
	switch {
	case e.Event == handoverComment && e.Number > 0:
		r.commentHints[e.Number] = true
	case e.Number > 0:
		r.hints[e.Number] = true
	}
	r.mu.Unlock()
	s.queue.Add(key)
}

// removeHandovers deletes taken keys with a merge patch, which leaves
// entries recorded meanwhile alone.
func (s *Syncer) removeHandovers(ctx context.Context, keys []string) error {
	le := s.opts.LeaderElection
	data := make(map[string]any, len(keys))
	for _, k := range keys {
		data[k] = nil
	}
	patch, err := json.Marshal(map[string]any{"data": data})
	if err != nil {
		return err
	}
	_, err = s.kube.CoreV1().ConfigMaps(le.Namespace).Patch(ctx, le.HandoverConfigMap, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("remove %d taken entries from ConfigMap %s/%s: %w", len(keys), le.Namespace, le.HandoverConfigMap, err)
	}
	return nil
}
