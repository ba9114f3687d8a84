package sharedworkload

import (
	"context"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/petri-dev/petri/api/contract"
	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/jobs"
	"github.com/petri-dev/petri/controllers/internal/jobwatch"
	"github.com/petri-dev/petri/controllers/internal/naming"
	"github.com/petri-dev/petri/controllers/internal/objects"
	"github.com/petri-dev/petri/controllers/internal/options"
	"github.com/petri-dev/petri/controllers/internal/releasebusy"
	"github.com/petri-dev/petri/controllers/internal/retry"
	"github.com/petri-dev/petri/controllers/internal/shared"
	"github.com/petri-dev/petri/controllers/internal/values"
)

// A shared workload's release.
//
// Its deploy Job runs at each generation; a Job of an older generation
// finishes first. A failed deploy is retried like a component's (three
// attempts, a backoff from 10 s doubling to at most 5 min) when its result
// says a retry may cure it, and is final otherwise (Stalled, until the spec
// changes). The environments bound to a shared workload whose deploy is
// final say so: Stalled, naming it, instead of waiting.
//
// A deployed release is looked after as an environment's are (controllers/drift.go):
// the shared namespace is read on every pass (status.namespaceUID says
// whether it is still the one the release was deployed in), and a verify Job
// running as the shared deployer reads the release record every
// --verify-interval. A release found lost is deployed again
// (status.recoveries goes into the new Jobs' names), and the bound
// environments' provision steps run again in it.

// currentRelease is the release's status for the current generation; a
// release of an older generation whose Job still runs is kept until it
// finishes.
func currentRelease(sw *petriv1.SharedWorkload) *petriv1.ComponentStatus {
	rel := sw.Status.Release
	if rel == nil || (rel.Generation != sw.Generation && rel.Phase != petriv1.ComponentDeploying) {
		rel = &petriv1.ComponentStatus{Name: sw.Name, Phase: petriv1.ComponentPending, Generation: sw.Generation}
		sw.Status.Release = rel
	}
	return rel
}

// deploy moves the release one step: follow its running Job, look after a
// deployed release, retry a failed one when due, or start the deploy Job.
func (r *Reconciler) deploy(ctx context.Context, sw *petriv1.SharedWorkload) (reconcile.Result, error) {
	rel := currentRelease(sw)
	if rel.Phase == petriv1.ComponentDeploying {
		res, running, err := r.observeRelease(ctx, sw, rel)
		if err != nil || running {
			return res, err
		}
		rel = currentRelease(sw)
	}
	var lost string
	switch rel.Phase {
	case petriv1.ComponentDeployed:
		why, res, err := r.checkRelease(ctx, sw, rel)
		if err != nil || why == "" {
			return res, err
		}
		lost = why
		sw.Status.Recoveries++
		*rel = petriv1.ComponentStatus{Name: sw.Name, Phase: petriv1.ComponentPending, Generation: sw.Generation}
		log.FromContext(ctx).Info("Shared workload release lost, deploying it again", "why", why, "recovery", sw.Status.Recoveries)
		r.Recorder.Eventf(sw, nil, corev1.EventTypeWarning, petriv1.ReasonWorkloadsLost, "Redeploy", "%s; deploying again", why)
	case petriv1.ComponentFailed:
		if rel.NextRetryAt == nil {
			r.summarize(sw, petriv1.ReasonDeployFailed, rel.LastError)
			return reconcile.Result{}, nil
		}
		if wait := r.Options.Until(rel.NextRetryAt.Time); wait > 0 {
			r.summarize(sw, petriv1.ReasonDeployRetrying, rel.LastError+"; "+rel.Message)
			return reconcile.Result{RequeueAfter: wait}, nil
		}
		rel.Phase, rel.NextRetryAt, rel.Attempt = petriv1.ComponentPending, nil, max(rel.Attempt, 1)+1
	}
	res, err := r.startRelease(ctx, sw, rel)
	if err == nil && lost != "" && rel.Phase == petriv1.ComponentDeploying {
		r.summarize(sw, petriv1.ReasonWorkloadsLost, fmt.Sprintf("%s; deploying again (job %s)", lost, rel.Job))
	}
	return res, err
}

// observeRelease records the outcome of the release's running deploy Job;
// running says it has none yet.
func (r *Reconciler) observeRelease(ctx context.Context, sw *petriv1.SharedWorkload, rel *petriv1.ComponentStatus) (reconcile.Result, bool, error) {
	st, uncached, err := jobwatch.ObserveLive(ctx, r.Client, r.APIReader, r.Options.ManagementNamespace, rel.Job)
	if err != nil {
		return reconcile.Result{}, false, err
	}
	switch {
	case st.Exists && !st.Done:
		r.summarize(sw, petriv1.ReasonDeployProgressing, "deploy job "+rel.Job+" is running")
		if uncached {
			return reconcile.Result{RequeueAfter: jobwatch.UncachedPoll}, true, nil
		}
		return reconcile.Result{}, true, nil
	case !st.Exists:
		rel.Phase = petriv1.ComponentPending
	case st.Succeeded:
		rel.Phase, rel.FinishedAt, rel.LastError, rel.Message = petriv1.ComponentDeployed, st.Finished, "", ""
		if !sw.Spec.Release.Waits() {
			rel.Message = petriv1.NotWaitedFor
		}
		rel.Revision = int32(st.Result.Revision)
		jobwatch.Record(contract.ActionDeploy, st)
		if err := objects.PruneOlderValues(ctx, r.Client, sw.Namespace, client.MatchingLabels{shared.LabelSharedWorkload: naming.LabelValue(sw.Name)}, rel.Generation); err != nil {
			log.FromContext(ctx).Info("Values secrets of older generations not deleted", "error", err.Error())
		}
	default:
		rel.Phase, rel.FinishedAt, rel.LastError = petriv1.ComponentFailed, st.Finished, jobs.OneLine(st.Message)
		jobwatch.Record(contract.ActionDeploy, st)
		r.scheduleRetry(sw, rel, st.Retryable())
	}
	return reconcile.Result{}, false, nil
}

// sharedRetryPolicy is a shared workload's retry policy: a component's
// default, from Options.SharedWorkloadRetryBackoff when it is set.
func sharedRetryPolicy(o options.Options) retry.Policy {
	p := retry.PolicyOf(nil)
	if o.SharedWorkloadRetryBackoff > 0 {
		p.Backoff = o.SharedWorkloadRetryBackoff
	}
	return p
}

// scheduleRetry decides whether the failed deploy attempt of the release is
// followed by another, and when (sharedRetryPolicy).
func (r *Reconciler) scheduleRetry(sw *petriv1.SharedWorkload, rel *petriv1.ComponentStatus, retryable bool) {
	p := sharedRetryPolicy(r.Options)
	attempt := max(rel.Attempt, 1)
	rel.NextRetryAt = nil
	if !retryable || attempt >= p.Attempts {
		rel.Message = fmt.Sprintf("failed after %d attempts", attempt)
		if !retryable {
			rel.Message = "failed; a retry would not change it"
		}
		r.Recorder.Eventf(sw, nil, corev1.EventTypeWarning, petriv1.ReasonDeployFailed, "Deploy", "shared workload %s %s: %s", sw.Name, rel.Message, rel.LastError)
		return
	}
	at := retry.At(r.Options, p, attempt, rel.FinishedAt)
	rel.NextRetryAt = &at
	rel.Message = fmt.Sprintf("attempt %d of %d failed; attempt %d starts at %s", attempt, p.Attempts, attempt+1, at.UTC().Format(time.RFC3339))
	r.Recorder.Eventf(sw, nil, corev1.EventTypeWarning, petriv1.ReasonDeployRetrying, "Deploy", "shared workload %s: %s: %s", sw.Name, rel.Message, rel.LastError)
}

// startRelease writes the release's values Secret of this generation and
// starts its deploy Job, named by the generation, the attempt and the count
// of recoveries.
func (r *Reconciler) startRelease(ctx context.Context, sw *petriv1.SharedWorkload, rel *petriv1.ComponentStatus) (reconcile.Result, error) {
	gen := sw.Generation
	instance, err := r.prepare(ctx, sw)
	if err != nil {
		return reconcile.Result{}, err
	}
	merged, err := values.Merge(sw.Spec.Values, nil)
	if err != nil {
		r.summarize(sw, petriv1.ReasonInvalidSpec, err.Error())
		return reconcile.Result{}, reconcile.TerminalError(err)
	}
	if len(instance) > 0 {
		keys := map[string]any{}
		for k, v := range instance {
			keys[k] = string(v)
		}
		merged["instanceSecret"] = keys
	}
	data, err := values.YAML(merged)
	if err != nil {
		return reconcile.Result{}, err
	}
	secretName := jobs.SharedKey(sw, jobs.ValuesSubject, gen).Name()
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: sw.Namespace, Name: secretName, Labels: r.jobLabels(sw, contract.ActionDeploy, gen)},
		Immutable:  ptr.To(true),
		Data:       map[string][]byte{jobs.ValuesKey: data},
	}
	if err := controllerutil.SetControllerReference(sw, secret, r.Scheme()); err != nil {
		return reconcile.Result{}, err
	}
	if err := r.Create(ctx, secret); err != nil && !apierrors.IsAlreadyExists(err) {
		return reconcile.Result{}, fmt.Errorf("create values secret: %w", err)
	}
	args := []string{"deploy",
		"--release", shared.ReleaseName(sw),
		"--namespace", r.Options.SharedNamespace,
		"--chart-repository", sw.Spec.Chart.Repository,
		"--chart-name", sw.Spec.Chart.Name,
		"--chart-version", sw.Spec.Chart.Version,
		"--values", jobs.ValuesFile,
		"--termination-log", jobs.TerminationLogPath,
	}
	args = append(args, jobs.ReleaseArgs(r.Options, sw.Spec.Chart, sw.Spec.Release)...)
	attempt := max(rel.Attempt, 1)
	key := jobs.SharedKey(sw, contract.ActionDeploy, gen)
	key.Recovery = sw.Status.Recoveries
	if attempt > 1 {
		key.Attempt = attempt
	}
	name := key.Name()
	wait, err := r.sharedReleaseBusy(ctx, sw, name)
	if err != nil {
		return reconcile.Result{}, err
	} else if wait.Busy() {
		r.summarize(sw, petriv1.ReasonDeployProgressing, "deploy "+wait.Waiting())
		return reconcile.Result{RequeueAfter: jobwatch.UncachedPoll}, nil
	}
	if err := r.createJob(ctx, sw, name, contract.ActionDeploy, gen, args, secretName); err != nil {
		return reconcile.Result{}, err
	}
	now := r.Options.MetaNow()
	rel.Phase, rel.Job, rel.StartedAt, rel.FinishedAt, rel.LastError, rel.Attempt = petriv1.ComponentDeploying, name, &now, nil, "", attempt
	log.FromContext(ctx).Info("Started shared workload deploy job", "job", name, "attempt", attempt)
	msg := "deploy job " + name + " is running"
	if passed := wait.PassedOver(); passed != "" {
		msg += "; " + passed
		r.Recorder.Eventf(sw, nil, corev1.EventTypeWarning, petriv1.ReasonReleaseHolderLost, "Deploy", "%s", passed)
	}
	r.summarize(sw, petriv1.ReasonDeployProgressing, msg)
	return reconcile.Result{}, nil
}

// summarize writes Deployed, Ready, Reconciling, Stalled and the phase from
// the release's outcome.
func (r *Reconciler) summarize(sw *petriv1.SharedWorkload, reason, msg string) {
	apimeta.RemoveStatusCondition(&sw.Status.Conditions, petriv1.ConditionStalled)
	switch reason {
	case petriv1.ReasonDeploySucceeded:
		setSWCondition(sw, petriv1.ConditionDeployed, metav1.ConditionTrue, reason, msg)
		setSWCondition(sw, petriv1.ConditionReady, metav1.ConditionTrue, petriv1.ReasonSucceeded, msg)
		setSWCondition(sw, petriv1.ConditionReconciling, metav1.ConditionFalse, petriv1.ReasonSucceeded, "")
		sw.Status.Phase = petriv1.EnvironmentReady
		sw.Status.ObservedGeneration = sw.Generation
	case petriv1.ReasonDeployFailed:
		// Final for this generation: Stalled, so kstatus reads Failed.
		setSWCondition(sw, petriv1.ConditionStalled, metav1.ConditionTrue, reason, msg)
		setSWCondition(sw, petriv1.ConditionDeployed, metav1.ConditionFalse, reason, msg)
		setSWCondition(sw, petriv1.ConditionReady, metav1.ConditionFalse, reason, msg)
		setSWCondition(sw, petriv1.ConditionReconciling, metav1.ConditionFalse, reason, msg)
		sw.Status.Phase = petriv1.EnvironmentFailed
		sw.Status.ObservedGeneration = sw.Generation
	case petriv1.ReasonInvalidSpec:
		setSWCondition(sw, petriv1.ConditionStalled, metav1.ConditionTrue, reason, msg)
		setSWCondition(sw, petriv1.ConditionReady, metav1.ConditionFalse, reason, msg)
		setSWCondition(sw, petriv1.ConditionReconciling, metav1.ConditionFalse, reason, msg)
		sw.Status.Phase = petriv1.EnvironmentStalled
		sw.Status.ObservedGeneration = sw.Generation
	default:
		setSWCondition(sw, petriv1.ConditionDeployed, metav1.ConditionFalse, reason, msg)
		setSWCondition(sw, petriv1.ConditionReady, metav1.ConditionFalse, reason, msg)
		setSWCondition(sw, petriv1.ConditionReconciling, metav1.ConditionTrue, reason, msg)
		sw.Status.Phase = petriv1.EnvironmentDeploying
	}
}

// sharedReleaseBusy finds a Job of the shared workload's release whose pod
// still runs though the status no longer follows it (RunningPod). The
// status names the one Job of the release that runs, and a pass waits for
// it (observeRelease, teardown); a pod of a Job deleted or failed while it
// ran is seen only here.
func (r *Reconciler) sharedReleaseBusy(ctx context.Context, sw *petriv1.SharedWorkload, job string) (releasebusy.Wait, error) {
	var cur batchv1.Job
	err := r.Get(ctx, client.ObjectKey{Namespace: r.Options.ManagementNamespace, Name: job}, &cur)
	if err != nil && !apierrors.IsNotFound(err) {
		return releasebusy.Wait{}, fmt.Errorf("get job %s: %w", job, err)
	}
	jobExists := err == nil
	held := releasebusy.Holds{Cache: r.Client, Nodes: r.APIReader, Now: r.Options.Now()}
	w, err := held.RunningPod(ctx, r.Options.ManagementNamespace, releasebusy.SharedKey(naming.LabelValue(sw.Name)), job, jobExists)
	switch {
	case err != nil:
		return releasebusy.Wait{}, err
	case w.Busy():
		log.FromContext(ctx).Info("Release busy, waiting", "job", w.Job, "pod", w.Pod)
	case len(w.Passed) > 0:
		log.FromContext(ctx).Info("Release held by pods that will never finish; not waiting for them", "passed", w.Passed)
	}
	return w, nil
}
