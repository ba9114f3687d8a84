// Environments: the second step of a repository's observe. sync's own
// environments of the repository's applications, listed from sync's cache
// (or from the API server while the cache lags behind sync's own writes),
// and indexed by application and pull request.

package syncer

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/internal/cacheguard"
	"github.com/petri-dev/petri/sync/config"
	"github.com/petri-dev/petri/sync/render"
)

// environments lists sync's environments of the repository into o.envs,
// by application and pull request. It returns the pull requests not listed
// as open that have an environment not being deleted: only those are read
// on their own.
func (rc *repoController) environments(ctx context.Context, o *observation) ([]int, error) {
	var envs petriv1.EphemeralEnvironmentList
	if err := rc.writer.listEnvironments(ctx, o.apps, &envs); err != nil {
		return nil, fmt.Errorf("list environments: %w", err)
	}
	o.envs = map[string]map[int]*petriv1.EphemeralEnvironment{}
	for _, app := range o.apps {
		o.envs[app.Name] = map[int]*petriv1.EphemeralEnvironment{}
	}
	live := map[int]bool{}
	for i := range envs.Items {
		e := &envs.Items[i]
		by := o.envs[e.Labels[render.LabelApplication]]
		if by == nil || !render.Owned(e.Labels) || render.RepositoryKey(e.Annotations) != o.repo {
			continue
		}
		n, _ := strconv.Atoi(e.Labels[render.LabelPullRequest])
		by[n] = e
		if _, isOpen := o.openBy[n]; !isOpen && n != 0 && e.DeletionTimestamp == nil {
			live[n] = true
		}
	}
	return slices.Sorted(maps.Keys(live)), nil
}

// listEnvironments lists the environments sync wrote for the applications
// of one repository (those whose application label names one of them) from
// sync's own cache, and from the API server while the cache has not yet
// shown one of sync's own writes for them.
//
// The cache spares a list request per reconcile, and its decoding: one more
// request per event for the API server otherwise (docs/benchmarks.md has
// what it cost sync). What the
// cache must never do is hide sync's own last write from the next
// reconcile: an environment just created would not count against
// maxEnvironments, one just deleted would be deleted again. ownWrites
// remembers each write until the cache shows it; until then the list is
// the API server's. Writes by others reach the cache through its watch like
// every change, a moment later.
func (w *writer) listEnvironments(ctx context.Context, apps []*config.Application, list *petriv1.EphemeralEnvironmentList) error {
	names := make([]string, 0, len(apps))
	for _, a := range apps {
		names = append(names, a.Name)
	}
	sel := labels.SelectorFromSet(labels.Set{petriv1.LabelManagedBy: render.ManagedBy})
	in, err := labels.NewRequirement(render.LabelApplication, selection.In, names)
	if err != nil {
		return err
	}
	opts := []client.ListOption{client.InNamespace(w.namespace), client.MatchingLabelsSelector{Selector: sel.Add(*in)}}
	if err := w.cache.List(ctx, list, opts...); err == nil && w.writes.seen(list, names) {
		return nil
	}
	w.metrics.UncachedLists.Inc()
	if err := w.client.List(ctx, list, opts...); err != nil {
		return err
	}
	w.writes.dropGone(list, names)
	return nil
}

// ownWrites remembers sync's writes of environments (the resourceVersion an
// apply returned, the UID of a deletion) per application until sync's cache
// shows them: the guard the operator uses too (internal/cacheguard), keyed
// by the environment's name and grouped by application.
type ownWrites struct{ cacheguard.Writes[string] }

func (w *ownWrites) applying(app, name string, at time.Time) { w.Applying(name, app, at) }

// abandon ends an apply that was not made (or failed).
func (w *ownWrites) abandon(name string) { w.Abandon(name) }

func (w *ownWrites) applied(app, name, resourceVersion string, at time.Time) {
	w.Applied(name, app, resourceVersion, at)
}

func (w *ownWrites) removed(app, name string, uid types.UID, at time.Time) {
	w.Removed(name, app, uid, at)
}

// unseenWait bounds how long feedback waits for the cache to show one of
// sync's writes (unseen): the watch shows it within milliseconds, and a
// write the cache never shows (the object was replaced meanwhile) must not
// hold the feedback back for longer.
const unseenWait = 5 * time.Second

// unseen tells whether the cache's copy of the named environment (nil when
// the cache has none) is older than sync's last write of it, written less
// than unseenWait before now: feedback from that copy would show the
// environment as it was before the write, and be written again a moment
// later when the watch shows the write. An apply under way is unseen too. A
// deletion counts as shown once the copy is marked for deletion.
func (w *ownWrites) unseen(name string, have *petriv1.EphemeralEnvironment, now time.Time) bool {
	var o cacheguard.Object
	if have != nil {
		o = have
	}
	return w.Unseen(name, o, now, unseenWait)
}

// seen tells whether list (from the cache) shows every write remembered
// for apps; the writes it shows are forgotten.
func (w *ownWrites) seen(list *petriv1.EphemeralEnvironmentList, apps []string) bool {
	return w.Seen(objects(list), cacheguard.Object.GetName, apps)
}

// dropGone forgets applies of apps whose environment the API server's list
// no longer has (deleted by someone else): the cache would wait for them
// forever.
func (w *ownWrites) dropGone(list *petriv1.EphemeralEnvironmentList, apps []string) {
	w.DropGone(objects(list), cacheguard.Object.GetName, apps)
}

func objects(list *petriv1.EphemeralEnvironmentList) []cacheguard.Object {
	out := make([]cacheguard.Object, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out
}
