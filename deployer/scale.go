package deployer

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/petri-dev/petri/api/contract"
)

// FieldManager names the deployer's own writes (sleep and wake) in the
// objects' managedFields, apart from Helm's.
const FieldManager = "petri-deployer"

// wakePoll is how often Wake looks at the restored workloads while it waits
// for them to be ready.
const wakePoll = 500 * time.Millisecond

// Scaled is one workload that Sleep or Wake changed.
type Scaled struct {
	// Kind is Deployment or StatefulSet.
	Kind string
	Name string
	// From and To are the replica counts before and after.
	From, To int32
}

func (s Scaled) String() string {
	return fmt.Sprintf("%s %s %d -> %d", s.Kind, s.Name, s.From, s.To)
}

// NewClientset builds a Kubernetes clientset from the client loader.
func NewClientset(getter genericclioptions.RESTClientGetter) (kubernetes.Interface, error) {
	cfg, err := getter.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("create kubernetes client: %w", err)
	}
	return cs, nil
}

// Sleep scales every Deployment and StatefulSet of namespace to zero and
// records the replica count each had in contract.AnnotationReplicasBeforeSleep, in
// the same write. It is idempotent: a workload that already carries the
// annotation keeps the count recorded first (and is scaled to zero again if
// something scaled it up meanwhile); one already at zero without it is left
// alone, so a wake leaves it at zero too.
func Sleep(ctx context.Context, cs kubernetes.Interface, namespace string) ([]Scaled, error) {
	return forEachWorkload(ctx, cs, namespace, func(w *workload) (*Scaled, error) {
		cur := w.replicas()
		if _, recorded := w.meta.Annotations[contract.AnnotationReplicasBeforeSleep]; recorded || cur == 0 {
			if cur == 0 {
				return nil, nil
			}
			w.setReplicas(0)
			return &Scaled{From: cur, To: 0}, nil
		}
		if w.meta.Annotations == nil {
			w.meta.Annotations = map[string]string{}
		}
		w.meta.Annotations[contract.AnnotationReplicasBeforeSleep] = strconv.FormatInt(int64(cur), 10)
		w.setReplicas(0)
		return &Scaled{From: cur, To: 0}, nil
	})
}

// WakeOptions tune Wake.
type WakeOptions struct {
	// Wait waits, after the replicas are restored, until every Deployment
	// and StatefulSet of the namespace has its replicas ready: the same
	// promise a deploy with wait makes.
	Wait bool
	// Timeout bounds the wait; DefaultTimeout when zero.
	Timeout time.Duration
}

// Wake restores the replica count recorded by Sleep on every Deployment and
// StatefulSet of namespace and removes the annotation, in the same write.
// Workloads without the annotation are left alone, so a second Wake changes
// nothing. A workload whose annotation is not a replica count is left as it
// is and named in the error, after the others are restored.
func Wake(ctx context.Context, cs kubernetes.Interface, namespace string, opts WakeOptions) ([]Scaled, error) {
	scaled, err := forEachWorkload(ctx, cs, namespace, func(w *workload) (*Scaled, error) {
		v, ok := w.meta.Annotations[contract.AnnotationReplicasBeforeSleep]
		if !ok {
			return nil, nil
		}
		n, perr := strconv.ParseInt(v, 10, 32)
		if perr != nil || n < 0 {
			return nil, fmt.Errorf("annotation %s is %q, not a replica count; set the replicas by hand and remove it", contract.AnnotationReplicasBeforeSleep, v)
		}
		cur := w.replicas()
		delete(w.meta.Annotations, contract.AnnotationReplicasBeforeSleep)
		w.setReplicas(int32(n))
		return &Scaled{From: cur, To: int32(n)}, nil
	})
	if err != nil || !opts.Wait {
		return scaled, err
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return scaled, waitReady(ctx, cs, namespace, timeout)
}

// workload is a Deployment or a StatefulSet seen through what Sleep and Wake
// change.
type workload struct {
	kind string
	meta *metav1.ObjectMeta
	spec **int32
}

// replicas is the workload's desired replica count; the API server defaults
// an unset one to 1.
func (w *workload) replicas() int32 {
	if *w.spec == nil {
		return 1
	}
	return **w.spec
}

func (w *workload) setReplicas(n int32) { *w.spec = &n }

// kindClient reads and writes one kind of workload.
type kindClient struct {
	kind   string
	names  func(context.Context) ([]string, error)
	get    func(context.Context, string) (*workload, any, error)
	update func(context.Context, any) error
}

func kinds(cs kubernetes.Interface, namespace string) []kindClient {
	deployments := cs.AppsV1().Deployments(namespace)
	statefulSets := cs.AppsV1().StatefulSets(namespace)
	update := metav1.UpdateOptions{FieldManager: FieldManager}
	return []kindClient{
		{
			kind: "Deployment",
			names: func(ctx context.Context) ([]string, error) {
				l, err := deployments.List(ctx, metav1.ListOptions{})
				if err != nil {
					return nil, err
				}
				out := make([]string, 0, len(l.Items))
				for _, d := range l.Items {
					out = append(out, d.Name)
				}
				return out, nil
			},
			get: func(ctx context.Context, name string) (*workload, any, error) {
				d, err := deployments.Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return nil, nil, err
				}
				return &workload{kind: "Deployment", meta: &d.ObjectMeta, spec: &d.Spec.Replicas}, d, nil
			},
			update: func(ctx context.Context, obj any) error {
				_, err := deployments.Update(ctx, obj.(*appsv1.Deployment), update)
				return err
			},
		},
		{
			kind: "StatefulSet",
			names: func(ctx context.Context) ([]string, error) {
				l, err := statefulSets.List(ctx, metav1.ListOptions{})
				if err != nil {
					return nil, err
				}
				out := make([]string, 0, len(l.Items))
				for _, s := range l.Items {
					out = append(out, s.Name)
				}
				return out, nil
			},
			get: func(ctx context.Context, name string) (*workload, any, error) {
				s, err := statefulSets.Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return nil, nil, err
				}
				return &workload{kind: "StatefulSet", meta: &s.ObjectMeta, spec: &s.Spec.Replicas}, s, nil
			},
			update: func(ctx context.Context, obj any) error {
				_, err := statefulSets.Update(ctx, obj.(*appsv1.StatefulSet), update)
				return err
			},
		},
	}
}

// forEachWorkload applies change to every Deployment and StatefulSet of
// namespace and writes the ones it changed (a nil result: unchanged), each
// read afresh and written again on a conflict. A workload deleted meanwhile
// is skipped. A failure of one does not stop the others; the error names
// every workload that failed.
func forEachWorkload(ctx context.Context, cs kubernetes.Interface, namespace string, change func(*workload) (*Scaled, error)) ([]Scaled, error) {
	log := logr.FromContextOrDiscard(ctx)
	var out []Scaled
	var errs []error
	for _, k := range kinds(cs, namespace) {
		names, err := k.names(ctx)
		if err != nil {
			return out, fmt.Errorf("list %ss in %s: %w", k.kind, namespace, err)
		}
		sort.Strings(names)
		for _, name := range names {
			var done *Scaled
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				w, obj, err := k.get(ctx, name)
				if err != nil {
					return err
				}
				s, err := change(w)
				if err != nil || s == nil {
					done = nil
					return err
				}
				if err := k.update(ctx, obj); err != nil {
					return err
				}
				s.Kind, s.Name = k.kind, name
				done = s
				return nil
			})
			switch {
			case apierrors.IsNotFound(err):
				continue
			case err != nil:
				errs = append(errs, fmt.Errorf("%s %s/%s: %w", k.kind, namespace, name, err))
			case done != nil:
				log.Info("Scaled", "kind", done.Kind, "name", done.Name, "namespace", namespace, "from", done.From, "to", done.To)
				out = append(out, *done)
			}
		}
	}
	return out, errors.Join(errs...)
}

// waitReady waits until every Deployment and StatefulSet of namespace has
// its desired replicas ready (and, for a Deployment, updated and
// available) for its current generation. A failed read is tried again at
// the next poll.
func waitReady(ctx context.Context, cs kubernetes.Interface, namespace string, timeout time.Duration) error {
	var pending []string
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, wakePoll, timeout, true, func(context.Context) (bool, error) {
		// The requests use ctx, not the poll's: the last poll must not be
		// cut short by the deadline it is checking.
		pending, lastErr = notReady(ctx, cs, namespace)
		return lastErr == nil && len(pending) == 0, nil
	})
	if err == nil {
		return nil
	}
	if lastErr != nil {
		return fmt.Errorf("workloads not ready within %s: %w", timeout, errors.Join(lastErr, err))
	}
	return fmt.Errorf("workloads not ready within %s: %s: %w", timeout, strings.Join(pending, ", "), err)
}

// notReady names the workloads of namespace that are not ready.
func notReady(ctx context.Context, cs kubernetes.Interface, namespace string) ([]string, error) {
	var pending []string
	ds, err := cs.AppsV1().Deployments(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list Deployments in %s: %w", namespace, err)
	}
	for _, d := range ds.Items {
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		if d.Status.ObservedGeneration < d.Generation || d.Status.UpdatedReplicas < want || d.Status.AvailableReplicas < want {
			pending = append(pending, fmt.Sprintf("Deployment %s (%d of %d available)", d.Name, d.Status.AvailableReplicas, want))
		}
	}
	ss, err := cs.AppsV1().StatefulSets(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list StatefulSets in %s: %w", namespace, err)
	}
	for _, s := range ss.Items {
		want := int32(1)
		if s.Spec.Replicas != nil {
			want = *s.Spec.Replicas
		}
		if s.Status.ObservedGeneration < s.Generation || s.Status.ReadyReplicas < want {
			pending = append(pending, fmt.Sprintf("StatefulSet %s (%d of %d ready)", s.Name, s.Status.ReadyReplicas, want))
		}
	}
	return pending, nil
}
