package controllers

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/petri-dev/petri/api/contract"
	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/binding"
	"github.com/petri-dev/petri/controllers/internal/jobs"
	"github.com/petri-dev/petri/controllers/internal/jobwatch"
	"github.com/petri-dev/petri/controllers/internal/naming"
	"github.com/petri-dev/petri/controllers/internal/objects"
	"github.com/petri-dev/petri/controllers/internal/shared"
)

// A binding is staged once per environment and shared workload: the
// rendered binding keys and the keys generated for this binding (the
// environment's own credentials, never an instance key) go into an immutable
// Secret in the management namespace. The bind Job (running as the
// environment's deployer identity) copies it into the workload namespace as
// the binding Secret; the provision Job and, at teardown, the deprovision Job
// read the same immutable staged Secret (a pod reads only Secrets of its own
// namespace), and the shared workload's instance Secret beside it. All three
// therefore see the same bytes, however many environments come and go in
// between, and the instance keys never reach an environment's namespace.

// bindingSecretName is the binding Secret in the workload namespace.
func bindingSecretName(sw string) string { return naming.Bounded(253, "petri-binding", sw) }

// bindingStaging is the immutable staged copy in the management namespace.
func bindingStaging(env *petriv1.EphemeralEnvironment, sw string) string {
	return jobs.EnvironmentKey(env, "binding", sw, 1).Name()
}

// A binding run again because the environment's namespace was replaced has
// the recovery it belongs to (bs.Recovery) in its Jobs' names as well.

func bindJob(env *petriv1.EphemeralEnvironment, bs *petriv1.BindingStatus) string {
	return jobs.BindingKey(env, bs, contract.ActionBind).Name()
}

func provisionJob(env *petriv1.EphemeralEnvironment, bs *petriv1.BindingStatus) string {
	return jobs.BindingKey(env, bs, contract.ActionProvision).Name()
}

func deprovisionJob(env *petriv1.EphemeralEnvironment, bs *petriv1.BindingStatus, attempt int32) string {
	key := jobs.BindingKey(env, bs, contract.ActionDeprovision)
	key.Attempt = attempt
	return key.Name()
}

func bindingStatus(env *petriv1.EphemeralEnvironment, name string) *petriv1.BindingStatus {
	for i := range env.Status.SharedWorkloads {
		if env.Status.SharedWorkloads[i].Name == name {
			return &env.Status.SharedWorkloads[i]
		}
	}
	env.Status.SharedWorkloads = append(env.Status.SharedWorkloads, petriv1.BindingStatus{Name: name, Phase: petriv1.ComponentPending, Generation: env.Generation})
	return &env.Status.SharedWorkloads[len(env.Status.SharedWorkloads)-1]
}

// bindingBlocker names what keeps a component from starting because of the
// shared workloads it uses, and whether that can no longer change in this
// generation (the binding failed).
func bindingBlocker(env *petriv1.EphemeralEnvironment, component string) (string, bool) {
	c := findComponent(env, component)
	for _, u := range c.Uses {
		var bs *petriv1.BindingStatus
		for i := range env.Status.SharedWorkloads {
			if env.Status.SharedWorkloads[i].Name == u {
				bs = &env.Status.SharedWorkloads[i]
			}
		}
		switch {
		case bs != nil && bs.Phase == petriv1.ComponentFailed:
			return fmt.Sprintf("blocked: shared workload %s failed to bind: %s", u, bs.LastError), true
		case bs == nil || bs.Phase != petriv1.ComponentDeployed:
			return "waiting for shared workload " + u + " to be provisioned", false
		}
	}
	return "", false
}

// sharedBindings binds an environment to the shared workloads it lists:
// it stages each binding, runs its bind and provision Jobs, and sends a
// binding back when its shared workload was deployed again.
type sharedBindings struct {
	client    client.Client
	apiReader client.Reader
	recorder  events.EventRecorder
	options   Options
	jobs      jobRunner
	teardowns teardownSteps
}

// bindings hands the bind shared workloads step the reconciler's parts it
// needs.
func (r *EphemeralEnvironmentReconciler) bindings() sharedBindings {
	return sharedBindings{
		client: r.Client, apiReader: r.APIReader, recorder: r.Recorder, options: r.Options,
		jobs: r.jobs(), teardowns: r.teardowns(),
	}
}

// bind binds the environment to each shared workload it lists: stage the
// binding, copy it into the workload namespace, then provision. Components
// that use a binding start only once it is provisioned. A binding whose
// shared workload left the spec is deprovisioned (as at teardown) before it
// is forgotten; until then SharedWorkloadsBound is False.
func (sb sharedBindings) bind(ctx context.Context, env *petriv1.EphemeralEnvironment, p *pass) error {
	removing, err := sb.teardowns.unbindRemoved(ctx, env, p)
	if err != nil {
		return err
	}
	if len(env.Spec.SharedWorkloads) == 0 && len(env.Status.SharedWorkloads) == 0 {
		env.Status.SharedWorkloads = nil
		apimeta.RemoveStatusCondition(&env.Status.Conditions, petriv1.ConditionSharedWorkloadsBound)
		return nil
	}
	waiting, failed := removing, []string(nil)
	for _, name := range env.Spec.SharedWorkloads {
		bs := bindingStatus(env, name)
		if bs.Phase == petriv1.ComponentUndeploying || bs.Phase == petriv1.ComponentUndeployed {
			// Removed earlier and listed again: the removal's deprovision
			// finishes first, then the binding starts anew.
			done, msg, err := sb.teardowns.deprovisionRemoved(ctx, env, bs, p)
			if err != nil {
				return err
			}
			if !done {
				waiting = append(waiting, msg)
				continue
			}
			*bs = petriv1.BindingStatus{Name: name, Phase: petriv1.ComponentPending, Generation: env.Generation}
		}
		if bs.Phase == petriv1.ComponentDeployed && !sb.reprovisionDue(ctx, env, bs) {
			continue
		}
		if bs.Phase == petriv1.ComponentFailed && jobs.BindingEpoch(bs) < env.Generation {
			// A new generation binds anew what failed before (the shared
			// workload or its step may have been fixed since): Jobs of
			// its own, named by the new epoch.
			*bs = petriv1.BindingStatus{Name: name, Phase: petriv1.ComponentPending, Generation: env.Generation, Recovery: bs.Recovery}
		}
		if bs.Phase == petriv1.ComponentFailed {
			failed = append(failed, fmt.Sprintf("%s (%s)", name, bs.LastError))
			continue
		}
		sw, wait, err := sb.sharedWorkloadToBind(ctx, env, name, p)
		if err != nil || p.stop {
			return err
		}
		if wait != "" {
			bs.Message = wait
			waiting = append(waiting, name)
			continue
		}
		if err := sb.advance(ctx, env, sw, bs, p); err != nil {
			return err
		}
		if p.stop {
			return nil
		}
		switch bs.Phase {
		case petriv1.ComponentFailed:
			failed = append(failed, fmt.Sprintf("%s (%s)", name, bs.LastError))
		case petriv1.ComponentDeployed:
		default:
			waiting = append(waiting, name)
		}
	}
	switch {
	case len(waiting) > 0:
		setCondition(env, petriv1.ConditionSharedWorkloadsBound, metav1.ConditionFalse, petriv1.ReasonBindProgressing, "binding: "+strings.Join(waiting, ", "))
	case len(env.Spec.SharedWorkloads) == 0:
		// The last removed binding is deprovisioned; nothing is listed.
		apimeta.RemoveStatusCondition(&env.Status.Conditions, petriv1.ConditionSharedWorkloadsBound)
	case len(failed) > 0:
		setCondition(env, petriv1.ConditionSharedWorkloadsBound, metav1.ConditionFalse, petriv1.ReasonBindFailed, "failed: "+strings.Join(failed, "; "))
	default:
		setCondition(env, petriv1.ConditionSharedWorkloadsBound, metav1.ConditionTrue, petriv1.ReasonBindSucceeded, fmt.Sprintf("%d shared workloads bound", len(env.Spec.SharedWorkloads)))
	}
	return nil
}

// advance moves one binding one step.
func (sb sharedBindings) advance(ctx context.Context, env *petriv1.EphemeralEnvironment, sw *petriv1.SharedWorkload, bs *petriv1.BindingStatus, p *pass) error {
	if bs.Phase == petriv1.ComponentPending {
		return sb.start(ctx, env, sw, bs, p)
	}
	st, err := sb.jobs.observeLive(ctx, p, bs.Job)
	if err != nil {
		return err
	}
	step := contract.ActionProvision
	if bs.Job == bindJob(env, bs) {
		step = contract.ActionBind
	}
	if !st.Exists {
		// Gone before its outcome was seen (deleted by hand, or removed by
		// its TTL while the operator was down): nothing will ever report
		// it, so the step runs again. Both are idempotent: the binding
		// Secret is written once, provision steps must tolerate a database
		// that exists.
		log.FromContext(ctx).Info("Job is gone before its outcome was seen, running the step again", "job", bs.Job, "sharedWorkload", shared.ReleaseName(sw), "step", step)
		sb.recorder.Eventf(env, nil, corev1.EventTypeWarning, petriv1.ReasonBindProgressing, "Bind", "%s of shared workload %s: job %s is gone before its outcome was seen; running it again", step, shared.ReleaseName(sw), bs.Job)
		switch {
		case step == contract.ActionBind:
			return sb.start(ctx, env, sw, bs, p)
		case sw.Spec.Provision == nil:
			// No longer provisioned at all: bound.
			bs.Phase, bs.Message = petriv1.ComponentDeployed, ""
			return nil
		}
		return sb.jobs.createStep(ctx, env, sw, bs.Job, contract.ActionProvision, sw.Spec.Provision, jobs.BindingEpoch(bs))
	}
	if !st.Done {
		return nil
	}
	if !st.Succeeded {
		bs.Phase, bs.FinishedAt, bs.LastError = petriv1.ComponentFailed, st.Finished, jobs.OneLine(st.Message)
		jobwatch.Record(step, st)
		sb.recorder.Eventf(env, nil, corev1.EventTypeWarning, petriv1.ReasonBindFailed, "Bind", "%s of shared workload %s failed: %s", step, shared.ReleaseName(sw), bs.LastError)
		return nil
	}
	if step == contract.ActionProvision {
		bs.Phase, bs.FinishedAt, bs.Message = petriv1.ComponentDeployed, st.Finished, ""
		jobwatch.Record(step, st)
		sb.recorder.Eventf(env, nil, corev1.EventTypeNormal, petriv1.ReasonBindSucceeded, "Bind", "shared workload %s provisioned by job %s", shared.ReleaseName(sw), bs.Job)
		return nil
	}
	if sw.Spec.Provision == nil {
		bs.Phase, bs.FinishedAt, bs.Message = petriv1.ComponentDeployed, st.Finished, ""
		sb.recorder.Eventf(env, nil, corev1.EventTypeNormal, petriv1.ReasonBindSucceeded, "Bind", "shared workload %s bound", shared.ReleaseName(sw))
		return nil
	}
	if !apimeta.IsStatusConditionTrue(sw.Status.Conditions, petriv1.ConditionReady) {
		if c := apimeta.FindStatusCondition(sw.Status.Conditions, petriv1.ConditionStalled); c != nil && c.Status == metav1.ConditionTrue {
			// Its deploy is final: nothing changes until its spec does
			// (its watch brings the environment back then).
			p.stalled(petriv1.ReasonBindFailed, fmt.Sprintf("shared workload %s is %s and not retried: %s", shared.ReleaseName(sw), c.Reason, c.Message))
			return nil
		}
		bs.Message = "waiting for shared workload " + shared.ReleaseName(sw) + " to be ready before provisioning"
		return nil
	}
	bs.SharedRecovery = sw.Status.Recoveries
	name := provisionJob(env, bs)
	if err := sb.jobs.createStep(ctx, env, sw, name, contract.ActionProvision, sw.Spec.Provision, jobs.BindingEpoch(bs)); err != nil {
		return err
	}
	now := sb.options.MetaNow()
	bs.Job, bs.Attempt, bs.StartedAt, bs.Message = name, 1, &now, "provisioning"
	log.FromContext(ctx).Info("Started provision job", "sharedWorkload", shared.ReleaseName(sw), "job", name)
	return nil
}

// start stages the binding and starts the Job that writes the binding
// Secret into the workload namespace.
func (sb sharedBindings) start(ctx context.Context, env *petriv1.EphemeralEnvironment, sw *petriv1.SharedWorkload, bs *petriv1.BindingStatus, p *pass) error {
	rendered, err := binding.Render(sw.Spec.Binding, binding.Data{
		Environment:     env.Name,
		Namespace:       env.Status.TargetNamespace,
		SharedNamespace: sb.options.SharedNamespace,
		Hash:            naming.UIDHash(env.UID)[:8],
	})
	if err != nil {
		p.stalled(petriv1.ReasonInvalidSpec, fmt.Sprintf("shared workload %s: %v", shared.ReleaseName(sw), err))
		return nil
	}
	labels := jobLabels(env, shared.ReleaseName(sw), contract.ActionBind, jobs.BindingEpoch(bs))
	staged, err := sb.stage(ctx, env, sw, rendered, labels)
	if err != nil {
		return err
	}
	name := bindJob(env, bs)
	args := []string{"write-secret",
		"--namespace", env.Status.TargetNamespace,
		"--name", bindingSecretName(shared.ReleaseName(sw)),
		"--from-dir", jobs.ValuesDir,
		"--termination-log", jobs.TerminationLogPath,
	}
	if err := sb.jobs.create(ctx, env, name, labels, args, staged); err != nil {
		return err
	}
	now := sb.options.MetaNow()
	bs.Phase, bs.Job, bs.Secret, bs.Attempt, bs.StartedAt, bs.Message = petriv1.ComponentDeploying, name, bindingSecretName(shared.ReleaseName(sw)), 1, &now, "writing the binding Secret"
	return nil
}

// stage writes the environment's staged binding, the immutable Secret
// in the management namespace that the bind Job copies into the workload
// namespace and the provision and deprovision Jobs mount: the rendered keys
// and the keys generated for this binding (binding.Stage), never an instance
// key. A staged binding that holds exactly those keys is kept as it is, so
// the values its provision step used never change; one staged by an earlier
// version (with the instance keys) or lacking a key the spec lists now is
// replaced, keeping the values it has. It returns the Secret's name.
func (sb sharedBindings) stage(ctx context.Context, env *petriv1.EphemeralEnvironment, sw *petriv1.SharedWorkload, rendered map[string]string, labels map[string]string) (string, error) {
	key := client.ObjectKey{Namespace: env.Namespace, Name: bindingStaging(env, shared.ReleaseName(sw))}
	var generated []string
	length := 32
	if g := sw.Spec.BindingSecret; g != nil {
		generated = g.Keys
		if g.Length > 0 {
			length = int(g.Length)
		}
	}
	// Read from the API server: a Secret staged a moment ago is seen.
	cur := &corev1.Secret{}
	var existing map[string][]byte
	switch err := sb.apiReader.Get(ctx, key, cur); {
	case apierrors.IsNotFound(err):
		cur = nil
	case err != nil:
		return "", fmt.Errorf("get staged binding of %s: %w", shared.ReleaseName(sw), err)
	default:
		existing = cur.Data
		if existing == nil {
			existing = map[string][]byte{}
		}
	}
	data, changed, err := binding.Stage(existing, rendered, generated, length)
	if err != nil {
		return "", fmt.Errorf("stage binding of %s: %w", shared.ReleaseName(sw), err)
	}
	if !changed {
		return key.Name, nil
	}
	if cur != nil {
		// Immutable: replaced by a new Secret. Only the key names are
		// logged, never a value.
		log.FromContext(ctx).Info("Staging the binding again without the keys that are not the environment's own", "sharedWorkload", shared.ReleaseName(sw), "secret", key.Name, "keys", slices.Sorted(maps.Keys(data)))
		err := sb.client.Delete(ctx, cur, client.Preconditions{UID: &cur.UID, ResourceVersion: &cur.ResourceVersion})
		if err != nil && !apierrors.IsNotFound(err) {
			return "", fmt.Errorf("replace staged binding of %s: %w", shared.ReleaseName(sw), err)
		}
	}
	staged := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: labels},
		Immutable:  ptrTo(true),
		Data:       data,
	}
	if err := controllerutil.SetControllerReference(env, staged, sb.client.Scheme()); err != nil {
		return "", err
	}
	// A binding is written once: a Secret created since it was read wins
	// if it holds the same keys, and is looked at again otherwise.
	if err := sb.client.Create(ctx, staged); err != nil {
		if apierrors.IsAlreadyExists(err) && cur == nil {
			return sb.stage(ctx, env, sw, rendered, labels)
		}
		return "", fmt.Errorf("stage binding of %s: %w", shared.ReleaseName(sw), err)
	}
	return key.Name, nil
}

// createStep runs a shared workload's provision or deprovision container
// as the environment's deployer identity, with the staged binding's keys in
// its environment and as files under the values directory, and the shared
// workload's instance keys in its environment and under the instance
// directory. The instance keys reach these Jobs only, in the management
// namespace; the bind Job copies the staged binding alone. A binding's key
// wins over an instance key of the same name.
func (j jobRunner) createStep(ctx context.Context, env *petriv1.EphemeralEnvironment, sw *petriv1.SharedWorkload, name, action string, tmpl *petriv1.ContainerTemplate, epoch int64) error {
	staged := bindingStaging(env, shared.ReleaseName(sw))
	var instance string
	var envFrom []corev1.EnvFromSource
	if sw.Spec.InstanceSecret != nil {
		if _, err := shared.EnsureInstanceSecret(ctx, j.client, j.apiReader, j.client.Scheme(), sw); err != nil {
			return fmt.Errorf("shared workload %s: %w", shared.ReleaseName(sw), err)
		}
		instance = shared.InstanceSecretName(sw)
		envFrom = append(envFrom, corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: instance}}})
	}
	envFrom = append(envFrom, corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: staged}}})
	envVars := append([]corev1.EnvVar{
		{Name: "PETRI_ENVIRONMENT", Value: env.Name},
		{Name: "PETRI_NAMESPACE", Value: env.Status.TargetNamespace},
		{Name: "PETRI_SHARED_WORKLOAD", Value: shared.ReleaseName(sw)},
		{Name: "PETRI_ACTION", Value: action},
	}, tmpl.Env...)
	return objects.CreateJob(ctx, j.client, j.options, jobs.Spec{
		Name:           name,
		Labels:         jobLabels(env, shared.ReleaseName(sw), action, epoch),
		Owner:          *metav1.NewControllerRef(env, petriv1.GroupVersion.WithKind("EphemeralEnvironment")),
		ServiceAccount: naming.DeployerServiceAccount(env.Name),
		Image:          tmpl.Image,
		Command:        tmpl.Command,
		Args:           tmpl.Args,
		Env:            envVars,
		EnvFrom:        envFrom,
		ValuesSecret:   staged,
		InstanceSecret: instance,
	})
}

// reprovisionDue reports whether a provisioned binding's shared workload was
// lost and deployed again since its provision step ran (what the step made
// went with it), and if so sends the binding back to the step before
// provisioning: its bind Job, finished, is followed by a new provision Job
// once the shared workload is Ready. A shared workload that cannot be read
// changes nothing here; the binding's own steps report it.
func (sb sharedBindings) reprovisionDue(ctx context.Context, env *petriv1.EphemeralEnvironment, bs *petriv1.BindingStatus) bool {
	sw := &petriv1.SharedWorkload{}
	if err := sb.client.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: sharedWorkloadIn(env, bs.Name)}, sw); err != nil {
		return false
	}
	if sw.Spec.Provision == nil || sw.Status.Recoveries <= bs.SharedRecovery {
		return false
	}
	log.FromContext(ctx).Info("Shared workload was deployed again, provisioning the binding again", "sharedWorkload", shared.ReleaseName(sw), "recoveries", sw.Status.Recoveries)
	bs.Phase, bs.Job, bs.Message = petriv1.ComponentDeploying, bindJob(env, bs), "shared workload deployed again; provisioning again"
	return true
}
