package plugin

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/sync/prstate"
	"github.com/petri-dev/petri/sync/render"
)

// Environment is what kubectl petri get shows of one environment, in the
// tree and in -o json|yaml.
type Environment struct {
	Name        string `json:"name"`
	Phase       string `json:"phase"`
	Message     string `json:"message,omitempty"`
	Application string `json:"application,omitempty"`
	Repository  string `json:"repository,omitempty"`
	// Forge is the repository's forge when it is not GitHub (gitlab,
	// gitea, forgejo).
	Forge       string `json:"forge,omitempty"`
	PullRequest int    `json:"pullRequest,omitempty"`
	PRURL       string `json:"pullRequestURL,omitempty"`
	Branch      string `json:"branch,omitempty"`
	SHA         string `json:"sha,omitempty"`
	URL         string `json:"url,omitempty"`
	Namespace   string `json:"namespace,omitempty"`
	// Cluster is where the environment runs: the WorkloadCluster the
	// operator placed it in, render.ClusterManagement, or
	// render.ClusterPending while its placement waits.
	Cluster string    `json:"cluster"`
	Created time.Time `json:"created"`
	// ExpiresAt is sync's expiry of the pull request's environment (its
	// PullRequestState, what the pull request's comment says), else the
	// environment's spec.ttl; Kept, /petri keep suspended it.
	ExpiresAt time.Time `json:"expiresAt,omitzero"`
	Kept      bool      `json:"kept,omitempty"`
	Deleting  bool      `json:"deleting,omitempty"`
	// LastRedeploy is the last redeploy request the operator honoured.
	LastRedeploy    string      `json:"lastRedeploy,omitempty"`
	Components      []Component `json:"components"`
	SharedWorkloads []Binding   `json:"sharedWorkloads,omitempty"`
	// Warnings say what could not be read (Helm releases the user may not
	// list, for one).
	Warnings []string `json:"warnings,omitempty"`
}

// Component is one component of an environment with its Helm release and
// latest Job.
type Component struct {
	Name    string `json:"name"`
	Chart   string `json:"chart"`
	Version string `json:"version"`
	Phase   string `json:"phase"`
	// Revision is the Helm release's latest revision; 0 when there is none
	// yet or it could not be read.
	Revision  int    `json:"revision,omitempty"`
	Job       *Job   `json:"job,omitempty"`
	Message   string `json:"message,omitempty"`
	LastError string `json:"lastError,omitempty"`
}

// Binding is one shared-workload binding of an environment.
type Binding struct {
	Name      string `json:"name"`
	Phase     string `json:"phase"`
	Secret    string `json:"secret,omitempty"`
	Job       *Job   `json:"job,omitempty"`
	Message   string `json:"message,omitempty"`
	LastError string `json:"lastError,omitempty"`
}

// Job is a Job of the management namespace and its latest pod.
type Job struct {
	Name   string `json:"name"`
	Action string `json:"action,omitempty"`
	// Pod is the Job's latest pod; empty when it has none (yet, or any
	// more: finished Jobs are removed after a while).
	Pod      string `json:"pod,omitempty"`
	PodPhase string `json:"podPhase,omitempty"`
}

// withLifecycle reads sync's state of the environment's pull request, when
// sync keeps one and the user may read it, for its expiry.
func (o *options) withLifecycle(ctx context.Context, v *Environment) {
	if v.Repository == "" || v.PullRequest == 0 {
		return
	}
	var st petriv1.PullRequestState
	pr := prstate.Key{Forge: v.Forge, Repository: v.Repository, Number: v.PullRequest}
	key := client.ObjectKey{Namespace: o.namespace, Name: prstate.Name(pr)}
	if err := o.client.Get(ctx, key, &st); err != nil {
		if !apierrors.IsNotFound(err) {
			v.Warnings = append(v.Warnings, fmt.Sprintf("sync's state of the pull request cannot be read: %v", err))
		}
		return
	}
	if at, kept, ok := prstate.Expiry(&st.Spec, pr, v.Application); ok {
		v.Kept, v.ExpiresAt = kept, at
	}
}

// view reads what get shows of one environment: the object, the pods of
// its Jobs, and the revisions of its Helm releases.
func (o *options) view(ctx context.Context, e *petriv1.EphemeralEnvironment) Environment {
	v := Environment{
		Name: e.Name, Phase: string(e.Status.Phase), Namespace: e.Status.TargetNamespace, Cluster: render.Cluster(e),
		Application: e.Labels[render.LabelApplication], Repository: e.Annotations[render.AnnotationRepository],
		Forge: e.Annotations[render.AnnotationForge],
		URL:   e.Annotations[render.AnnotationURL], Created: e.CreationTimestamp.Time,
		Deleting: !e.DeletionTimestamp.IsZero(), LastRedeploy: e.Status.LastRedeploy,
	}
	if v.Phase == "" {
		v.Phase = string(petriv1.EnvironmentPending)
	}
	if c := apimeta.FindStatusCondition(e.Status.Conditions, petriv1.ConditionReady); c != nil && c.Status != metav1.ConditionTrue {
		v.Message = c.Message
	}
	if e.Status.ExpiresAt != nil {
		v.ExpiresAt = e.Status.ExpiresAt.Time
	}
	if s := e.Spec.Source; s != nil {
		v.PullRequest, v.PRURL, v.Branch, v.SHA = s.PullRequest, s.URL, s.Branch, s.SHA
		if v.Repository == "" {
			v.Repository = s.Repository
		}
	}
	if v.PullRequest == 0 {
		v.PullRequest, _ = strconv.Atoi(e.Labels[render.LabelPullRequest])
	}
	o.withLifecycle(ctx, &v)

	pods, err := o.jobPods(ctx, e.Name)
	if err != nil {
		v.Warnings = append(v.Warnings, err.Error())
	}
	revisions, err := o.revisions(ctx, e)
	if err != nil {
		v.Warnings = append(v.Warnings, err.Error())
	}
	status := map[string]petriv1.ComponentStatus{}
	for _, c := range e.Status.Components {
		status[c.Name] = c
	}
	for _, c := range e.Spec.Components {
		st := status[c.Name]
		comp := Component{Name: c.Name, Chart: c.Chart.Name, Version: c.Chart.Version, Phase: string(st.Phase),
			Revision: revisions[c.Name], Message: st.Message, LastError: st.LastError, Job: jobView(st.Job, pods)}
		if comp.Phase == "" {
			comp.Phase = string(petriv1.ComponentPending)
		}
		v.Components = append(v.Components, comp)
	}
	// Components that left the spec and are still being undeployed.
	for _, st := range e.Status.Components {
		if !slices.ContainsFunc(e.Spec.Components, func(c petriv1.Component) bool { return c.Name == st.Name }) {
			v.Components = append(v.Components, Component{Name: st.Name, Phase: string(st.Phase), Revision: revisions[st.Name],
				Message: st.Message, LastError: st.LastError, Job: jobView(st.Job, pods)})
		}
	}
	for _, b := range e.Status.SharedWorkloads {
		v.SharedWorkloads = append(v.SharedWorkloads, Binding{Name: b.Name, Phase: string(b.Phase), Secret: b.Secret,
			Message: b.Message, LastError: b.LastError, Job: jobView(b.Job, pods)})
	}
	for _, name := range e.Spec.SharedWorkloads {
		if !slices.ContainsFunc(v.SharedWorkloads, func(b Binding) bool { return b.Name == name }) {
			v.SharedWorkloads = append(v.SharedWorkloads, Binding{Name: name, Phase: string(petriv1.ComponentPending)})
		}
	}
	return v
}

func jobView(name string, pods map[string][]corev1.Pod) *Job {
	if name == "" {
		return nil
	}
	j := &Job{Name: name}
	if p := latestPod(pods[name]); p != nil {
		j.Pod, j.PodPhase, j.Action = p.Name, string(p.Status.Phase), p.Labels[labelAction]
	}
	return j
}

// labelAction is the label of a Job's pods that says what it does
// (controllers/internal/jobs.LabelAction).
const labelAction = "petri.dev/action"

// jobPods lists the pods of an environment's Jobs, by Job name.
func (o *options) jobPods(ctx context.Context, env string) (map[string][]corev1.Pod, error) {
	var pods corev1.PodList
	if err := o.client.List(ctx, &pods, client.InNamespace(o.namespace), client.MatchingLabels{petriv1.LabelEnvironment: env}); err != nil {
		return nil, fmt.Errorf("list the pods of %s's Jobs in %s: %w", env, o.namespace, err)
	}
	out := map[string][]corev1.Pod{}
	for _, p := range pods.Items {
		if job := p.Labels[batchv1.JobNameLabel]; job != "" {
			out[job] = append(out[job], p)
		}
	}
	return out, nil
}

// latestPod is the pod created last (a Job makes a new pod per retry).
func latestPod(pods []corev1.Pod) *corev1.Pod {
	var best *corev1.Pod
	for i := range pods {
		p := &pods[i]
		if best == nil || best.CreationTimestamp.Before(&p.CreationTimestamp) ||
			best.CreationTimestamp.Equal(&p.CreationTimestamp) && best.Name < p.Name {
			best = p
		}
	}
	return best
}

// revisions reads the latest revision of every Helm release in the workload
// namespace from the labels of Helm's storage Secrets (owner=helm,
// name=RELEASE, version=N). It lists their metadata only: no Secret's data
// is ever read, though listing needs the right to list Secrets there. The
// releases of an environment placed in a workload cluster are in that
// cluster, which the plugin does not reach: it says so instead.
func (o *options) revisions(ctx context.Context, e *petriv1.EphemeralEnvironment) (map[string]int, error) {
	out := map[string]int{}
	namespace := e.Status.TargetNamespace
	if namespace == "" {
		return out, nil
	}
	if c := e.Status.Cluster; c != "" {
		return out, fmt.Errorf("Helm release revisions are in namespace %s of workload cluster %s, which kubectl petri does not read", namespace, c)
	}
	list, err := o.metadata.Resource(corev1.SchemeGroupVersion.WithResource("secrets")).Namespace(namespace).
		List(ctx, metav1.ListOptions{LabelSelector: "owner=helm"})
	if err != nil {
		return out, fmt.Errorf("read Helm release revisions in %s: %w", namespace, err)
	}
	for _, s := range list.Items {
		v, err := strconv.Atoi(s.Labels["version"])
		if err == nil && v > out[s.Labels["name"]] {
			out[s.Labels["name"]] = v
		}
	}
	return out, nil
}
