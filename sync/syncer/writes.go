// Writes: rendering an environment and applying it with server-side apply
// (held at its commit while the artifact gate has not passed), applying the
// declared SharedWorkloads, and deletes guarded by ownership and UID. Objects
// sync does not own are never touched.

package syncer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/sync/config"
	"github.com/petri-dev/petri/sync/metrics"
	"github.com/petri-dev/petri/sync/provider"
	"github.com/petri-dev/petri/sync/render"
	"github.com/petri-dev/petri/sync/resolve"
)

// writer is what writes sync's objects in the management namespace: the
// environments (and their annotations), the shared workloads, and the
// ownWrites that the next list and the feedback wait for.
type writer struct {
	client    client.Client
	cache     cache.Cache
	namespace string
	resolver  *resolve.Resolver
	writes    *ownWrites
	forges    forgeSet
	clock     clock.Clock
	metrics   *metrics.Metrics
	log       logr.Logger
}

// writeEnv renders and applies one environment. With an artifact gate, a
// head commit whose gate has not passed is not written: the environment
// keeps the commit it has, or is not created yet; the gate is read on
// forge, the pass's.
func (w *writer) writeEnv(ctx context.Context, rs *repoState, forge repoForge, app *config.Application, pr provider.PullRequest, existing *petriv1.EphemeralEnvironment, since time.Time) (created bool, err error) {
	target := pr
	waiting := ""
	if app.ArtifactGate != nil {
		gate := provider.Gate{CheckRun: app.ArtifactGate.CheckRun, StatusContext: app.ArtifactGate.StatusContext, App: app.ArtifactGate.App}
		ok, reason, err := w.gateOf(ctx, rs, forge, pr, gate)
		if err != nil {
			var rle *provider.RateLimitError
			if errors.As(err, &rle) {
				return false, err
			}
			reason = fmt.Sprintf("cannot read %s: %v", gate, err)
		}
		if !ok {
			waiting = reason
			if existing == nil || existing.Spec.Source == nil {
				rs.setPRState(pr.Number, app.Name, func(st *render.PRState) {
					st.HeadSHA, st.Waiting, st.Error, st.Deleted = pr.HeadSHA, waiting, "", ""
				})
				return false, nil
			}
			if existing.Spec.Source.SHA == pr.HeadSHA {
				waiting = ""
			} else {
				target.HeadSHA = existing.Spec.Source.SHA
			}
		}
	}
	versions := map[string]string{}
	for i, c := range app.Components {
		v, err := w.resolver.Resolve(ctx, c.Chart.Repository, c.Chart.Name, c.Chart.Version)
		if err != nil {
			field := fmt.Sprintf("components[%d].chart.version", i)
			err = fmt.Errorf("%s:%d: %s: %w", app.File, app.Line(field), field, err)
			rs.setPRState(pr.Number, app.Name, func(st *render.PRState) {
				st.HeadSHA, st.Error, st.Waiting, st.Deleted = pr.HeadSHA, "chart resolution failed: "+err.Error(), "", ""
			})
			return false, err
		}
		versions[c.Name] = v
	}
	ee, err := render.Environment(app, target, w.namespace, versions)
	if err != nil {
		rs.setPRState(pr.Number, app.Name, func(st *render.PRState) {
			st.HeadSHA, st.Error, st.Waiting, st.Deleted = pr.HeadSHA, err.Error(), "", ""
		})
		return false, err
	}
	url := ee.Annotations[render.AnnotationURL]
	same := existing != nil && sameEnv(existing, ee)
	if !same {
		// Feedback waits for the write from now on (unseen): meanwhile the
		// cache's copy is at the previous commit, and the pull request's
		// state at the new one.
		w.writes.applying(app.Name, ee.Name, w.clock.Now())
		defer w.writes.abandon(ee.Name)
	}
	rs.setPRState(pr.Number, app.Name, func(st *render.PRState) {
		st.HeadSHA, st.Waiting, st.Error, st.Deleted, st.URL = pr.HeadSHA, waiting, "", "", url
	})
	if same {
		return false, nil
	}
	if existing == nil {
		// Never take over an object of that name that sync did not write.
		var other petriv1.EphemeralEnvironment
		err := w.client.Get(ctx, client.ObjectKeyFromObject(ee), &other)
		switch {
		case err == nil && !render.Owned(other.Labels):
			err = fmt.Errorf("environment %s exists and is not managed by petri-sync; leaving it alone", ee.Name)
			rs.setPRState(pr.Number, app.Name, func(st *render.PRState) { st.Error = err.Error() })
			return false, err
		case err != nil && !apierrors.IsNotFound(err):
			return false, fmt.Errorf("get environment %s: %w", ee.Name, err)
		}
	}
	written, err := w.applied(ctx, ee)
	if err != nil {
		return false, fmt.Errorf("apply environment %s: %w", ee.Name, err)
	}
	w.writes.applied(app.Name, ee.Name, written.GetResourceVersion(), w.clock.Now())
	op := "update"
	if existing == nil {
		op = "create"
	}
	w.metrics.Writes.WithLabelValues("EphemeralEnvironment", op).Inc()
	if !since.IsZero() {
		w.metrics.WebhookToWrite.Observe(w.clock.Since(since).Seconds())
	}
	w.log.Info("Wrote environment", "environment", ee.Name, "operation", op, "pullRequest", pr.Number, "sha", target.HeadSHA)
	return existing == nil, nil
}

// sameEnv reports whether applying want would change nothing sync owns.
func sameEnv(have, want *petriv1.EphemeralEnvironment) bool {
	for k, v := range want.Labels {
		if have.Labels[k] != v {
			return false
		}
	}
	for k, v := range want.Annotations {
		if have.Annotations[k] != v {
			return false
		}
	}
	return jsonEqual(have.Spec, want.Spec)
}

func jsonEqual(a, b any) bool {
	var x, y any
	ra, err1 := json.Marshal(a)
	rb, err2 := json.Marshal(b)
	if err1 != nil || err2 != nil || json.Unmarshal(ra, &x) != nil || json.Unmarshal(rb, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// apply writes an object with server-side apply as field manager
// petri-sync, forcing ownership of the fields it sets.
func (w *writer) apply(ctx context.Context, obj client.Object) error {
	_, err := w.applied(ctx, obj)
	return err
}

// applied is apply returning the object as the API server stored it.
func (w *writer) applied(ctx context.Context, obj client.Object) (*unstructured.Unstructured, error) {
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{}
	if err := json.Unmarshal(raw, &u.Object); err != nil {
		return nil, err
	}
	delete(u.Object, "status")
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	return u, w.client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(render.FieldManager), client.ForceOwnership)
}

// deleteEnv deletes an environment sync owns, with its UID as a
// precondition so that a re-created object of the same name is never hit.
func (w *writer) deleteEnv(ctx context.Context, e *petriv1.EphemeralEnvironment, reason string) error {
	if e == nil || !render.Owned(e.Labels) {
		return fmt.Errorf("refusing to delete an environment that sync does not own")
	}
	uid := e.UID
	err := w.client.Delete(ctx, e, client.Preconditions{UID: &uid})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete environment %s: %w", e.Name, err)
	}
	w.writes.removed(e.Labels[render.LabelApplication], e.Name, uid, w.clock.Now())
	w.metrics.Writes.WithLabelValues("EphemeralEnvironment", "delete").Inc()
	w.log.Info("Deleted environment", "environment", e.Name, "reason", reason)
	return nil
}

// applySharedWorkloads writes the declared shared workloads. Ones sync
// wrote that are no longer declared are deleted only when the whole config
// revision loaded without errors.
func (w *writer) applySharedWorkloads(ctx context.Context, cfg *config.Config) error {
	var errs []error
	declared := map[string]bool{}
	for _, sw := range cfg.SharedWorkloads {
		declared[sw.Name] = true
		v, err := w.resolver.Resolve(ctx, sw.Spec.Chart.Repository, sw.Spec.Chart.Name, sw.Spec.Chart.Version)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: spec.chart.version: %w", sw.File, err))
			continue
		}
		obj := render.SharedWorkload(sw, w.namespace, v)
		var have petriv1.SharedWorkload
		err = w.client.Get(ctx, client.ObjectKeyFromObject(obj), &have)
		switch {
		case err == nil && !render.Owned(have.Labels):
			errs = append(errs, fmt.Errorf("%s: shared workload %s exists and is not managed by petri-sync; leaving it alone", sw.File, sw.Name))
			continue
		case err == nil && jsonEqual(have.Spec, obj.Spec):
			continue
		case err != nil && !apierrors.IsNotFound(err):
			errs = append(errs, err)
			continue
		}
		if err := w.apply(ctx, obj); err != nil {
			errs = append(errs, fmt.Errorf("apply shared workload %s: %w", sw.Name, err))
			continue
		}
		w.metrics.Writes.WithLabelValues("SharedWorkload", "apply").Inc()
	}
	if len(cfg.Errors) > 0 {
		return errors.Join(errs...)
	}
	var list petriv1.SharedWorkloadList
	if err := w.client.List(ctx, &list, client.InNamespace(w.namespace), client.MatchingLabels{petriv1.LabelManagedBy: render.ManagedBy, render.LabelApplication: render.SharedWorkloadOwner}); err != nil {
		return errors.Join(append(errs, err)...)
	}
	for i := range list.Items {
		sw := &list.Items[i]
		if declared[sw.Name] || !render.Owned(sw.Labels) || sw.DeletionTimestamp != nil {
			continue
		}
		uid := sw.UID
		if err := w.client.Delete(ctx, sw, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
			continue
		}
		w.metrics.Writes.WithLabelValues("SharedWorkload", "delete").Inc()
		w.log.Info("Deleted shared workload no longer declared", "sharedWorkload", sw.Name)
	}
	return errors.Join(errs...)
}
