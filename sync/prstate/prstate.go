// Package prstate keeps sync's lifecycle state of each pull request (kept,
// extended, the commit an environment expired at, the last command handled,
// deployment ids) in the cluster, as one PullRequestState per pull request
// in the management namespace. Only sync's identity may write those objects
// (config/sync/role.yaml); nothing a pull request's author writes on the
// forge is read back as state.
package prstate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/sync/config"
	"github.com/petri-dev/petri/sync/render"
)

// LabelRepository carries a hash of the state's forge and repository, so one
// repository's states are listed by label.
const LabelRepository = "petri.dev/repository-hash"

// Key names one pull request.
type Key struct {
	// Forge is github, gitlab or gitea; github when empty.
	Forge      string
	Repository string
	Number     int
}

func (k Key) forge() string {
	if k.Forge == "" {
		return "github"
	}
	return k.Forge
}

// RepositoryHash is the value of LabelRepository for a repository.
func RepositoryHash(forge, repository string) string {
	if forge == "" {
		forge = "github"
	}
	sum := sha256.Sum256([]byte(forge + ":" + strings.ToLower(repository)))
	return hex.EncodeToString(sum[:])[:16]
}

// Name is the PullRequestState's name for a pull request: readable, unique
// per forge, repository and number, and a valid object name however long
// the repository's path.
func Name(k Key) string {
	suffix := "-" + strconv.Itoa(k.Number) + "-" + RepositoryHash(k.forge(), k.Repository)[:8]
	prefix := config.Slug(strings.ReplaceAll(k.Repository, "/", "-"))
	if max := 63 - len(suffix); len(prefix) > max {
		prefix = strings.TrimRight(prefix[:max], "-")
	}
	if prefix == "" {
		prefix = "pr"
	}
	return prefix + suffix
}

// Store reads and writes PullRequestStates in one namespace.
type Store struct {
	// Client writes; Reader reads (a cache, or the client itself).
	Client    client.Client
	Reader    client.Reader
	Namespace string
}

// Load returns the stored state of a pull request; found is false when
// nothing is stored yet.
func (s *Store) Load(ctx context.Context, k Key) (st render.State, found bool, err error) {
	var obj petriv1.PullRequestState
	if err := s.reader().Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: Name(k)}, &obj); err != nil {
		if apierrors.IsNotFound(err) {
			return render.State{}, false, nil
		}
		return render.State{}, false, fmt.Errorf("read the state of %s#%d: %w", k.Repository, k.Number, err)
	}
	if obj.Spec.Repository != k.Repository || obj.Spec.Number != int64(k.Number) || obj.Spec.Forge != k.forge() {
		return render.State{}, false, fmt.Errorf("PullRequestState %s/%s holds %s %s#%d, not %s#%d", s.Namespace, obj.Name, obj.Spec.Forge, obj.Spec.Repository, obj.Spec.Number, k.Repository, k.Number)
	}
	return FromSpec(obj.Spec), true, nil
}

// Save writes the state of a pull request (created the first time);
// expires gives each application's expiry as sync computed it, for kubectl
// and the web page. A state with nothing in it is still written: it records
// that sync has seen the pull request.
func (s *Store) Save(ctx context.Context, k Key, st render.State, expires map[string]time.Time) error {
	obj := &petriv1.PullRequestState{
		TypeMeta: metav1.TypeMeta{APIVersion: petriv1.GroupVersion.String(), Kind: "PullRequestState"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace: s.Namespace,
			Name:      Name(k),
			Labels: map[string]string{
				petriv1.LabelManagedBy: render.ManagedBy,
				LabelRepository:        RepositoryHash(k.forge(), k.Repository),
			},
		},
		Spec: ToSpec(k, st, expires),
	}
	if err := s.Client.Patch(ctx, obj, client.Apply, client.FieldOwner("petri-sync"), client.ForceOwnership); err != nil {
		return fmt.Errorf("write the state of %s#%d: %w", k.Repository, k.Number, err)
	}
	return nil
}

// Delete forgets a pull request, once nothing of it is left.
func (s *Store) Delete(ctx context.Context, k Key) error {
	obj := &petriv1.PullRequestState{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: Name(k)}}
	if err := s.Client.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("forget the state of %s#%d: %w", k.Repository, k.Number, err)
	}
	return nil
}

// List returns the stored states of one repository.
func (s *Store) List(ctx context.Context, forge, repository string) ([]petriv1.PullRequestState, error) {
	var list petriv1.PullRequestStateList
	if err := s.reader().List(ctx, &list, client.InNamespace(s.Namespace), client.MatchingLabels{LabelRepository: RepositoryHash(forge, repository)}); err != nil {
		return nil, fmt.Errorf("list the pull-request states of %s: %w", repository, err)
	}
	return list.Items, nil
}

// ListAll returns every state sync wrote in the namespace.
func (s *Store) ListAll(ctx context.Context) ([]petriv1.PullRequestState, error) {
	var list petriv1.PullRequestStateList
	if err := s.reader().List(ctx, &list, client.InNamespace(s.Namespace), client.MatchingLabels{petriv1.LabelManagedBy: render.ManagedBy}); err != nil {
		return nil, fmt.Errorf("list the pull-request states: %w", err)
	}
	return list.Items, nil
}

func (s *Store) reader() client.Reader {
	if s.Reader != nil {
		return s.Reader
	}
	return s.Client
}

// ToSpec is the stored form of a state.
func ToSpec(k Key, st render.State, expires map[string]time.Time) petriv1.PullRequestStateSpec {
	spec := petriv1.PullRequestStateSpec{
		Forge:       k.forge(),
		Repository:  k.Repository,
		Number:      int64(k.Number),
		LastCommand: st.LastCommand,
		Notes:       slices.Clone(st.Notes),
		ActiveSHA:   st.ActiveSHA,
		ActiveAt:    timePtr(st.ActiveAt),
		Kept:        st.Kept,
		MergeGroups: slices.Clone(st.MergeGroups),
	}
	names := make([]string, 0, len(st.Apps))
	for name := range st.Apps {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		a := st.Apps[name]
		spec.Applications = append(spec.Applications, petriv1.ApplicationLifecycle{
			Name:            name,
			ReadySHA:        a.ReadySHA,
			ReadyAt:         timePtr(a.ReadyAt),
			ExtendedUntil:   timePtr(a.ExtendedUntil),
			ExpiresAt:       timePtr(expires[name]),
			ExpiredSHA:      a.ExpiredSHA,
			ExpiredAt:       timePtr(a.ExpiredAt),
			Deployment:      a.Deployment,
			DeploymentSHA:   a.DeploymentSHA,
			DeploymentState: a.DeploymentState,
		})
	}
	return spec
}

// FromSpec is the state a stored spec holds.
func FromSpec(spec petriv1.PullRequestStateSpec) render.State {
	st := render.State{
		LastCommand: spec.LastCommand,
		Notes:       slices.Clone(spec.Notes),
		ActiveSHA:   spec.ActiveSHA,
		ActiveAt:    timeOf(spec.ActiveAt),
		Kept:        spec.Kept,
		MergeGroups: slices.Clone(spec.MergeGroups),
	}
	for _, a := range spec.Applications {
		app := st.App(a.Name)
		app.ReadySHA, app.ReadyAt = a.ReadySHA, timeOf(a.ReadyAt)
		app.ExtendedUntil = timeOf(a.ExtendedUntil)
		app.ExpiredSHA, app.ExpiredAt = a.ExpiredSHA, timeOf(a.ExpiredAt)
		app.Deployment, app.DeploymentSHA, app.DeploymentState = a.Deployment, a.DeploymentSHA, a.DeploymentState
	}
	return st
}

func timePtr(t time.Time) *metav1.Time {
	if t.IsZero() {
		return nil
	}
	mt := metav1.NewTime(t.UTC().Truncate(time.Second))
	return &mt
}

func timeOf(t *metav1.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}

// Expiry is what a pull request's stored state says of one application's
// environment: kept by /petri keep, or when it expires. ok is false when the
// state is another pull request's (another forge's pull request of the same
// path and number included) or says nothing of it.
func Expiry(spec *petriv1.PullRequestStateSpec, k Key, app string) (expires time.Time, kept, ok bool) {
	if spec == nil || !strings.EqualFold(spec.Repository, k.Repository) || spec.Number != int64(k.Number) || (Key{Forge: spec.Forge}).forge() != k.forge() {
		return time.Time{}, false, false
	}
	if spec.Kept {
		return time.Time{}, true, true
	}
	for _, a := range spec.Applications {
		if a.Name == app && a.ExpiresAt != nil {
			return a.ExpiresAt.UTC(), false, true
		}
	}
	return time.Time{}, false, false
}
