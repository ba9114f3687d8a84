package controllers

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/api/contract"
	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/jobs"
	"github.com/petri-dev/petri/controllers/internal/naming"
	"github.com/petri-dev/petri/internal/printable"
	"github.com/petri-dev/petri/internal/redact"
)

// jobState is what the reconciler needs to know of one Job.
type jobState struct {
	exists, done, succeeded bool
	// message is for people: the deployer's result's message, or what
	// another container (a provision step) or the Job's condition said.
	message           string
	started, finished *metav1.Time
	// result is the deployer's typed result; typed is false when the Job
	// left none (not the deployer, a pod killed before it wrote one, a Job
	// that failed by its deadline).
	result contract.Result
	typed  bool
}

// setMessage records a termination message: a deployer's result is decoded,
// anything else is kept for people only and never parsed. Either is
// redacted of credentials (the deployer redacts its own, a step's container
// may not): the message goes into conditions, Events and pull requests.
func (st *jobState) setMessage(msg string) {
	if res, ok := contract.Decode(msg); ok {
		res.Message = redact.String(res.Message)
		st.result, st.typed, st.message = res, true, res.Message
		return
	}
	st.message = redact.String(msg)
}

// retryable reports whether a new Job of the same spec may succeed where
// this failed one did not: the deployer says so in its result; a Job that
// left no result (it ran out of time or pods) may.
func (st jobState) retryable() bool {
	return !st.typed || st.result.Retryable
}

// uncachedPoll is how often a running Job that only the API server knows is
// looked at again: the cache sends no events for it.
const uncachedPoll = 2 * time.Second

// observeJobLive reads a Job for the reconciler's decisions, which a Job
// missing from the cache would make wrong (whether it still runs, whether it
// is gone). The cache has not seen a Job created a moment ago, nor one that no longer
// matches its label selector; a Job it does not know is looked up on the API
// server before it counts as gone. One found only there, still running, is
// polled (no watch event would announce its end).
func (r *EphemeralEnvironmentReconciler) observeJobLive(ctx context.Context, p *pass, name string) (jobState, error) {
	st, uncached, err := observeJobLive(ctx, r.Client, r.APIReader, r.Options.ManagementNamespace, name)
	if err == nil && uncached && !st.done {
		p.requeueAfter(uncachedPoll)
	}
	return st, err
}

// observeJobLive reads a Job from the cache and, when the cache does not know
// it, from the API server; uncached says it was found only there.
//
// A finished Job's outcome is read from its pod, and the pod cache can lag
// the Job cache: the Job already says Failed or Complete while the cached
// pod does not show its container's end yet. Judged from that copy, a
// deploy that failed for a reason no retry cures (RenderFailed) would count
// as a retryable failure without a result, and a success would record
// revision 0. So a finished Job whose cached pods left no deployer result is
// read again from the API server, once per outcome.
func observeJobLive(ctx context.Context, cache, api client.Reader, namespace, name string) (st jobState, uncached bool, err error) {
	st, err = observeJob(ctx, cache, namespace, name)
	if err != nil {
		return st, false, err
	}
	if st.exists && (!st.done || st.typed) {
		return st, false, nil
	}
	live, err := observeJob(ctx, api, namespace, name)
	if err != nil {
		return st, false, err
	}
	if st.exists {
		// Found in the cache, finished, without a result there.
		if !live.exists {
			return st, false, nil
		}
		return live, false, nil
	}
	return live, live.exists, nil
}

// observeJob reads a Job and, when it failed, the one-line reason its pod
// wrote.
func observeJob(ctx context.Context, r client.Reader, namespace, name string) (jobState, error) {
	job := &batchv1.Job{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, job); err != nil {
		if apierrors.IsNotFound(err) {
			return jobState{}, nil
		}
		return jobState{}, fmt.Errorf("get job %s: %w", name, err)
	}
	st := jobState{exists: true, started: job.Status.StartTime, finished: job.Status.CompletionTime}
	st.done, st.succeeded, st.message = jobs.Finished(job)
	if !st.done {
		return podSucceeded(ctx, r, job, st), nil
	}
	if st.succeeded {
		pods, err := jobPods(ctx, r, job)
		if err != nil {
			return st, err
		}
		st.setMessage(jobs.CompletionMessage(pods))
	}
	if st.done && !st.succeeded {
		for _, c := range job.Status.Conditions {
			if c.Type == batchv1.JobFailed {
				t := c.LastTransitionTime
				st.finished = &t
			}
		}
		pods, err := jobPods(ctx, r, job)
		if err != nil {
			return st, err
		}
		if msg := jobs.TerminationMessage(pods); msg != "" {
			st.setMessage(msg)
		}
	}
	return st, nil
}

// podSucceeded reads the outcome of a Job that has not finished yet from its
// pods: the Job controller marks a Job Complete a second or more after its
// pod ended (it gathers a Job's pod events for a second before it syncs the
// Job), and a pod that succeeded with the deployer's result is the outcome
// already. A failed pod is not: the Job may run another. The pods are read
// from the cache's index only: a Job read from the API server (the cache
// does not know it) waits for its condition, without a list of pods on
// every look.
func podSucceeded(ctx context.Context, r client.Reader, job *batchv1.Job, st jobState) jobState {
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(job.Namespace), client.MatchingFields{indexJobPods: job.Name}); err != nil {
		return st
	}
	at, ok := jobs.SucceededPod(pods.Items)
	if !ok {
		return st
	}
	res := st
	res.setMessage(jobs.CompletionMessage(pods.Items))
	if !res.typed {
		return st
	}
	res.done, res.succeeded, res.finished = true, true, at
	return res
}

func (r *EphemeralEnvironmentReconciler) jobLabels(env *petriv1.EphemeralEnvironment, subject, action string, gen int64) map[string]string {
	l := ownedLabels(env)
	l[contract.LabelComponent] = naming.LabelValue(subject)
	l[contract.LabelAction] = action
	l[contract.LabelGeneration] = strconv.FormatInt(gen, 10)
	return l
}

// createJob creates a deployer Job running as the environment's deployer
// identity; an existing Job of that name is the same work, adopted.
func (r *EphemeralEnvironmentReconciler) createJob(ctx context.Context, env *petriv1.EphemeralEnvironment, name string, labels map[string]string, args []string, valuesSecret string) error {
	return r.createJobWithin(ctx, env, name, labels, args, valuesSecret, 0)
}

// createJobWithin is createJob for a Helm operation that may take as long
// as deadline (releaseDeadline); the Job's deadline is never shorter.
func (r *EphemeralEnvironmentReconciler) createJobWithin(ctx context.Context, env *petriv1.EphemeralEnvironment, name string, labels map[string]string, args []string, valuesSecret string, deadline time.Duration) error {
	return createJob(ctx, r.Client, r.Options, jobs.Spec{
		Name: name, Labels: labels, ActiveDeadline: deadline,
		Owner:          *metav1.NewControllerRef(env, petriv1.GroupVersion.WithKind("EphemeralEnvironment")),
		ServiceAccount: naming.DeployerServiceAccount(env.Name),
		Image:          r.Options.DeployerImage,
		Command:        []string{jobs.DeployerEntrypoint},
		Args:           args,
		ValuesSecret:   valuesSecret,
		CASecret:       r.Options.ChartCASecret,
	})
}

// createJob fills in the Job settings common to every Petri Job and creates
// it in the management namespace; an existing Job of that name is the same
// work, adopted.
func createJob(ctx context.Context, c client.Client, o Options, spec jobs.Spec) error {
	spec.Namespace = o.ManagementNamespace
	spec.BackoffLimit = o.JobBackoffLimit
	spec.ActiveDeadline = max(spec.ActiveDeadline, o.JobActiveDeadline)
	spec.TTLAfterFinished = o.JobTTLAfterFinished
	spec.Resources = o.JobResources
	if err := c.Create(ctx, jobs.Build(spec)); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create job %s: %w", spec.Name, err)
	}
	return nil
}

// helmDefaultTimeout is Helm's bound on one operation when the release
// names none.
const helmDefaultTimeout = 5 * time.Minute

// deadlineMargin is what a deploy Job does beside the Helm operation
// itself: start, fetch the chart, take the release's lease.
const deadlineMargin = 5 * time.Minute

// releaseDeadline is how long a Job running a Helm operation on rel may
// take: its timeout (Helm's default when it names none) and the margin. A
// Job deadline below it would kill Helm midway through a wait, leaving a
// pending release, and report DeadlineExceeded instead of Helm's answer.
func releaseDeadline(rel petriv1.ReleaseOptions) time.Duration {
	t := helmDefaultTimeout
	if rel.Timeout != nil && rel.Timeout.Duration > 0 {
		t = rel.Timeout.Duration
	}
	return t + deadlineMargin
}

// oneLine keeps a message to one line of at most 1024 bytes, without the
// control and invisible characters a Job's output may carry (terminal
// escapes, bidirectional overrides): the message is the pull request's
// code's as much as Petri's, and it is shown in comments and terminals.
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	s = printable.String(s)
	if len(s) > 1024 {
		s = s[:1024]
	}
	return s
}
