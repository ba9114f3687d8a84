package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/petri-dev/petri/api/contract"
	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/jobs"
)

// deprovisionBindings runs the deprovision Job of every provisioned binding,
// with the same staged credentials its provision Job saw. A failure is
// retried with backoff and reported.
func (t teardownSteps) deprovisionBindings(ctx context.Context, env *petriv1.EphemeralEnvironment, p *pass) (bool, error) {
	done := true
	var problems []string
	for i := range env.Status.SharedWorkloads {
		bs := &env.Status.SharedWorkloads[i]
		finished, err := t.deprovision(ctx, env, bs, p)
		var later *retryLater
		if errors.As(err, &later) {
			p.requeueAfter(later.after)
			problems = append(problems, later.msg)
			err = nil
		}
		if err != nil {
			return false, err
		}
		done = done && finished
	}
	if len(problems) > 0 {
		p.teardownProblem = "deprovision failed, retrying: " + strings.Join(problems, "; ")
	}
	return done, nil
}

func (t teardownSteps) deprovision(ctx context.Context, env *petriv1.EphemeralEnvironment, bs *petriv1.BindingStatus, p *pass) (bool, error) {
	if bs.Phase == petriv1.ComponentUndeployed {
		return true, nil
	}
	if bs.Phase == petriv1.ComponentDeploying {
		// A bind or provision still running finishes first; a provision and
		// its deprovision never overlap.
		st, err := t.jobs.observeLive(ctx, p, bs.Job)
		if err != nil {
			return false, err
		}
		if st.Exists && !st.Done {
			bs.Message = "waiting for the running " + bs.Job + " before deprovisioning"
			return false, nil
		}
	}
	provisioned := bs.Job == provisionJob(env, bs) || bs.Phase == petriv1.ComponentDeployed || bs.Phase == petriv1.ComponentUndeploying
	sw := &petriv1.SharedWorkload{}
	err := t.client.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: sharedWorkloadIn(env, bs.Name)}, sw)
	if apierrors.IsNotFound(err) {
		bs.Phase, bs.Message = petriv1.ComponentUndeployed, "shared workload is gone; nothing to deprovision"
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("get shared workload %s: %w", bs.Name, err)
	}
	if !provisioned || sw.Spec.Deprovision == nil {
		bs.Phase, bs.Message = petriv1.ComponentUndeployed, "nothing to deprovision"
		return true, nil
	}
	if bs.Phase == petriv1.ComponentUndeploying {
		done, running, err := t.observeRetried(ctx, env, p, contract.ActionDeprovision, bs.Name, bs.Job, bs.Attempt, &bs.FinishedAt, &bs.LastError)
		if done {
			bs.Phase, bs.Message = petriv1.ComponentUndeployed, ""
			return true, nil
		}
		if running || err != nil {
			return false, err
		}
	}
	attempt := int32(1)
	if bs.Phase == petriv1.ComponentUndeploying {
		attempt = bs.Attempt + 1
	}
	name := deprovisionJob(env, bs, attempt)
	if err := t.jobs.createStep(ctx, env, sw, name, contract.ActionDeprovision, sw.Spec.Deprovision, jobs.BindingEpoch(bs)); err != nil {
		return false, err
	}
	now := t.options.MetaNow()
	bs.Phase, bs.Job, bs.Attempt, bs.StartedAt, bs.FinishedAt, bs.LastError, bs.Message = petriv1.ComponentUndeploying, name, attempt, &now, nil, "", "deprovisioning"
	log.FromContext(ctx).Info("Started deprovision job", "sharedWorkload", bs.Name, "job", name, "attempt", attempt)
	return false, nil
}

// unbindRemoved deprovisions the bindings of shared workloads that left the
// spec, with the credentials their provision used, and forgets each once it
// is deprovisioned. It returns what it still waits for.
func (t teardownSteps) unbindRemoved(ctx context.Context, env *petriv1.EphemeralEnvironment, p *pass) ([]string, error) {
	var keep []petriv1.BindingStatus
	var waiting []string
	for i := range env.Status.SharedWorkloads {
		bs := &env.Status.SharedWorkloads[i]
		if slices.Contains(env.Spec.SharedWorkloads, bs.Name) {
			keep = append(keep, *bs)
			continue
		}
		done, msg, err := t.deprovisionRemoved(ctx, env, bs, p)
		if err != nil {
			return nil, err
		}
		if !done {
			keep = append(keep, *bs)
			waiting = append(waiting, msg)
		}
	}
	env.Status.SharedWorkloads = keep
	return waiting, nil
}

// deprovisionRemoved moves the deprovision of one removed binding; a failure
// is retried with backoff, as at teardown.
func (t teardownSteps) deprovisionRemoved(ctx context.Context, env *petriv1.EphemeralEnvironment, bs *petriv1.BindingStatus, p *pass) (bool, string, error) {
	done, err := t.deprovision(ctx, env, bs, p)
	var later *retryLater
	if errors.As(err, &later) {
		p.requeueAfter(later.after)
		return false, bs.Name + " (removed; " + later.msg + ")", nil
	}
	if err != nil {
		return false, "", fmt.Errorf("deprovision removed shared workload %s: %w", bs.Name, err)
	}
	return done, bs.Name + " (removed; deprovisioning)", nil
}
