// Refresh: a replica that does not lead still answers webhooks; it records
// each one worth acting on as a refresh annotation on its repository's
// Repository object in sync's namespace (creating the object when it is
// missing), as Argo CD marks an ApplicationSet to refresh. The leader's
// repository controller watches those objects: it takes the annotations
// into the repository's state (pull requests to read, comments to list, a
// config fetch, a resync), removes them and passes over the repository. A
// mark carries no payload, only what to look at again: the leader reads the
// pull request, its comments and its gates from the forge itself.
//
// Why a Repository object and not the PullRequestStates: a webhook may name
// no pull request (a push, a commit status, a check run), and a pull
// request just opened has no state yet; the repository is what the pass is
// keyed by. The object names one repository (the config repository too),
// and is deleted when that repository has no application any more.

package syncer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/sync/config"
	"github.com/petri-dev/petri/sync/metrics"
	"github.com/petri-dev/petri/sync/render"
	"github.com/petri-dev/petri/sync/webhook"
)

// Marks: the name after petriv1.RefreshAnnotationPrefix.
const (
	// markRepository asks for a pass over the repository (a push, a
	// status, a check run).
	markRepository = "repository"
	// markConfig asks for a fetch of the config repository.
	markConfig = "config"
	// markResync asks for a resync of the repository (its open pull
	// requests and its recent comments); it stands for the marks beyond
	// markLimit.
	markResync = "resync"
	// markPullRequest and markComments, followed by a number, name a pull
	// request whose state changed, and one with a new command comment.
	markPullRequest = "pr."
	markComments    = "comments."
	// markLimit bounds the marks waiting on one Repository.
	markLimit = 256
	// markLastTry bounds the last recording of marks when the replica
	// stops; markBackoff is the first wait after a failed one.
	markLastTry = 2 * time.Second
	markBackoff = 100 * time.Millisecond
)

// marks are the marks a replica has yet to record, per repository key: the
// marks' names and when the oldest webhook of each arrived. Only the event
// loop holds them.
type marks map[string]map[string]time.Time

func (m marks) add(key, name string, at time.Time) {
	names := m[key]
	if names == nil {
		names = map[string]time.Time{}
		m[key] = names
	}
	if old, ok := names[name]; !ok || at.Before(old) {
		names[name] = at
	}
}

// repositoryObjectName is the name of a repository key's Repository: the key
// made a DNS label, and a hash of it, so that two keys never share one.
func repositoryObjectName(key string) string {
	sum := sha256.Sum256([]byte(key))
	var b strings.Builder
	for _, r := range strings.ToLower(key) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case b.Len() > 0 && !strings.HasSuffix(b.String(), "-"):
			b.WriteByte('-')
		}
	}
	base := b.String()
	if len(base) > 40 {
		base = base[:40]
	}
	base = strings.Trim(base, "-")
	if base == "" {
		base = "repository"
	}
	return base + "-" + hex.EncodeToString(sum[:5])
}

// refreshMarks are the refresh annotations of a Repository, by mark.
func refreshMarks(annotations map[string]string) map[string]time.Time {
	out := map[string]time.Time{}
	for k, v := range annotations {
		name, ok := strings.CutPrefix(k, petriv1.RefreshAnnotationPrefix)
		if !ok {
			continue
		}
		at, _ := time.Parse(time.RFC3339Nano, v)
		out[name] = at
	}
	return out
}

// markOf is the mark a webhook asks for on its repository; false when no
// application watches the repository (an organisation's webhook sends
// every repository's events). A push to the config repository also
// fetches the config here.
func (in *intake) markOf(ev webhook.Event) (key, name string, ok bool) {
	key = config.RepositoryKey(ev.Forge, ev.Repository)
	if ev.Type == "push" && in.isConfigRepo(ev) {
		in.triggerConfig()
		return key, markConfig, true
	}
	in.memory.mu.Lock()
	watched := in.memory.cfg == nil || in.memory.configured(key)
	in.memory.mu.Unlock()
	switch {
	case !watched:
		return "", "", false
	case ev.Type == "pull_request" && ev.PullRequest != nil:
		return key, markPullRequest + strconv.Itoa(ev.PullRequest.Number), true
	case ev.Type == "issue_comment" && ev.Comment != nil && ev.Comment.Number > 0:
		return key, markComments + strconv.Itoa(ev.Comment.Number), true
	case ev.Type == "merge_group" && ev.MergeGroup != nil:
		return key, mergeGroupMark(ev.MergeGroup), true
	}
	return key, markRepository, true
}

// refresher reads and writes the Repositories of sync's namespace: what
// a follower records, what the leader takes.
type refresher struct {
	client    client.Client
	cache     cache.Cache
	namespace string
	metrics   *metrics.Metrics
	log       logr.Logger
}

// record records what waits on the Repositories, one write per
// repository, and forgets what it recorded; it stops at the first failure.
func (r *refresher) record(ctx context.Context, pending marks) error {
	for _, key := range slices.Sorted(maps.Keys(pending)) {
		n := len(pending[key])
		if err := r.recordOne(ctx, key, pending[key]); err != nil {
			r.metrics.Refreshes.WithLabelValues("failed").Add(float64(n))
			return err
		}
		r.metrics.Refreshes.WithLabelValues("recorded").Add(float64(n))
		delete(pending, key)
	}
	return nil
}

// recordOne merges marks into a repository's Repository (a merge patch
// never conflicts with another replica's), creating it when it is missing.
// Beyond markLimit waiting marks one asking for a resync stands for them.
func (r *refresher) recordOne(ctx context.Context, key string, names map[string]time.Time) error {
	obj := &petriv1.Repository{ObjectMeta: metav1.ObjectMeta{Namespace: r.namespace, Name: repositoryObjectName(key)}}
	waiting := 0
	var cur petriv1.Repository
	if err := r.cache.Get(ctx, client.ObjectKeyFromObject(obj), &cur); err == nil {
		waiting = len(refreshMarks(cur.Annotations))
	}
	annotations := map[string]string{}
	if waiting+len(names) > markLimit {
		r.metrics.Refreshes.WithLabelValues("overflow").Add(float64(len(names)))
		r.log.Info("Too many refresh marks wait on the repository; the leader will resync it instead", "repository", key, "limit", markLimit)
		names = map[string]time.Time{markResync: slices.MinFunc(slices.Collect(maps.Values(names)), time.Time.Compare)}
	}
	for name, at := range names {
		annotations[petriv1.RefreshAnnotationPrefix+name] = at.UTC().Format(time.RFC3339Nano)
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		return err
	}
	err = r.client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch))
	if apierrors.IsNotFound(err) {
		forge, path := config.SplitRepositoryKey(key)
		create := obj.DeepCopy()
		create.Labels = map[string]string{petriv1.LabelManagedBy: render.ManagedBy}
		create.Annotations = annotations
		create.Spec = petriv1.RepositorySpec{Forge: forge, Repository: path}
		if err = r.client.Create(ctx, create); apierrors.IsAlreadyExists(err) {
			err = r.client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch))
		}
	}
	if err != nil {
		return fmt.Errorf("record refresh of %s on Repository %s/%s: %w", key, r.namespace, obj.Name, err)
	}
	return nil
}

// lastMarks records, within markLastTry, what waits when the replica stops:
// the marks not recorded yet and the events still queued, whether it led or
// not, for the leader or the next one.
func (in *intake) lastMarks(ctx context.Context, pending marks) {
	if in.refresh == nil {
		// Alone: the next start resyncs every repository.
		return
	}
	for drained := false; !drained; {
		select {
		case ev := <-in.events:
			if key, name, ok := in.markOf(ev); ok {
				pending.add(key, name, ev.Received)
			}
		default:
			drained = true
		}
	}
	if len(pending) == 0 {
		return
	}
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), markLastTry)
	defer cancel()
	if err := in.refresh.record(lctx, pending); err != nil {
		in.log.Error(err, "Recording webhooks for the leader failed as this replica stops; its resync finds what they named", "repositories", len(pending))
	}
}

// take returns the marks on a repository's Repository and removes them
// (those only: a merge patch with the version read, so that a mark added
// meanwhile stays). The Repository of a repository without applications
// (watched false) is deleted instead.
func (r *refresher) take(ctx context.Context, key string, watched bool) map[string]time.Time {
	var obj petriv1.Repository
	name := client.ObjectKey{Namespace: r.namespace, Name: repositoryObjectName(key)}
	if err := r.cache.Get(ctx, name, &obj); err != nil || watched && len(refreshMarks(obj.Annotations)) == 0 {
		if err != nil && !apierrors.IsNotFound(err) {
			r.log.Error(err, "Reading the repository's refresh marks failed; the pass goes on without them", "repository", key)
		}
		return nil
	}
	// The cache shows marks (or a Repository to delete): they are taken as
	// the API server has them now, so that marks this leader already took
	// and removed, which its cache may still show, are not taken twice.
	if err := r.client.Get(ctx, name, &obj); err != nil {
		if !apierrors.IsNotFound(err) {
			r.log.Error(err, "Reading the repository's refresh marks failed; the pass goes on without them", "repository", key)
		}
		return nil
	}
	taken := refreshMarks(obj.Annotations)
	r.metrics.Refreshes.WithLabelValues("taken").Add(float64(len(taken)))
	var err error
	switch {
	case !watched:
		err = r.client.Delete(ctx, &obj, client.Preconditions{UID: &obj.UID, ResourceVersion: &obj.ResourceVersion})
	case len(taken) > 0:
		before := obj.DeepCopy()
		for name := range taken {
			delete(obj.Annotations, petriv1.RefreshAnnotationPrefix+name)
		}
		err = r.client.Patch(ctx, &obj, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
	}
	// A conflict means marks were added meanwhile: their change queues the
	// repository again, and the next pass takes them.
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		r.log.Error(err, "Clearing the refresh marks taken failed; they are taken again, which does no harm", "repository", key)
	}
	return taken
}

func hasMark(m map[string]time.Time, name string) bool {
	_, ok := m[name]
	return ok
}

// take puts a Repository's marks into the repository's state, as
// handleEvent puts a webhook's, without a payload: the pass reads a named
// pull request from the forge when its listing does not show it.
func (rs *repoState) take(taken map[string]time.Time) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for name, at := range taken {
		if !at.IsZero() && (rs.pendingSince.IsZero() || at.Before(rs.pendingSince)) {
			rs.pendingSince = at
		}
		if pr, ok := strings.CutPrefix(name, markPullRequest); ok {
			if n, err := strconv.Atoi(pr); err == nil && n > 0 {
				rs.hints[n] = true
			}
		}
		if pr, ok := strings.CutPrefix(name, markComments); ok {
			if n, err := strconv.Atoi(pr); err == nil && n > 0 {
				rs.commentHints[n] = true
			}
		}
		if name == markResync {
			rs.resyncDue = true
		}
	}
}

// marked queues the repository of a Repository that carries marks: the
// leader's controller watches Repositories through it.
func marked() handler.TypedEventHandler[*petriv1.Repository, string] {
	queue := func(r *petriv1.Repository, q workqueue.TypedRateLimitingInterface[string]) {
		if len(refreshMarks(r.Annotations)) > 0 {
			q.Add(config.RepositoryKey(r.Spec.Forge, r.Spec.Repository))
		}
	}
	return handler.TypedFuncs[*petriv1.Repository, string]{
		CreateFunc: func(_ context.Context, e event.TypedCreateEvent[*petriv1.Repository], q workqueue.TypedRateLimitingInterface[string]) {
			queue(e.Object, q)
		},
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[*petriv1.Repository], q workqueue.TypedRateLimitingInterface[string]) {
			queue(e.ObjectNew, q)
		},
		GenericFunc: func(_ context.Context, e event.TypedGenericEvent[*petriv1.Repository], q workqueue.TypedRateLimitingInterface[string]) {
			queue(e.Object, q)
		},
	}
}
