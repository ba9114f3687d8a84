// Sleep and wake requests: the annotations sync sets on an environment
// (under a field manager of their own, so its apply never removes them) and
// the read API's wake.

package syncer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/sync/render"
)

// annotationTime reads an RFC 3339 annotation; zero when absent or not a
// time.
func annotationTime(e *petriv1.EphemeralEnvironment, key string) time.Time {
	v := e.Annotations[key]
	if v == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}
	}
	return t
}

// annotate sets one annotation on an environment sync owns with
// server-side apply, under a field manager of that annotation's own: sync
// owns exactly it, a later apply of another annotation (or of the spec)
// leaves it alone, and an annotation a person set with kubectl is taken
// over only when sync sets it. The UID makes sure it is the same object.
func (w *writer) annotate(ctx context.Context, e *petriv1.EphemeralEnvironment, key, value string) error {
	if e == nil || !render.Owned(e.Labels) {
		return fmt.Errorf("refusing to annotate an environment that sync does not own")
	}
	if e.Annotations[key] == value {
		return nil
	}
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(petriv1.GroupVersion.String())
	u.SetKind("EphemeralEnvironment")
	u.SetNamespace(e.Namespace)
	u.SetName(e.Name)
	u.SetUID(e.UID)
	u.SetAnnotations(map[string]string{key: value})
	manager := render.FieldManager + "-" + key[strings.LastIndex(key, "/")+1:]
	if err := w.client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(manager), client.ForceOwnership); err != nil {
		return fmt.Errorf("set %s on environment %s: %w", key, e.Name, err)
	}
	w.writes.applied(e.Labels[render.LabelApplication], e.Name, u.GetResourceVersion(), w.clock.Now())
	if e.Annotations == nil {
		e.Annotations = map[string]string{}
	}
	e.Annotations[key] = value
	w.metrics.Writes.WithLabelValues("EphemeralEnvironment", "annotate").Inc()
	return nil
}

// WakeEvery is how often the read API writes an environment's wake
// request at most: asked again sooner, the request already made stands.
const WakeEvery = time.Minute

// ErrUnknownEnvironment is returned by Wake for a name sync did not write.
var ErrUnknownEnvironment = errors.New("no such environment")

// ErrEnvironmentDeleting is returned by Wake for an environment being
// deleted.
var ErrEnvironmentDeleting = errors.New("the environment is being deleted")

// wake is Wake (syncer.go).
func (v *views) wake(ctx context.Context, name string) (time.Time, error) {
	var e petriv1.EphemeralEnvironment
	if err := v.cache.Get(ctx, client.ObjectKey{Namespace: v.namespace, Name: name}, &e); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return time.Time{}, fmt.Errorf("%w: %s", ErrUnknownEnvironment, name)
		}
		return time.Time{}, fmt.Errorf("read environment %s: %w", name, err)
	}
	if !render.Owned(e.Labels) {
		return time.Time{}, fmt.Errorf("%w: %s", ErrUnknownEnvironment, name)
	}
	if e.DeletionTimestamp != nil {
		return time.Time{}, fmt.Errorf("%w: %s", ErrEnvironmentDeleting, name)
	}
	now := v.clock.Now().UTC().Truncate(time.Second)
	last := annotationTime(&e, render.AnnotationWakeRequested)
	if w, ok := v.wakes.Load(e.UID); ok && w.(time.Time).After(last) {
		// Written a moment ago; the cache may not show it yet.
		last = w.(time.Time)
	}
	if !last.IsZero() && !last.After(now) && now.Sub(last) < WakeEvery {
		return last, nil
	}
	if err := v.writer.annotate(ctx, &e, render.AnnotationWakeRequested, now.Format(time.RFC3339)); err != nil {
		return time.Time{}, err
	}
	v.wakes.Store(e.UID, now)
	v.wakes.Range(func(k, w any) bool {
		if now.Sub(w.(time.Time)) >= WakeEvery {
			v.wakes.Delete(k)
		}
		return true
	})
	v.log.Info("Wake requested through the read API", "environment", name)
	return now, nil
}
