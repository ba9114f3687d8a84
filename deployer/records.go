package deployer

import (
	"context"
	"maps"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	applycorev1 "k8s.io/client-go/applyconfigurations/core/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
)

// releaseRecords is what Helm's Secrets storage driver reads and writes
// for one operation on one release. Helm asks for the release's records
// several times in one operation (the deployer for the latest record,
// install for the history it may replace, upgrade for the deployed and the
// latest record, MaxHistory for the history it prunes), and the driver
// answers each with a LIST of the namespace's Secrets. Here the records are
// listed once, when first asked for, and each later query is answered from
// that list, which Helm's own writes keep up to date.
//
// That is sound only while no one else writes the release's records: a
// releaseRecords lives for one operation on the release, and is made only
// once the deployer holds the release's lock (see lockRelease). A write
// that fails forgets the list (the API server may have applied it), so the
// next query lists again. Queries about anything but the release's records
// go to the API server.
type releaseRecords struct {
	corev1client.SecretInterface
	release string

	mu sync.Mutex
	// records are the release's record Secrets by name, when listed is set.
	records map[string]*corev1.Secret
	listed  bool
}

var _ corev1client.SecretInterface = (*releaseRecords)(nil)

// newReleaseRecords serves the records of release from secrets (the
// release's namespace), listing them once.
func newReleaseRecords(secrets corev1client.SecretInterface, release string) *releaseRecords {
	return &releaseRecords{SecretInterface: secrets, release: release}
}

// recordLabels are the labels Helm's Secrets driver puts on every record of
// a release, and queries it by.
func recordLabels(release string) labels.Set {
	return labels.Set{"name": release, "owner": "helm"}
}

// List answers a query for some of the release's records (its labels
// select the release's name and Helm as owner, and nothing but labels is
// asked) from the records listed once; any other list goes through.
func (r *releaseRecords) List(ctx context.Context, opts metav1.ListOptions) (*corev1.SecretList, error) {
	sel, err := labels.Parse(opts.LabelSelector)
	if err != nil || opts != (metav1.ListOptions{LabelSelector: opts.LabelSelector}) || !r.ofRelease(sel) {
		return r.SecretInterface.List(ctx, opts)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.listed {
		list, err := r.SecretInterface.List(ctx, metav1.ListOptions{LabelSelector: recordLabels(r.release).String()})
		if err != nil {
			return nil, err
		}
		r.records = make(map[string]*corev1.Secret, len(list.Items))
		for i := range list.Items {
			r.records[list.Items[i].Name] = &list.Items[i]
		}
		r.listed = true
	}
	out := &corev1.SecretList{}
	for _, name := range slices.Sorted(maps.Keys(r.records)) {
		if s := r.records[name]; sel.Matches(labels.Set(s.Labels)) {
			out.Items = append(out.Items, *s.DeepCopy())
		}
	}
	return out, nil
}

// ofRelease says whether sel selects only records of the release.
func (r *releaseRecords) ofRelease(sel labels.Selector) bool {
	for k, v := range recordLabels(r.release) {
		if got, ok := sel.RequiresExactMatch(k); !ok || got != v {
			return false
		}
	}
	return true
}

// Get answers from the records listed for one of them, and asks the API
// server for anything else.
func (r *releaseRecords) Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Secret, error) {
	r.mu.Lock()
	s, ok := r.records[name]
	r.mu.Unlock()
	if ok && opts == (metav1.GetOptions{}) {
		return s.DeepCopy(), nil
	}
	return r.SecretInterface.Get(ctx, name, opts)
}

// Create writes a record and adds it to the list.
func (r *releaseRecords) Create(ctx context.Context, s *corev1.Secret, opts metav1.CreateOptions) (*corev1.Secret, error) {
	created, err := r.SecretInterface.Create(ctx, s, opts)
	r.wrote(created, err)
	return created, err
}

// Update writes a record and replaces it in the list.
func (r *releaseRecords) Update(ctx context.Context, s *corev1.Secret, opts metav1.UpdateOptions) (*corev1.Secret, error) {
	updated, err := r.SecretInterface.Update(ctx, s, opts)
	r.wrote(updated, err)
	return updated, err
}

// Delete deletes a record and drops it from the list.
func (r *releaseRecords) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	err := r.SecretInterface.Delete(ctx, name, opts)
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case err == nil || apierrors.IsNotFound(err):
		delete(r.records, name)
	default:
		r.forgetLocked()
	}
	return err
}

// The driver writes no other way; should anything else write through
// here, the list is read again afterwards.

func (r *releaseRecords) DeleteCollection(ctx context.Context, opts metav1.DeleteOptions, list metav1.ListOptions) error {
	defer r.forget()
	return r.SecretInterface.DeleteCollection(ctx, opts, list)
}

func (r *releaseRecords) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*corev1.Secret, error) {
	defer r.forget()
	return r.SecretInterface.Patch(ctx, name, pt, data, opts, subresources...)
}

func (r *releaseRecords) Apply(ctx context.Context, s *applycorev1.SecretApplyConfiguration, opts metav1.ApplyOptions) (*corev1.Secret, error) {
	defer r.forget()
	return r.SecretInterface.Apply(ctx, s, opts)
}

// wrote keeps the list up to date after a write: the Secret the API server
// answered replaces the listed one; after a failed write, whose effect is
// not known, the list is forgotten.
func (r *releaseRecords) wrote(s *corev1.Secret, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case err != nil || s == nil:
		r.forgetLocked()
	case r.listed && labels.SelectorFromSet(recordLabels(r.release)).Matches(labels.Set(s.Labels)):
		r.records[s.Name] = s.DeepCopy()
	case r.listed:
		delete(r.records, s.Name)
	}
}

func (r *releaseRecords) forget() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.forgetLocked()
}

func (r *releaseRecords) forgetLocked() {
	r.records, r.listed = nil, false
}
