package controllers

import (
	"context"
	"strconv"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/petri-dev/petri/api/contract"
	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/jobs"
	"github.com/petri-dev/petri/controllers/internal/jobwatch"
	"github.com/petri-dev/petri/controllers/internal/naming"
	"github.com/petri-dev/petri/controllers/internal/objects"
	"github.com/petri-dev/petri/controllers/internal/releasebusy"
)

// jobRunner starts the environments' deployer Jobs and reads them: what a
// step that runs a Job needs of the reconciler (the cached and the live
// reader, and the options the Job is built from).
type jobRunner struct {
	client    client.Client
	apiReader client.Reader
	options   Options
	// releaseJobs remembers the last Job created of each release.
	releaseJobs *releasebusy.Created
}

// jobs hands the steps the reconciler's Job runner.
func (r *EphemeralEnvironmentReconciler) jobs() jobRunner {
	return jobRunner{client: r.Client, apiReader: r.APIReader, options: r.Options, releaseJobs: &r.releaseJobs}
}

// observeLive reads a Job for the reconciler's decisions, which a Job
// missing from the cache would make wrong (whether it still runs, whether it
// is gone). The cache has not seen a Job created a moment ago, nor one that no longer
// matches its label selector; a Job it does not know is looked up on the API
// server before it counts as gone. One found only there, still running, is
// polled (no watch event would announce its end).
func (j jobRunner) observeLive(ctx context.Context, p *pass, name string) (jobwatch.State, error) {
	st, uncached, err := jobwatch.ObserveLive(ctx, j.client, j.apiReader, j.options.ManagementNamespace, name)
	if err == nil && uncached && !st.Done {
		p.requeueAfter(jobwatch.UncachedPoll)
	}
	return st, err
}

// jobLabels are the labels of a Job of the environment's subject, action
// and generation.
func jobLabels(env *petriv1.EphemeralEnvironment, subject, action string, gen int64) map[string]string {
	l := ownedLabels(env)
	l[contract.LabelComponent] = naming.LabelValue(subject)
	l[contract.LabelAction] = action
	l[contract.LabelGeneration] = strconv.FormatInt(gen, 10)
	return l
}

// create creates a deployer Job running as the environment's deployer
// identity; an existing Job of that name is the same work, adopted.
func (j jobRunner) create(ctx context.Context, env *petriv1.EphemeralEnvironment, name string, labels map[string]string, args []string, valuesSecret string) error {
	return j.createWithin(ctx, env, name, labels, args, valuesSecret, 0)
}

// createWithin is create for a Helm operation that may take as long
// as deadline (jobs.ReleaseDeadline); the Job's deadline is never shorter.
func (j jobRunner) createWithin(ctx context.Context, env *petriv1.EphemeralEnvironment, name string, labels map[string]string, args []string, valuesSecret string, deadline time.Duration) error {
	return objects.CreateJob(ctx, j.client, j.options, jobs.Spec{
		Name: name, Labels: labels, ActiveDeadline: deadline,
		Owner:          *metav1.NewControllerRef(env, petriv1.GroupVersion.WithKind("EphemeralEnvironment")),
		ServiceAccount: naming.DeployerServiceAccount(env.Name),
		Image:          j.options.DeployerImage,
		Command:        []string{jobs.DeployerEntrypoint},
		Args:           args,
		ValuesSecret:   valuesSecret,
		CASecret:       j.options.ChartCASecret,
	})
}
