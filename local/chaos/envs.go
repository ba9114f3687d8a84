package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/storage/driver"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/stack"
)

// LabelScenario marks the environments a scenario wrote directly.
const LabelScenario = "chaos.petri.dev/scenario"

// deployerRoleBinding is the RoleBinding the operator keeps in every
// workload namespace (controllers/internal/naming.DeployerRoleBinding).
const deployerRoleBinding = "petri-deployer"

// shape is what an environment deploys.
type shape int

const (
	// light: two components of the greeter chart with no replicas, web
	// depending on api: Helm work only, nothing runs.
	light shape = iota
	// waiting: like light, but web is the example application with one
	// replica and Helm waits for it to be ready, so its Helm operations last
	// long enough to be interrupted.
	waiting
)

func rawJSON(v any) *apiextensionsv1.JSON {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return &apiextensionsv1.JSON{Raw: b}
}

// newEnvironment is an environment written directly, the way any client of
// the API (not sync) writes one: the charts the deployer image carries.
func newEnvironment(name, scenario string, sh shape, revision int) *petriv1.EphemeralEnvironment {
	chart := petriv1.ChartReference{Repository: stack.DeployerCharts, Name: "greeter", Version: "0.1.0"}
	web := petriv1.Component{Name: "web", Chart: chart, DependsOn: []string{"api"},
		Values: rawJSON(map[string]any{"replicas": 0, "message": "web of " + name})}
	if sh == waiting {
		// The example application declares its port and a readiness probe,
		// so the local node runs it on a port of its own.
		web.Chart = petriv1.ChartReference{Repository: stack.DeployerCharts, Name: "example-app", Version: "0.1.0"}
		web.Values = rawJSON(map[string]any{"replicas": 1, "message": "web of " + name})
		web.Release = petriv1.ReleaseOptions{Timeout: &metav1.Duration{Duration: time.Minute}}
	}
	env := &petriv1.EphemeralEnvironment{
		ObjectMeta: metav1.ObjectMeta{Namespace: stack.ManagementNamespace, Name: name, Labels: map[string]string{LabelScenario: scenario}},
		Spec: petriv1.EphemeralEnvironmentSpec{
			Components: []petriv1.Component{
				{Name: "api", Chart: chart, Values: rawJSON(map[string]any{"replicas": 0, "message": "api of " + name})},
				web,
			},
		},
	}
	setRevision(env, revision)
	return env
}

// setRevision writes the revision into spec.values: a spec change that
// every component's release must carry.
func setRevision(env *petriv1.EphemeralEnvironment, revision int) {
	v := map[string]apiextensionsv1.JSON{}
	for _, c := range env.Spec.Components {
		v[c.Name] = *rawJSON(map[string]any{"revision": strconv.Itoa(revision)})
	}
	env.Spec.Values = v
}

// isTransient tells API errors worth retrying (the API server restarting,
// timeouts, throttling) from answers.
func isTransient(err error) bool {
	if err == nil {
		return false
	}
	switch {
	case apierrors.IsNotFound(err), apierrors.IsAlreadyExists(err), apierrors.IsConflict(err),
		apierrors.IsInvalid(err), apierrors.IsForbidden(err), apierrors.IsBadRequest(err):
		return false
	}
	return true
}

// retryAPI runs fn until it returns an answer that is not transient, for
// at most two minutes: the suite's own calls ride out API server restarts.
func retryAPI(ctx context.Context, fn func() error) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := fn()
		if !isTransient(err) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// getEnv reads an environment; nil when absent.
func (r *run) getEnv(ctx context.Context, name string) (*petriv1.EphemeralEnvironment, error) {
	env := &petriv1.EphemeralEnvironment{}
	err := retryAPI(ctx, func() error {
		return r.st.Client.Get(ctx, client.ObjectKey{Namespace: stack.ManagementNamespace, Name: name}, env)
	})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return env, nil
}

// create writes an environment.
func (r *run) create(ctx context.Context, env *petriv1.EphemeralEnvironment) error {
	err := retryAPI(ctx, func() error { return r.st.Client.Create(ctx, env.DeepCopy()) })
	if apierrors.IsAlreadyExists(err) {
		// A create whose answer was lost to a restart.
		err = nil
	}
	if err != nil {
		return fmt.Errorf("create environment %s: %w", env.Name, err)
	}
	return nil
}

// redeploy changes an environment's spec to a new revision.
func (r *run) redeploy(ctx context.Context, name string, revision int) error {
	err := retryAPI(ctx, func() error {
		env := &petriv1.EphemeralEnvironment{}
		if err := r.st.Client.Get(ctx, client.ObjectKey{Namespace: stack.ManagementNamespace, Name: name}, env); err != nil {
			return err
		}
		base := env.DeepCopy()
		setRevision(env, revision)
		return r.st.Client.Patch(ctx, env, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	})
	if apierrors.IsConflict(err) {
		return r.redeploy(ctx, name, revision)
	}
	if err != nil {
		return fmt.Errorf("redeploy environment %s: %w", name, err)
	}
	return nil
}

// remove deletes an environment as a user does, recording that first.
func (r *run) remove(ctx context.Context, name string) error {
	env, err := r.getEnv(ctx, name)
	if err != nil || env == nil {
		return err
	}
	r.rec.userDelete(env.UID)
	err = retryAPI(ctx, func() error {
		return r.st.Client.Delete(ctx, env, client.Preconditions{UID: &env.UID})
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete environment %s: %w", name, err)
	}
	return nil
}

// forceDelete sets the annotation that releases a stuck environment.
func (r *run) forceDelete(ctx context.Context, name string) error {
	return retryAPI(ctx, func() error {
		env := &petriv1.EphemeralEnvironment{}
		if err := r.st.Client.Get(ctx, client.ObjectKey{Namespace: stack.ManagementNamespace, Name: name}, env); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		}
		patch := client.MergeFrom(env.DeepCopy())
		if env.Annotations == nil {
			env.Annotations = map[string]string{}
		}
		env.Annotations[petriv1.AnnotationForceDelete] = "true"
		return r.st.Client.Patch(ctx, env, patch)
	})
}

// converged lists what keeps an environment from its spec; none when it is
// there. See Converges.
func (r *run) converged(ctx context.Context, name string) ([]string, error) {
	env, err := r.getEnv(ctx, name)
	if err != nil {
		return nil, err
	}
	if env == nil {
		return []string{"the environment does not exist"}, nil
	}
	var why []string
	if env.DeletionTimestamp != nil {
		why = append(why, "it is being deleted")
	}
	ready := meta.FindStatusCondition(env.Status.Conditions, petriv1.ConditionReady)
	switch {
	case env.Status.ObservedGeneration != env.Generation:
		why = append(why, fmt.Sprintf("generation %d observed %d", env.Generation, env.Status.ObservedGeneration))
	case ready == nil || ready.Status != metav1.ConditionTrue || ready.ObservedGeneration != env.Generation:
		msg := "Ready is not True for the current generation"
		if ready != nil {
			msg = fmt.Sprintf("Ready=%s (%s: %s)", ready.Status, ready.Reason, ready.Message)
		}
		why = append(why, msg)
	}
	nsName := env.Status.TargetNamespace
	if nsName == "" {
		return append(why, "no target namespace"), nil
	}
	// The namespace, its RoleBinding and its releases are in the cluster
	// the environment is placed in.
	cl, cs, err := r.clientsIn(env.Status.Cluster)
	if err != nil {
		return nil, err
	}
	ns := &corev1.Namespace{}
	if err := retryAPI(ctx, func() error { return cl.Get(ctx, client.ObjectKey{Name: nsName}, ns) }); err != nil {
		if apierrors.IsNotFound(err) {
			return append(why, "namespace "+nsName+" does not exist"), nil
		}
		return nil, err
	}
	if ns.DeletionTimestamp != nil {
		why = append(why, "namespace "+nsName+" is terminating")
	}
	if ns.Labels[petriv1.LabelEnvironmentUID] != string(env.UID) || ns.Annotations[petriv1.AnnotationEnvironmentUID] != string(env.UID) {
		why = append(why, "namespace "+nsName+" lacks the environment's ownership marks")
	}
	rb := &rbacv1.RoleBinding{}
	if err := retryAPI(ctx, func() error {
		return cl.Get(ctx, client.ObjectKey{Namespace: nsName, Name: deployerRoleBinding}, rb)
	}); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, err
		}
		why = append(why, "RoleBinding "+deployerRoleBinding+" is missing in "+nsName)
	}
	for _, c := range env.Spec.Components {
		problem, err := r.releaseProblem(ctx, cs, nsName, env, c)
		if err != nil {
			return nil, err
		}
		if problem != "" {
			why = append(why, problem)
		}
	}
	return why, nil
}

// releaseProblem compares a component's Helm release with the spec.
func (r *run) releaseProblem(ctx context.Context, cs kubernetes.Interface, ns string, env *petriv1.EphemeralEnvironment, c petriv1.Component) (string, error) {
	rel, err := latestReleaseIn(ctx, cs, ns, c.Name)
	if err != nil {
		return "", err
	}
	if rel == nil {
		return fmt.Sprintf("release %s/%s does not exist", ns, c.Name), nil
	}
	if rel.Info == nil || rel.Info.Status != release.StatusDeployed {
		st := release.Status("unknown")
		if rel.Info != nil {
			st = rel.Info.Status
		}
		return fmt.Sprintf("release %s/%s revision %d is %s", ns, c.Name, rel.Version, st), nil
	}
	if rel.Chart == nil || rel.Chart.Metadata == nil || rel.Chart.Metadata.Name != c.Chart.Name || rel.Chart.Metadata.Version != c.Chart.Version {
		return fmt.Sprintf("release %s/%s runs another chart", ns, c.Name), nil
	}
	want, err := mergedValues(c.Values, env.Spec.Values[c.Name])
	if err != nil {
		return "", err
	}
	if !sameJSON(want, rel.Config) {
		got, _ := json.Marshal(rel.Config)
		w, _ := json.Marshal(want)
		return fmt.Sprintf("release %s/%s revision %d has values %s, the spec says %s", ns, c.Name, rel.Version, got, w), nil
	}
	return "", nil
}

// latestRelease reads a release's newest record from Helm's storage in
// the management cluster.
func (r *run) latestRelease(ctx context.Context, ns, name string) (*release.Release, error) {
	return latestReleaseIn(ctx, r.st.Cluster.Clientset, ns, name)
}

// latestReleaseIn reads a release's newest record from Helm's storage in
// the cluster of cs.
func latestReleaseIn(ctx context.Context, cs kubernetes.Interface, ns, name string) (*release.Release, error) {
	d := driver.NewSecrets(cs.CoreV1().Secrets(ns))
	var rels []*release.Release
	err := retryAPI(ctx, func() error {
		var err error
		rels, err = d.Query(map[string]string{"name": name, "owner": "helm"})
		if errors.Is(err, driver.ErrReleaseNotFound) {
			rels, err = nil, nil
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read release %s/%s: %w", ns, name, err)
	}
	sort.Slice(rels, func(i, j int) bool { return rels[i].Version > rels[j].Version })
	if len(rels) == 0 {
		return nil, nil
	}
	return rels[0], nil
}

// mergedValues is what the operator hands Helm: the component's values
// with the environment's values for it merged over them.
func mergedValues(base *apiextensionsv1.JSON, over apiextensionsv1.JSON) (map[string]any, error) {
	b, o := map[string]any{}, map[string]any{}
	if base != nil && len(base.Raw) > 0 {
		if err := json.Unmarshal(base.Raw, &b); err != nil {
			return nil, err
		}
	}
	if len(over.Raw) > 0 {
		if err := json.Unmarshal(over.Raw, &o); err != nil {
			return nil, err
		}
	}
	return deepMerge(b, o), nil
}

func deepMerge(base, over map[string]any) map[string]any {
	out := make(map[string]any, len(base)+len(over))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		if bm, ok := out[k].(map[string]any); ok {
			if om, ok := v.(map[string]any); ok {
				out[k] = deepMerge(bm, om)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// sameJSON compares two values as their JSON documents.
func sameJSON(a, b any) bool {
	norm := func(v any) any {
		raw, err := json.Marshal(v)
		if err != nil {
			return nil
		}
		var out any
		_ = json.Unmarshal(raw, &out)
		if m, ok := out.(map[string]any); ok && len(m) == 0 {
			return nil
		}
		return out
	}
	return reflect.DeepEqual(norm(a), norm(b))
}

// gone lists what is left of an environment that should be gone: the
// object, and its namespace unless the suite made that name its own.
func (r *run) gone(ctx context.Context, name string) ([]string, error) {
	var why []string
	env, err := r.getEnv(ctx, name)
	if err != nil {
		return nil, err
	}
	rec := r.rec.environment(name)
	if env != nil && (rec == nil || env.UID == rec.uid) {
		msg := "the environment still exists"
		if env.DeletionTimestamp == nil {
			msg += " and is not being deleted"
		}
		why = append(why, msg)
	}
	if rec != nil {
		cl, _, err := r.clientsIn(r.rec.clusterOf(rec))
		if err != nil {
			return nil, err
		}
		for _, t := range rec.targets {
			ns := &corev1.Namespace{}
			err := retryAPI(ctx, func() error { return cl.Get(ctx, client.ObjectKey{Name: t}, ns) })
			switch {
			case apierrors.IsNotFound(err):
			case err != nil:
				return nil, err
			case r.isForeign(t, ns.UID):
			default:
				why = append(why, "namespace "+t+" still exists")
			}
		}
	}
	return why, nil
}

func (r *run) isForeign(name string, uid types.UID) bool {
	r.rec.mu.Lock()
	defer r.rec.mu.Unlock()
	return r.rec.isForeignLocked(name, uid)
}

// explain describes an environment for a violation's detail.
func (r *run) explain(ctx context.Context, name string) string {
	env, err := r.getEnv(ctx, name)
	if err != nil || env == nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "phase %q, generation %d observed %d, namespace %q", env.Status.Phase, env.Generation, env.Status.ObservedGeneration, env.Status.TargetNamespace)
	for _, c := range env.Status.Conditions {
		if c.Status == metav1.ConditionTrue && c.Type != petriv1.ConditionStalled && c.Type != petriv1.ConditionReconciling {
			continue
		}
		fmt.Fprintf(&b, "; %s=%s %s: %s", c.Type, c.Status, c.Reason, oneLine(c.Message))
	}
	for _, c := range env.Status.Components {
		fmt.Fprintf(&b, "; component %s %s (job %s)", c.Name, c.Phase, c.Job)
		if c.LastError != "" {
			fmt.Fprintf(&b, " error: %s", oneLine(c.LastError))
		}
	}
	return b.String()
}

func oneLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}
