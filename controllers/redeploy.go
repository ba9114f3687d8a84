package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/petri-dev/petri/api/contract"
	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/naming"
)

// honourRedeploy runs the deploy graph again when the petri.dev/redeploy
// annotation holds a value the operator has not honoured yet: every component
// of the spec goes back to Pending for the current generation, and the value
// is recorded in status.lastRedeploy, which also goes into the names of the
// deploy Jobs it starts (deployJobName). Recording it makes the request
// idempotent: the same value never deploys twice, after a restart neither.
//
// A request waits while any Job of the environment runs, so two Helm
// operations on one release never overlap; the Job's completion brings the
// environment back here.
func (r *EphemeralEnvironmentReconciler) honourRedeploy(ctx context.Context, env *petriv1.EphemeralEnvironment) {
	want := env.Annotations[petriv1.AnnotationRedeploy]
	if want == "" || want == env.Status.LastRedeploy {
		return
	}
	for _, cs := range env.Status.Components {
		if cs.Phase == petriv1.ComponentDeploying || cs.Phase == petriv1.ComponentUndeploying {
			return
		}
	}
	for i := range env.Status.Components {
		cs := &env.Status.Components[i]
		if findComponent(env, cs.Name) == nil {
			// Left the spec: deploy undeploys it as before.
			continue
		}
		*cs = petriv1.ComponentStatus{Name: cs.Name, Phase: petriv1.ComponentPending, Generation: env.Generation}
	}
	env.Status.LastRedeploy = want
	log.FromContext(ctx).Info("Redeploy requested", "redeploy", want)
	r.Recorder.Eventf(env, nil, corev1.EventTypeNormal, petriv1.ReasonDeployProgressing, "Redeploy",
		"redeploy requested (%s=%s): every component deploys again", petriv1.AnnotationRedeploy, want)
}

// deployJobName names a component's deploy Job for the current generation
// and attempt. After a redeploy the honoured request, and after the operator
// deployed lost workloads again its count of such recoveries, go into the
// name's hash, so the new Job is not mistaken for the finished one of the
// same generation, and a restarted operator still finds the Job it started.
// A retry (attempt 2 on) has the attempt in its name.
func deployJobName(env *petriv1.EphemeralEnvironment, component string, attempt int32) string {
	uid := env.UID
	if env.Status.LastRedeploy != "" {
		uid = types.UID(string(env.UID) + "/redeploy/" + env.Status.LastRedeploy)
	}
	uid = recoveryUID(uid, env.Status.Recoveries)
	if attempt > 1 {
		return naming.AttemptJob(env.Name, uid, contract.ActionDeploy, component, env.Generation, attempt)
	}
	return naming.Job(env.Name, uid, contract.ActionDeploy, component, env.Generation)
}
