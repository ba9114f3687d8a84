package benchkit

import (
	"context"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// WatchLoop lists and then watches objects until ctx ends, calling handle
// for every object listed (as watch.Added) and every event, and lists again
// when a watch ends; listed, when set, receives the names of each list, so
// that what went away between two watches is seen. ready is closed after
// the first list. A benchmark times what it waits for from these calls, so
// it sees every change as the API server delivers it, not at a poll.
func WatchLoop(ctx context.Context, c client.WithWatch, newList func() client.ObjectList, opts []client.ListOption, handle func(watch.EventType, client.Object), listed func(map[string]bool), ready chan<- struct{}) {
	first := true
	for ctx.Err() == nil {
		list := newList()
		if err := c.List(ctx, list, opts...); err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		items, _ := apimeta.ExtractList(list)
		present := map[string]bool{}
		for _, it := range items {
			if o, ok := it.(client.Object); ok {
				present[o.GetName()] = true
				handle(watch.Added, o)
			}
		}
		if listed != nil {
			listed(present)
		}
		if first {
			close(ready)
			first = false
		}
		rv := list.(metav1.ListInterface).GetResourceVersion()
		w, err := c.Watch(ctx, newList(), append(append([]client.ListOption{}, opts...), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true}})...)
		if err != nil {
			continue
		}
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error || ev.Type == watch.Bookmark {
				continue
			}
			if o, ok := ev.Object.(client.Object); ok {
				handle(ev.Type, o)
			}
		}
		w.Stop()
	}
}
