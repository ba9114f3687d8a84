package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/log"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

// honourRedeploy runs the deploy graph again when the petri.dev/redeploy
// annotation holds a value the operator has not honoured yet: every component
// of the spec goes back to Pending for the current generation, and the value
// is recorded in status.lastRedeploy, which also goes into the names of the
// deploy Jobs it starts (jobs.DeployName). Recording it makes the request
// idempotent: the same value never deploys twice, after a restart neither.
//
// A request waits while any Job of the environment runs, so two Helm
// operations on one release never overlap; the Job's completion brings the
// environment back here.
func honourRedeploy(ctx context.Context, recorder events.EventRecorder, env *petriv1.EphemeralEnvironment) {
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
	for i := range env.Status.SharedWorkloads {
		// A failed binding is tried again too, with Jobs named by the
		// request; one that holds is left as it is.
		if bs := &env.Status.SharedWorkloads[i]; bs.Phase == petriv1.ComponentFailed {
			*bs = petriv1.BindingStatus{Name: bs.Name, Phase: petriv1.ComponentPending, Generation: bs.Generation, Recovery: bs.Recovery, Redeploy: want}
		}
	}
	env.Status.LastRedeploy = want
	log.FromContext(ctx).Info("Redeploy requested", "redeploy", want)
	recorder.Eventf(env, nil, corev1.EventTypeNormal, petriv1.ReasonDeployProgressing, "Redeploy",
		"redeploy requested (%s=%s): every component deploys again, and every failed binding binds again", petriv1.AnnotationRedeploy, want)
}
