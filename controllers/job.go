package controllers

import (
	"context"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/petri-dev/petri/api/contract"
	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/jobs"
	"github.com/petri-dev/petri/controllers/internal/jobwatch"
	"github.com/petri-dev/petri/controllers/internal/naming"
	"github.com/petri-dev/petri/controllers/internal/objects"
)

// observeJobLive reads a Job for the reconciler's decisions, which a Job
// missing from the cache would make wrong (whether it still runs, whether it
// is gone). The cache has not seen a Job created a moment ago, nor one that no longer
// matches its label selector; a Job it does not know is looked up on the API
// server before it counts as gone. One found only there, still running, is
// polled (no watch event would announce its end).
func (r *EphemeralEnvironmentReconciler) observeJobLive(ctx context.Context, p *pass, name string) (jobwatch.State, error) {
	st, uncached, err := jobwatch.ObserveLive(ctx, r.Client, r.APIReader, r.Options.ManagementNamespace, name)
	if err == nil && uncached && !st.Done {
		p.requeueAfter(jobwatch.UncachedPoll)
	}
	return st, err
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
// as deadline (jobs.ReleaseDeadline); the Job's deadline is never shorter.
func (r *EphemeralEnvironmentReconciler) createJobWithin(ctx context.Context, env *petriv1.EphemeralEnvironment, name string, labels map[string]string, args []string, valuesSecret string, deadline time.Duration) error {
	return objects.CreateJob(ctx, r.Client, r.Options, jobs.Spec{
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
