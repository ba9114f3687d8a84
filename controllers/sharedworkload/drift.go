package sharedworkload

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/petri-dev/petri/api/contract"
	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/jobs"
	"github.com/petri-dev/petri/controllers/internal/jobwatch"
	"github.com/petri-dev/petri/controllers/internal/naming"
	"github.com/petri-dev/petri/controllers/internal/objects"
	"github.com/petri-dev/petri/controllers/internal/shared"
)

// checkRelease looks after a deployed release: it says why the release is
// lost ("" while it is not), and otherwise keeps it Ready and its
// verification going.
func (r *Reconciler) checkRelease(ctx context.Context, sw *petriv1.SharedWorkload, rel *petriv1.ComponentStatus) (string, reconcile.Result, error) {
	ns := &corev1.Namespace{}
	key := client.ObjectKey{Name: r.Options.SharedNamespace}
	if r.NamespaceCache != nil && sw.Status.NamespaceUID != "" && r.NamespaceCache.Get(ctx, key, ns) == nil &&
		string(ns.UID) == sw.Status.NamespaceUID && ns.DeletionTimestamp.IsZero() {
		// The cache of the namespaces the operator created shows the one
		// the release was deployed in: no request on this pass, which
		// every event of every bound environment brings. Anything else is
		// decided on the API server's answer.
		if err := objects.EnsurePodSecurity(ctx, r.Client, ns, r.Options.WorkloadPodSecurity); err != nil {
			return "", reconcile.Result{}, err
		}
		r.summarize(sw, petriv1.ReasonDeploySucceeded, r.deployedIn(sw))
		return r.verifyRelease(ctx, sw, rel)
	}
	err := r.Get(ctx, key, ns)
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("shared namespace %s was deleted, and the release %s with it", r.Options.SharedNamespace, sw.Name), reconcile.Result{}, nil
	case err != nil:
		return "", reconcile.Result{}, fmt.Errorf("get shared namespace %s: %w", r.Options.SharedNamespace, err)
	case !ns.DeletionTimestamp.IsZero():
		// Being deleted: its deletion brings the shared workload back.
		return fmt.Sprintf("shared namespace %s is being deleted, and the release %s with it", ns.Name, sw.Name), reconcile.Result{}, nil
	case sw.Status.NamespaceUID != "" && sw.Status.NamespaceUID != string(ns.UID):
		return fmt.Sprintf("shared namespace %s was deleted and created again (uid %s, now %s): the release %s is gone", ns.Name, sw.Status.NamespaceUID, ns.UID, sw.Name), reconcile.Result{}, nil
	}
	sw.Status.NamespaceUID = string(ns.UID)
	if err := objects.EnsurePodSecurity(ctx, r.Client, ns, r.Options.WorkloadPodSecurity); err != nil {
		return "", reconcile.Result{}, err
	}
	r.summarize(sw, petriv1.ReasonDeploySucceeded, r.deployedIn(sw))
	return r.verifyRelease(ctx, sw, rel)
}

// deployedIn is the message of a deployed shared workload: where, and
// whether its deploy waited for its workloads.
func (r *Reconciler) deployedIn(sw *petriv1.SharedWorkload) string {
	msg := "deployed in " + r.Options.SharedNamespace
	if !sw.Spec.Release.Waits() {
		msg += "; " + petriv1.NotWaitedFor
	}
	return msg
}

// verifyRelease follows the release's verify Job, or starts the periodic
// one when it is due: the Job, running as the shared deployer, reads the
// release record and compares its revision with the one the deploy made.
func (r *Reconciler) verifyRelease(ctx context.Context, sw *petriv1.SharedWorkload, rel *petriv1.ComponentStatus) (string, reconcile.Result, error) {
	v := sw.Status.Verification
	if v != nil && v.Job != "" && v.FinishedAt == nil {
		return r.observeReleaseVerification(ctx, sw, rel, v)
	}
	if r.Options.VerifyInterval <= 0 || rel.Revision == 0 {
		return "", reconcile.Result{}, nil
	}
	since := rel.FinishedAt
	if v != nil && v.StartedAt != nil && (since == nil || v.StartedAt.After(since.Time)) {
		since = v.StartedAt
	}
	if since != nil {
		if wait := r.Options.Until(since.Add(r.Options.VerifyInterval)); wait > 0 {
			return "", reconcile.Result{RequeueAfter: wait}, nil
		}
	}
	period := max(r.Options.VerifyInterval, time.Second)
	key := jobs.SharedKey(sw, contract.ActionVerify, sw.Generation)
	key.Recovery = sw.Status.Recoveries
	key.Verify = &naming.VerifyCause{Trigger: jobs.VerifyTriggerPeriodic, Key: strconv.FormatInt(r.Options.Now().UnixNano()/int64(period), 10)}
	name := key.Name()
	if v != nil && v.Job != "" && v.Job != name {
		// The previous one failed and was kept for its log until now.
		if err := objects.DeleteKeptJob(ctx, r.Client, r.Options.ManagementNamespace, v.Job); err != nil {
			return "", reconcile.Result{}, err
		}
	}
	args := []string{"verify",
		"--namespace", r.Options.SharedNamespace,
		"--termination-log", jobs.TerminationLogPath,
		"--expect", fmt.Sprintf("%s=%d", shared.ReleaseName(sw), rel.Revision),
	}
	if err := r.createJob(ctx, sw, name, contract.ActionVerify, sw.Generation, args, ""); err != nil {
		return "", reconcile.Result{}, err
	}
	now := r.Options.MetaNow()
	sw.Status.Verification = &petriv1.VerificationStatus{Job: name, Trigger: jobs.VerifyTriggerPeriodic, StartedAt: &now}
	log.FromContext(ctx).Info("Started shared workload verify job", "job", name)
	return "", reconcile.Result{}, nil
}

// observeReleaseVerification records the outcome of the release's verify
// Job: verified (the Job goes), lost, or could not tell (kept for its log,
// the next period tries again).
func (r *Reconciler) observeReleaseVerification(ctx context.Context, sw *petriv1.SharedWorkload, rel *petriv1.ComponentStatus, v *petriv1.VerificationStatus) (string, reconcile.Result, error) {
	st, uncached, err := jobwatch.ObserveLive(ctx, r.Client, r.APIReader, r.Options.ManagementNamespace, v.Job)
	if err != nil {
		return "", reconcile.Result{}, err
	}
	now := r.Options.MetaNow()
	switch {
	case !st.Exists:
		v.FinishedAt, v.Result = &now, fmt.Sprintf("job %s is gone before its outcome was seen", v.Job)
		return "", reconcile.Result{}, nil
	case !st.Done:
		if uncached {
			return "", reconcile.Result{RequeueAfter: jobwatch.UncachedPoll}, nil
		}
		return "", reconcile.Result{}, nil
	}
	jobwatch.Record(contract.ActionVerify, st)
	v.FinishedAt, v.Result = &now, jobs.OneLine(st.Message)
	if st.Finished != nil {
		v.FinishedAt = st.Finished
	}
	if st.Succeeded {
		return "", reconcile.Result{}, objects.DeleteFinishedJob(ctx, r.Client, r.Options.ManagementNamespace, v.Job)
	}
	if st.Typed && st.Result.Outcome == contract.OutcomeDrifted && slices.Contains(st.Result.Drifted, sw.Name) &&
		(rel.FinishedAt == nil || !rel.FinishedAt.After(v.StartedAt.Time)) {
		return fmt.Sprintf("verify job %s found: %s", v.Job, v.Result), reconcile.Result{}, nil
	}
	r.Recorder.Eventf(sw, nil, corev1.EventTypeWarning, petriv1.ReasonVerifyFailed, "Verify", "verify job %s failed: %s", v.Job, v.Result)
	return "", reconcile.Result{}, nil
}
