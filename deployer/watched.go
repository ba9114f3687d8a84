package deployer

import (
	"context"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	appsv1client "k8s.io/client-go/kubernetes/typed/apps/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
)

// watchedReads is a client of the release's namespace whose reads of the
// objects a wait looks at (Deployments, ReplicaSets, StatefulSets,
// DaemonSets, Pods, Services, PersistentVolumeClaims) are answered from a
// watch of each kind, started when the kind is first read: Helm's
// readiness checks and the pods' diagnosis read them again and again
// while a deploy waits, and each reading was a request (a GET of every
// workload, a LIST of its ReplicaSets and pods, every 2 seconds). A
// watch's first state is the API server's current one, taken after Helm
// wrote the release's objects, so nothing read is older than those
// writes. Every other request (events, logs, other namespaces, writes)
// goes to the API server. changed receives a value whenever a watched
// object changes, so a wait looks again at once instead of at its next
// poll.
type watchedReads struct {
	kubernetes.Interface
	namespace string
	factory   informers.SharedInformerFactory
	stop      chan struct{}
	changed   chan struct{}

	mu sync.Mutex
	// handled are the kinds whose changes are told on changed (an
	// informer's Informer() is a new value each time, the same informer).
	handled map[string]bool
	// refused is the first error a watch got that no retry mends (the
	// namespace's reads are forbidden).
	refused error
}

// newWatchedReads watches the objects of namespace through cs until stop
// is called.
func newWatchedReads(cs kubernetes.Interface, namespace string) *watchedReads {
	return &watchedReads{
		Interface: cs,
		namespace: namespace,
		factory:   informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(namespace)),
		stop:      make(chan struct{}),
		changed:   make(chan struct{}, 1),
		handled:   map[string]bool{},
	}
}

// stopWatching ends the watches and waits for them to be gone.
func (w *watchedReads) stopWatching() {
	close(w.stop)
	w.factory.Shutdown()
}

// synced starts the watch of kind (inf) when it is not running yet and
// waits until its first state is in.
func (w *watchedReads) synced(ctx context.Context, kind string, inf cache.SharedIndexInformer) error {
	w.mu.Lock()
	if !w.handled[kind] {
		w.handled[kind] = true
		notify := func() {
			select {
			case w.changed <- struct{}{}:
			default:
			}
		}
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { notify() },
			UpdateFunc: func(any, any) { notify() },
			DeleteFunc: func(any) { notify() },
		})
		_ = inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
			if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
				w.mu.Lock()
				w.refused = err
				w.mu.Unlock()
			}
		})
	}
	w.mu.Unlock()
	w.factory.Start(w.stop)
	err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(context.Context) (bool, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.refused != nil {
			return false, w.refused
		}
		return inf.HasSynced(), nil
	})
	if err != nil {
		return fmt.Errorf("watch the objects of namespace %s: %w", w.namespace, err)
	}
	return nil
}

// watchedGet reads one object from the synced watch of inf.
func watchedGet[T interface{ DeepCopy() T }](ctx context.Context, w *watchedReads, kind string, inf cache.SharedIndexInformer, get func() (T, error)) (T, error) {
	var zero T
	if err := w.synced(ctx, kind, inf); err != nil {
		return zero, err
	}
	obj, err := get()
	if err != nil {
		return zero, err
	}
	return obj.DeepCopy(), nil
}

// watchedList reads the objects opts selects from the synced watch of
// inf; served is false for options a watch cannot answer (anything but a
// label selector).
func watchedList[T any](ctx context.Context, w *watchedReads, kind string, inf cache.SharedIndexInformer, opts metav1.ListOptions, list func(labels.Selector) ([]T, error)) (_ []T, served bool, _ error) {
	sel, err := labels.Parse(opts.LabelSelector)
	if err != nil || opts != (metav1.ListOptions{LabelSelector: opts.LabelSelector}) {
		return nil, false, nil
	}
	if err := w.synced(ctx, kind, inf); err != nil {
		return nil, true, err
	}
	items, err := list(sel)
	return items, true, err
}

func (w *watchedReads) AppsV1() appsv1client.AppsV1Interface {
	return watchedApps{AppsV1Interface: w.Interface.AppsV1(), w: w}
}

func (w *watchedReads) CoreV1() corev1client.CoreV1Interface {
	return watchedCore{CoreV1Interface: w.Interface.CoreV1(), w: w}
}

type watchedApps struct {
	appsv1client.AppsV1Interface
	w *watchedReads
}

func (a watchedApps) Deployments(ns string) appsv1client.DeploymentInterface {
	if ns != a.w.namespace {
		return a.AppsV1Interface.Deployments(ns)
	}
	return watchedDeployments{a.AppsV1Interface.Deployments(ns), a.w}
}

func (a watchedApps) ReplicaSets(ns string) appsv1client.ReplicaSetInterface {
	if ns != a.w.namespace {
		return a.AppsV1Interface.ReplicaSets(ns)
	}
	return watchedReplicaSets{a.AppsV1Interface.ReplicaSets(ns), a.w}
}

func (a watchedApps) StatefulSets(ns string) appsv1client.StatefulSetInterface {
	if ns != a.w.namespace {
		return a.AppsV1Interface.StatefulSets(ns)
	}
	return watchedStatefulSets{a.AppsV1Interface.StatefulSets(ns), a.w}
}

func (a watchedApps) DaemonSets(ns string) appsv1client.DaemonSetInterface {
	if ns != a.w.namespace {
		return a.AppsV1Interface.DaemonSets(ns)
	}
	return watchedDaemonSets{a.AppsV1Interface.DaemonSets(ns), a.w}
}

type watchedCore struct {
	corev1client.CoreV1Interface
	w *watchedReads
}

func (c watchedCore) Pods(ns string) corev1client.PodInterface {
	if ns != c.w.namespace {
		return c.CoreV1Interface.Pods(ns)
	}
	return watchedPods{c.CoreV1Interface.Pods(ns), c.w}
}

func (c watchedCore) Services(ns string) corev1client.ServiceInterface {
	if ns != c.w.namespace {
		return c.CoreV1Interface.Services(ns)
	}
	return watchedServices{c.CoreV1Interface.Services(ns), c.w}
}

func (c watchedCore) PersistentVolumeClaims(ns string) corev1client.PersistentVolumeClaimInterface {
	if ns != c.w.namespace {
		return c.CoreV1Interface.PersistentVolumeClaims(ns)
	}
	return watchedClaims{c.CoreV1Interface.PersistentVolumeClaims(ns), c.w}
}

type watchedDeployments struct {
	appsv1client.DeploymentInterface
	w *watchedReads
}

func (d watchedDeployments) Get(ctx context.Context, name string, _ metav1.GetOptions) (*appsv1.Deployment, error) {
	inf := d.w.factory.Apps().V1().Deployments()
	return watchedGet(ctx, d.w, "deployments", inf.Informer(), func() (*appsv1.Deployment, error) { return inf.Lister().Deployments(d.w.namespace).Get(name) })
}

type watchedReplicaSets struct {
	appsv1client.ReplicaSetInterface
	w *watchedReads
}

func (r watchedReplicaSets) Get(ctx context.Context, name string, _ metav1.GetOptions) (*appsv1.ReplicaSet, error) {
	inf := r.w.factory.Apps().V1().ReplicaSets()
	return watchedGet(ctx, r.w, "replicasets", inf.Informer(), func() (*appsv1.ReplicaSet, error) { return inf.Lister().ReplicaSets(r.w.namespace).Get(name) })
}

func (r watchedReplicaSets) List(ctx context.Context, opts metav1.ListOptions) (*appsv1.ReplicaSetList, error) {
	inf := r.w.factory.Apps().V1().ReplicaSets()
	items, served, err := watchedList(ctx, r.w, "replicasets", inf.Informer(), opts, inf.Lister().ReplicaSets(r.w.namespace).List)
	if !served {
		return r.ReplicaSetInterface.List(ctx, opts)
	}
	if err != nil {
		return nil, err
	}
	return &appsv1.ReplicaSetList{Items: copies(items)}, nil
}

type watchedStatefulSets struct {
	appsv1client.StatefulSetInterface
	w *watchedReads
}

func (s watchedStatefulSets) Get(ctx context.Context, name string, _ metav1.GetOptions) (*appsv1.StatefulSet, error) {
	inf := s.w.factory.Apps().V1().StatefulSets()
	return watchedGet(ctx, s.w, "statefulsets", inf.Informer(), func() (*appsv1.StatefulSet, error) { return inf.Lister().StatefulSets(s.w.namespace).Get(name) })
}

type watchedDaemonSets struct {
	appsv1client.DaemonSetInterface
	w *watchedReads
}

func (d watchedDaemonSets) Get(ctx context.Context, name string, _ metav1.GetOptions) (*appsv1.DaemonSet, error) {
	inf := d.w.factory.Apps().V1().DaemonSets()
	return watchedGet(ctx, d.w, "daemonsets", inf.Informer(), func() (*appsv1.DaemonSet, error) { return inf.Lister().DaemonSets(d.w.namespace).Get(name) })
}

type watchedPods struct {
	corev1client.PodInterface
	w *watchedReads
}

func (p watchedPods) Get(ctx context.Context, name string, _ metav1.GetOptions) (*corev1.Pod, error) {
	inf := p.w.factory.Core().V1().Pods()
	return watchedGet(ctx, p.w, "pods", inf.Informer(), func() (*corev1.Pod, error) { return inf.Lister().Pods(p.w.namespace).Get(name) })
}

func (p watchedPods) List(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error) {
	inf := p.w.factory.Core().V1().Pods()
	items, served, err := watchedList(ctx, p.w, "pods", inf.Informer(), opts, inf.Lister().Pods(p.w.namespace).List)
	if !served {
		return p.PodInterface.List(ctx, opts)
	}
	if err != nil {
		return nil, err
	}
	return &corev1.PodList{Items: copies(items)}, nil
}

type watchedServices struct {
	corev1client.ServiceInterface
	w *watchedReads
}

func (s watchedServices) Get(ctx context.Context, name string, _ metav1.GetOptions) (*corev1.Service, error) {
	inf := s.w.factory.Core().V1().Services()
	return watchedGet(ctx, s.w, "services", inf.Informer(), func() (*corev1.Service, error) { return inf.Lister().Services(s.w.namespace).Get(name) })
}

type watchedClaims struct {
	corev1client.PersistentVolumeClaimInterface
	w *watchedReads
}

func (c watchedClaims) Get(ctx context.Context, name string, _ metav1.GetOptions) (*corev1.PersistentVolumeClaim, error) {
	inf := c.w.factory.Core().V1().PersistentVolumeClaims()
	return watchedGet(ctx, c.w, "persistentvolumeclaims", inf.Informer(), func() (*corev1.PersistentVolumeClaim, error) {
		return inf.Lister().PersistentVolumeClaims(c.w.namespace).Get(name)
	})
}

// copies are deep copies of a lister's objects, which belong to its cache.
func copies[T any, P interface {
	*T
	DeepCopy() *T
}](items []P) []T {
	out := make([]T, 0, len(items))
	for _, it := range items {
		out = append(out, *it.DeepCopy())
	}
	return out
}
