package ui

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/sync/prstate"
	"github.com/petri-dev/petri/sync/render"
)

// What the page shows. Everything comes from the objects sync wrote and
// their status, and nothing from a Secret. Like the pull-request feedback
// (sync/render), it never shows what a shared workload's own provision or
// deprovision containers printed: a binding's lastError, and any message
// that quotes it, is replaced by the name of the Job whose logs hold it.

// page is the data of one rendering.
type page struct {
	Namespace       string
	Environments    []environment
	SharedWorkloads []sharedWorkload
	Now             time.Time
	// Problem says why the lists could not be read (the cache is not
	// synced yet, for one).
	Problem string
}

type environment struct {
	// forge is the environment's forge, from its annotation; empty for
	// GitHub.
	forge       string
	Name        string
	Application string
	Repository  string
	PullRequest int
	PRURL       string
	Branch      string
	SHA         string
	URL         string
	Namespace   string
	// Cluster is render.Cluster: a WorkloadCluster's name (Placed), the
	// management cluster, or pending placement.
	Cluster string
	Placed  bool
	// Phase is the operator's status.phase; Detail the summary sync posts
	// on the pull request.
	Phase   string
	Detail  string
	Created time.Time
	// ExpiresAt is when the environment expires: sync's own expiry of the
	// pull request's environment (its PullRequestState, what the comment
	// says), else the environment's spec.ttl; Kept, /petri keep.
	ExpiresAt  *time.Time
	Kept       bool
	Components []component
	Bindings   []binding
}

type component struct {
	Name      string
	Chart     string
	Version   string
	Phase     string
	Job       string
	Message   string
	LastError string
	Started   *time.Time
	Finished  *time.Time
}

type binding struct {
	Name      string
	Phase     string
	Job       string
	Message   string
	LastError string
}

type sharedWorkload struct {
	Name      string
	Chart     string
	Version   string
	Phase     string
	Bound     int32
	Job       string
	LastError string
	Message   string
}

// ShortSHA is the first seven characters of the head commit.
func (e environment) ShortSHA() string {
	if len(e.SHA) > 7 {
		return e.SHA[:7]
	}
	return e.SHA
}

// Failed reports whether the component's latest operation failed; its log
// is shown open.
func (c component) Failed() bool { return c.Phase == string(petriv1.ComponentFailed) }

// read builds the page from the cache.
func (u *UI) read(ctx context.Context) page {
	p := page{Namespace: u.opts.Namespace, Now: u.now()}
	var envs petriv1.EphemeralEnvironmentList
	if err := u.opts.Cache.List(ctx, &envs, client.InNamespace(u.opts.Namespace)); err != nil {
		p.Problem = fmt.Sprintf("environments cannot be read yet: %v", err)
		return p
	}
	var states petriv1.PullRequestStateList
	if err := u.opts.Cache.List(ctx, &states, client.InNamespace(u.opts.Namespace)); err != nil {
		p.Problem = fmt.Sprintf("pull-request states cannot be read yet: %v", err)
		return p
	}
	byName := map[string]*petriv1.PullRequestStateSpec{}
	for i := range states.Items {
		byName[states.Items[i].Name] = &states.Items[i].Spec
	}
	for i := range envs.Items {
		if e := &envs.Items[i]; render.Owned(e.Labels) {
			v := environmentView(e)
			withLifecycle(&v, byName[prstate.Name(v.stateKey())])
			p.Environments = append(p.Environments, v)
		}
	}
	sort.SliceStable(p.Environments, func(i, j int) bool {
		a, b := p.Environments[i], p.Environments[j]
		if !a.Created.Equal(b.Created) {
			return a.Created.After(b.Created)
		}
		return a.Name < b.Name
	})
	var sws petriv1.SharedWorkloadList
	if err := u.opts.Cache.List(ctx, &sws, client.InNamespace(u.opts.Namespace)); err != nil {
		p.Problem = fmt.Sprintf("shared workloads cannot be read yet: %v", err)
		return p
	}
	for i := range sws.Items {
		if sw := &sws.Items[i]; render.Owned(sw.Labels) {
			p.SharedWorkloads = append(p.SharedWorkloads, sharedWorkloadView(sw))
		}
	}
	sort.Slice(p.SharedWorkloads, func(i, j int) bool { return p.SharedWorkloads[i].Name < p.SharedWorkloads[j].Name })
	return p
}

// withLifecycle shows what sync's state of the pull request says of the
// environment's expiry, when it says anything.
func withLifecycle(v *environment, st *petriv1.PullRequestStateSpec) {
	at, kept, ok := prstate.Expiry(st, v.stateKey(), v.Application)
	switch {
	case !ok:
	case kept:
		v.Kept, v.ExpiresAt = true, nil
	default:
		v.ExpiresAt = &at
	}
}

// stateKey names the pull request whose state sync keeps for the
// environment: its forge's (the annotation, GitHub's when there is none).
func (v environment) stateKey() prstate.Key {
	return prstate.Key{Forge: v.forge, Repository: v.Repository, Number: v.PullRequest}
}

func environmentView(e *petriv1.EphemeralEnvironment) environment {
	_, detail := render.EnvState(e)
	v := environment{
		Name: e.Name, Application: e.Labels[render.LabelApplication], Repository: e.Annotations[render.AnnotationRepository], forge: e.Annotations[render.AnnotationForge],
		URL: e.Annotations[render.AnnotationURL], Namespace: e.Status.TargetNamespace, Phase: string(e.Status.Phase),
		Cluster: render.Cluster(e), Placed: e.Status.Cluster != "", Detail: detail, Created: e.CreationTimestamp.Time,
	}
	if v.Phase == "" {
		v.Phase = string(petriv1.EnvironmentPending)
	}
	if !e.DeletionTimestamp.IsZero() {
		v.Phase = string(petriv1.EnvironmentDeleting)
	}
	if v.Phase == string(petriv1.EnvironmentReady) {
		v.Detail = ""
	} else if c := apimeta.FindStatusCondition(e.Status.Conditions, petriv1.ConditionReady); c != nil && c.Status != metav1.ConditionTrue && c.Message != "" && v.Phase != string(petriv1.EnvironmentDeleting) {
		v.Detail = render.Scrub(e, c.Message)
	}
	if e.Status.ExpiresAt != nil {
		t := e.Status.ExpiresAt.Time
		v.ExpiresAt = &t
	}
	v.PullRequest, _ = strconv.Atoi(e.Labels[render.LabelPullRequest])
	if s := e.Spec.Source; s != nil {
		v.PRURL, v.Branch, v.SHA = s.URL, s.Branch, s.SHA
		if s.PullRequest != 0 {
			v.PullRequest = s.PullRequest
		}
		if v.Repository == "" {
			v.Repository = s.Repository
		}
	}
	status := map[string]petriv1.ComponentStatus{}
	for _, c := range e.Status.Components {
		status[c.Name] = c
	}
	for _, c := range e.Spec.Components {
		st := status[c.Name]
		cv := component{Name: c.Name, Chart: c.Chart.Name, Version: c.Chart.Version, Phase: string(st.Phase), Job: st.Job,
			Message: render.Scrub(e, st.Message), LastError: st.LastError, Started: timePtr(st.StartedAt), Finished: timePtr(st.FinishedAt)}
		if cv.Phase == "" {
			cv.Phase = string(petriv1.ComponentPending)
		}
		v.Components = append(v.Components, cv)
	}
	seen := map[string]bool{}
	for _, b := range e.Status.SharedWorkloads {
		seen[b.Name] = true
		v.Bindings = append(v.Bindings, binding{Name: b.Name, Phase: string(b.Phase), Job: b.Job,
			Message: render.Scrub(e, b.Message), LastError: render.Scrub(e, b.LastError)})
	}
	for _, name := range e.Spec.SharedWorkloads {
		if !seen[name] {
			v.Bindings = append(v.Bindings, binding{Name: name, Phase: string(petriv1.ComponentPending)})
		}
	}
	return v
}

func sharedWorkloadView(sw *petriv1.SharedWorkload) sharedWorkload {
	v := sharedWorkload{Name: sw.Name, Chart: sw.Spec.Chart.Name, Version: sw.Spec.Chart.Version, Phase: string(sw.Status.Phase),
		Bound: sw.Status.BoundEnvironments}
	if v.Phase == "" {
		v.Phase = string(petriv1.EnvironmentPending)
	}
	if r := sw.Status.Release; r != nil {
		v.Job, v.LastError, v.Message = r.Job, r.LastError, r.Message
	}
	return v
}

func timePtr(t *metav1.Time) *time.Time {
	if t == nil {
		return nil
	}
	v := t.Time
	return &v
}
