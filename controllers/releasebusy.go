package controllers

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/log"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/naming"
	"github.com/petri-dev/petri/controllers/internal/releasebusy"
)

// +kubebuilder:rbac:groups="",resources=nodes,verbs=get

// releaseBusy checks the component's release before a Helm operation
// (releasebusy.Check): a Job of it other than job that has not finished, or
// a pod that still runs though its Job is gone, holds it. The caller then
// starts nothing and looks at the environment again shortly (jobwatch.UncachedPoll).
// The Jobs the cache may not show are the one the status names and the last
// one this operator created. It only reads env: the deploys of one pass run
// it at once.
func (j jobRunner) releaseBusy(ctx context.Context, env *petriv1.EphemeralEnvironment, component, job string) (releasebusy.Wait, error) {
	var candidates []string
	if cs := findComponentStatus(env, component); cs != nil && cs.Job != "" {
		candidates = append(candidates, cs.Job)
	}
	if last := j.releaseJobs.Last(env, component); last != "" {
		candidates = append(candidates, last)
	}
	w, err := releasebusy.Check(ctx, releasebusy.Release{
		Cache: j.client, API: j.apiReader,
		Namespace: j.options.ManagementNamespace, Key: releasebusy.Key(string(env.UID), naming.LabelValue(component)),
		Job: job, Candidates: candidates, Now: j.options.Now(),
	})
	switch {
	case err != nil:
		return releasebusy.Wait{}, err
	case w.Busy():
		log.FromContext(ctx).Info("Release busy, waiting", "component", component, "job", w.Job, "pod", w.Pod)
	case len(w.Passed) > 0:
		log.FromContext(ctx).Info("Release held by pods that will never finish; not waiting for them", "component", component, "passed", w.Passed)
	}
	return w, nil
}
