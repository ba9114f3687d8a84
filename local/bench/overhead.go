package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/api/contract"
	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/internal/benchkit"
)

// floorNamespace holds the floor's objects, where the operator does not
// look (it watches the management namespace only).
const floorNamespace = "petri-bench-floor"

// OverheadResult compares the operator's create-to-Ready of one environment
// in no-op mode with the floor: the same API writes issued by a plain
// client, with the same Jobs completed by the same Job controller and node.
type OverheadResult struct {
	Operator Dist
	Floor    Dist
	// Ratio is the operator's median over the floor's.
	Ratio float64
	// Teardown is the operator's delete-to-gone of the same environments.
	Teardown Dist
	// FloorWrites lists the writes of one floor run.
	FloorWrites int
	LoadBefore  string
	LoadAfter   string
}

// overhead alternates runs of the operator (no-op mode) and of the floor so
// that both see the same machine.
func (e *env) overhead(ctx context.Context, runs, concurrency int) (res OverheadResult, err error) {
	res.LoadBefore = benchkit.LoadAverage()
	op, err := e.startOperator(ctx, "overhead", NoopDeployerImage, concurrency)
	if err != nil {
		return res, err
	}
	defer op.stop()
	c := e.cluster.Client
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	envs := trackEnvironments(tctx, c, managementNamespace)
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: floorNamespace, Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return res, err
	}
	floorJobs := trackJobs(tctx, c, floorNamespace)

	var opTimes, floorTimes, teardown []time.Duration
	var template *batchv1.Job
	for i := range runs {
		name := fmt.Sprintf("overhead-%03d", i)
		envs.forget([]string{name})
		start := time.Now()
		if err := c.Create(ctx, benchEnvironment(managementNamespace, name)); err != nil {
			return res, fmt.Errorf("create %s: %w", name, err)
		}
		at, _, err := envs.waitAll(ctx, []string{name}, false, 2*time.Minute)
		if err != nil {
			return res, fmt.Errorf("operator run %d: %w", i, err)
		}
		opTimes = append(opTimes, at[name].Sub(start))
		if template == nil {
			if template, err = e.deployJob(ctx, name, "db"); err != nil {
				return res, err
			}
		}
		start = time.Now()
		if err := c.Delete(ctx, &petriv1.EphemeralEnvironment{ObjectMeta: metav1.ObjectMeta{Namespace: managementNamespace, Name: name}}); err != nil {
			return res, err
		}
		gone, _, err := envs.waitAll(ctx, []string{name}, true, 2*time.Minute)
		if err != nil {
			return res, fmt.Errorf("operator run %d teardown: %w", i, err)
		}
		teardown = append(teardown, gone[name].Sub(start))

		d, writes, err := e.floorRun(ctx, floorJobs, template, i)
		if err != nil {
			return res, fmt.Errorf("floor run %d: %w", i, err)
		}
		floorTimes = append(floorTimes, d)
		res.FloorWrites = writes
	}
	res.Operator, res.Floor, res.Teardown = benchkit.DistOf(opTimes), benchkit.DistOf(floorTimes), benchkit.DistOf(teardown)
	if res.Floor.Median > 0 {
		res.Ratio = float64(res.Operator.Median) / float64(res.Floor.Median)
	}
	res.LoadAfter = benchkit.LoadAverage()
	return res, nil
}

// deployJob returns the deploy Job the operator created for a component.
func (e *env) deployJob(ctx context.Context, envName, component string) (*batchv1.Job, error) {
	var jobs batchv1.JobList
	if err := e.cluster.Client.List(ctx, &jobs, client.InNamespace(managementNamespace), client.MatchingLabels{
		petriv1.LabelEnvironment: envName, "petri.dev/component": component, "petri.dev/action": "deploy",
	}); err != nil {
		return nil, err
	}
	if len(jobs.Items) == 0 {
		return nil, fmt.Errorf("no deploy job of %s/%s found to copy for the floor", envName, component)
	}
	return &jobs.Items[0], nil
}

// floorRun issues, as a plain client, the writes the operator makes for one
// environment (floorCreate), then removes them outside the measurement. It
// returns the time taken and the writes issued.
func (e *env) floorRun(ctx context.Context, jobs *jobTracker, template *batchv1.Job, i int) (time.Duration, int, error) {
	name := fmt.Sprintf("floor-%03d", i)
	took, writes, err := floorCreate(ctx, e.cluster.Client, jobs, template, name, 2*time.Minute, false)
	if err != nil {
		return 0, 0, err
	}
	if err := floorDelete(ctx, e.cluster.Client, name); err != nil {
		return 0, 0, err
	}
	return took, writes, e.waitNamespaceGone(ctx, name+"-ws")
}

// floorCreate issues the writes the operator makes for one environment:
// the environment itself, its namespace, deployer ServiceAccount and
// RoleBinding, a values Secret and a Job per component in dependency order
// (db and web at once, api after db), each Job completed by the Job
// controller and the local node as the operator's are, and one status
// write. With design, also the writes the design adds (designWrites). It
// returns the time taken and the writes issued.
func floorCreate(ctx context.Context, c client.Client, jobs *jobTracker, template *batchv1.Job, name string, timeout time.Duration, design bool) (time.Duration, int, error) {
	ws := name + "-ws"
	sa := "petri-deployer-" + name
	writes := 0
	d := designWrites{on: design, c: c, writes: &writes}
	create := func(o client.Object) error {
		writes++
		if err := c.Create(ctx, o); err != nil {
			return fmt.Errorf("create %T %s: %w", o, o.GetName(), err)
		}
		return nil
	}
	component := func(comp string) (string, error) {
		secret := name + "-values-" + comp
		if err := create(&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: floorNamespace, Name: secret},
			Immutable:  ptr.To(true),
			Data:       map[string][]byte{"values.yaml": []byte("replicas: 0\n")},
		}); err != nil {
			return "", err
		}
		job := floorJob(template, name, comp, sa, secret)
		return job.Name, create(job)
	}

	start := time.Now()
	ee := benchEnvironment(floorNamespace, name)
	if err := create(ee); err != nil {
		return 0, 0, err
	}
	d.ee = ee
	if err := d.begin(ctx, ws); err != nil {
		return 0, 0, err
	}
	if err := create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ws}}); err != nil {
		return 0, 0, err
	}
	if err := create(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: floorNamespace, Name: sa}}); err != nil {
		return 0, 0, err
	}
	if err := create(&rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "petri-deployer"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: floorNamespace, Name: sa}},
	}); err != nil {
		return 0, 0, err
	}
	if err := d.authorized(ctx, ws, sa); err != nil {
		return 0, 0, err
	}
	db, err := component("db")
	if err != nil {
		return 0, 0, err
	}
	web, err := component("web")
	if err != nil {
		return 0, 0, err
	}
	if err := d.step(ctx, "db and web deploying"); err != nil {
		return 0, 0, err
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := jobs.wait(wctx, db); err != nil {
		return 0, 0, err
	}
	api, err := component("api")
	if err != nil {
		return 0, 0, err
	}
	if err := d.step(ctx, "api deploying"); err != nil {
		return 0, 0, err
	}
	if err := jobs.wait(wctx, web, api); err != nil {
		return 0, 0, err
	}
	base := ee.DeepCopy()
	apimeta.SetStatusCondition(&ee.Status.Conditions, metav1.Condition{Type: petriv1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Succeeded", Message: "floor", ObservedGeneration: ee.Generation})
	writes++
	if err := c.Status().Patch(ctx, ee, client.MergeFrom(base)); err != nil {
		return 0, 0, fmt.Errorf("status of %s: %w", name, err)
	}
	if err := d.event(ctx, "Ready"); err != nil {
		return 0, 0, err
	}
	return time.Since(start), writes, nil
}

// floorDelete deletes what floorCreate made for name; the namespace goes
// on terminating after it returns.
func floorDelete(ctx context.Context, c client.Client, name string) error {
	var errs []error
	bg := client.PropagationPolicy(metav1.DeletePropagationBackground)
	objs := []client.Object{
		&petriv1.EphemeralEnvironment{ObjectMeta: metav1.ObjectMeta{Namespace: floorNamespace, Name: name}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name + "-ws"}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: floorNamespace, Name: "petri-deployer-" + name}},
	}
	for _, comp := range []string{"db", "api", "web"} {
		objs = append(objs,
			&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: floorNamespace, Name: name + "-deploy-" + comp}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: floorNamespace, Name: name + "-values-" + comp}})
	}
	// The design's floor put a finalizer on the environment.
	if err := c.Patch(ctx, objs[0], client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, err)
	}
	for _, o := range objs {
		if err := c.Delete(ctx, o, bg); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// floorJob is the operator's deploy Job, renamed, in the floor namespace,
// running as the floor's identity with the floor's values Secret.
func floorJob(template *batchv1.Job, env, component, serviceAccount, secret string) *batchv1.Job {
	// Labelled as the operator labels its deploy Jobs, so that the same
	// watches time both runs' stages (stageTracker).
	labels := func() map[string]string {
		return map[string]string{"petri.dev/bench-floor": "true", petriv1.LabelEnvironment: env, contract.LabelComponent: component, contract.LabelAction: contract.ActionDeploy}
	}
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: floorNamespace, Name: env + "-deploy-" + component, Labels: labels()}}
	j.Spec = *template.Spec.DeepCopy()
	j.Spec.Selector, j.Spec.ManualSelector = nil, nil
	j.Spec.Template.Labels = labels()
	j.Spec.Template.Spec.ServiceAccountName = serviceAccount
	for i := range j.Spec.Template.Spec.Volumes {
		if s := j.Spec.Template.Spec.Volumes[i].Secret; s != nil {
			s.SecretName = secret
		}
	}
	return j
}

func (e *env) waitNamespaceGone(ctx context.Context, name string) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := e.cluster.Client.Get(ctx, client.ObjectKey{Name: name}, &corev1.Namespace{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("namespace %s not gone within 2m", name)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
