// Package security proves Petri's least-privilege rules with the real API
// server: config/default (RBAC and the admission fences of config/fences) is
// installed on the local control plane, and every identity Petri runs as asks
// for what it must be able to do and for what it must never do. The answer is
// the API server's own (authorization, then admission), never can-i.
//
// The table of outcomes is docs/security.md's; PETRI_UPDATE_DOCS=1 (make
// security-docs) rewrites it there, and the test fails when the two differ.
package security_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers"
	"github.com/petri-dev/petri/local/controlplane"
)

const (
	mgmtNS   = "petri-system"
	sharedNS = "petri-shared"
	syncNS   = "petri-sync"

	// workloadNS is a namespace as the operator makes it for the
	// environment web-pr-1; otherWorkloadNS is another environment's.
	workloadNS      = "web-pr-1-ab12"
	otherWorkloadNS = "web-pr-2-cd34"
	deployerSA      = "petri-deployer-web-pr-1"
	otherDeployerSA = "petri-deployer-web-pr-2"
	// dottedEnv's name is not a DNS label: its deployer identity is its
	// readable part and a hash of the name (naming.DeployerServiceAccount),
	// and dottedNS its namespace. longEnv's name is too long for
	// petri-deployer-<name>: its identity is that, cut, and a hash.
	dottedEnv        = "web.pr-10"
	dottedNS         = "web-pr-10-ab78"
	dottedDeployerSA = "petri-deployer-web-pr-10-1868fb13"
	longEnv          = "checkout-service-with-a-rather-long-branch-name-pr-11"
	longDeployerSA   = "petri-deployer-checkout-service-with-a-rather-long-bra-69cd6093"
	// selfNamedNS and sharedNamedNS carry Petri's marks but name
	// petri-operator and the shared deployer as their deployer: namespaces
	// made without the operator (by hand, or before its fence checked the
	// name), which must still bind neither.
	selfNamedNS   = "web-pr-5-ab56"
	sharedNamedNS = "web-pr-6-ab67"
	// foreignNS stands for any namespace Petri did not make.
	foreignNS = "production"
)

var (
	cluster *controlplane.Cluster
	// deployerImage and stepImages are config/default's settings (ConfigMap
	// petri-operator), read from the built manifests.
	deployerImage string
	// fencesBefore is VerifyFences' answer before the installation.
	fencesBefore error
	// probesBefore and probesAfter are the operator's probes, answered by
	// its fence gate, before and after the installation; gateAfter is what
	// the gate's wait returned once the installation was applied.
	probesBefore, probesAfter map[string]probeAnswer
	gateAfter                 error
	// installOrder is config/default's objects as kubectl apply -k applies
	// them, "Kind/name".
	installOrder []string
	root         string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	if root, err = controlplane.RepoRoot(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cluster, err = controlplane.Start(controlplane.Options{Controllers: []string{"namespace-controller", "serviceaccount-controller"}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cluster.Stop()
	if err := install(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// install applies config/default as kubectl apply -k would, and the objects
// an environment has once the operator bound it: its namespaces and deployer
// ServiceAccounts.
func install() error {
	ctx := context.Background()
	assets, err := controlplane.AssetsDir()
	if err != nil {
		return err
	}
	o := controllers.DefaultOptions()
	fencesBefore = controllers.VerifyFences(ctx, cluster.Client, o)
	out, err := exec.Command(filepath.Join(assets, "kubectl"), "kustomize", filepath.Join(root, "config", "default")).Output()
	if err != nil {
		return fmt.Errorf("kubectl kustomize config/default: %w", err)
	}
	manifests := filepath.Join(cluster.Dir, "default.yaml")
	if err := os.WriteFile(manifests, out, 0o644); err != nil {
		return err
	}
	objs, err := controlplane.ReadManifests(manifests)
	if err != nil {
		return err
	}
	for _, u := range objs {
		if u.GetKind() == "ConfigMap" && u.GetName() == controllers.FenceParams {
			deployerImage, _, _ = unstructuredString(u.Object, "data", "deployer-image")
		}
	}
	if deployerImage == "" {
		return errors.New("config/default has no deployer-image in ConfigMap petri-operator")
	}
	for _, u := range objs {
		installOrder = append(installOrder, u.GetKind()+"/"+u.GetName())
	}
	// The operator started before the installation: it waits for its fences.
	o.DeployerImage = deployerImage
	gate := controllers.NewFenceGate(cluster.Client, o)
	gateCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	gateDone := make(chan error, 1)
	go func() { gateDone <- gate.Wait(gateCtx) }()
	if err := wait.PollUntilContextCancel(gateCtx, 20*time.Millisecond, true, func(context.Context) (bool, error) {
		return errors.Is(probe(gate, "/readyz").err, controllers.ErrFencesMissing), nil
	}); err != nil {
		return fmt.Errorf("the fence gate never found the fences missing: %w", err)
	}
	probesBefore = map[string]probeAnswer{"/healthz": probe(gate, "/healthz"), "/readyz": probe(gate, "/readyz")}
	if err := cluster.Apply(ctx, manifests); err != nil {
		return err
	}
	gateAfter = <-gateDone
	probesAfter = map[string]probeAnswer{"/healthz": probe(gate, "/healthz"), "/readyz": probe(gate, "/readyz")}
	if err := waitForFences(ctx); err != nil {
		return err
	}
	for _, e := range []struct{ ns, env, sa, uid string }{
		{workloadNS, "web-pr-1", deployerSA, "uid-1"},
		{otherWorkloadNS, "web-pr-2", otherDeployerSA, "uid-2"},
		{dottedNS, dottedEnv, dottedDeployerSA, "uid-10"},
	} {
		if err := cluster.Client.Create(ctx, petriNamespace(e.ns, e.env, e.sa, e.uid)); err != nil {
			return err
		}
		if err := cluster.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: mgmtNS, Name: e.sa}}); err != nil {
			return err
		}
		if e.ns != dottedNS {
			if err := cluster.Client.Create(ctx, adminBinding(e.ns, e.sa)); err != nil {
				return err
			}
		}
	}
	for _, e := range []struct{ ns, env, sa, uid string }{
		{selfNamedNS, "web-pr-5", "petri-operator", "uid-5"},
		{sharedNamedNS, "web-pr-6", "petri-shared-deployer", "uid-6"},
	} {
		if err := cluster.Client.Create(ctx, petriNamespace(e.ns, e.env, e.sa, e.uid)); err != nil {
			return err
		}
	}
	if err := cluster.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: mgmtNS, Name: "petri-shared-deployer"}}); err != nil {
		return err
	}
	if err := cluster.Client.Create(ctx, adminBinding(sharedNS, "petri-shared-deployer")); err != nil {
		return err
	}
	if err := cluster.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: foreignNS}}); err != nil {
		return err
	}
	return cluster.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: syncNS, Name: "petri-sync"},
		StringData: map[string]string{"webhook-secret": "not-a-real-secret"},
	})
}

func unstructuredString(obj map[string]any, fields ...string) (string, bool, error) {
	var cur any = obj
	for _, f := range fields {
		m, ok := cur.(map[string]any)
		if !ok {
			return "", false, nil
		}
		cur = m[f]
	}
	s, ok := cur.(string)
	return s, ok, nil
}

// petriNamespace is a workload namespace with the marks the operator gives
// the namespace of environment env, naming sa as its deployer.
func petriNamespace(name, env, sa, uid string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: name,
		Labels: map[string]string{
			petriv1.LabelManagedBy:      petriv1.ManagedByOperator,
			petriv1.LabelEnvironment:    env,
			petriv1.LabelEnvironmentUID: uid,
		},
		Annotations: map[string]string{
			petriv1.AnnotationEnvironment:            mgmtNS + "/" + env,
			petriv1.AnnotationEnvironmentUID:         uid,
			petriv1.AnnotationDeployerServiceAccount: sa,
		},
	}}
}

// withLevel gives a namespace the Pod Security labels the operator sets.
func withLevel(ns *corev1.Namespace, level string) *corev1.Namespace {
	ns.Labels["pod-security.kubernetes.io/enforce"] = level
	ns.Labels["pod-security.kubernetes.io/enforce-version"] = "latest"
	return ns
}

func adminBinding(ns, sa string) *rbacv1.RoleBinding {
	return binding(ns, "petri-deployer", "admin", rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: mgmtNS, Name: sa})
}

func binding(ns, name, clusterRole string, subject rbacv1.Subject) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
		Subjects:   []rbacv1.Subject{subject},
	}
}

func job(name, sa string, labels map[string]string, images ...string) *batchv1.Job {
	var containers []corev1.Container
	for i, img := range images {
		containers = append(containers, corev1.Container{Name: fmt.Sprintf("c%d", i), Image: img})
	}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: mgmtNS, Name: name, Labels: labels},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			ServiceAccountName: sa, RestartPolicy: corev1.RestartPolicyNever, Containers: containers,
		}}},
	}
}

// prState is a pull request's lifecycle state as sync writes it.
func prState() *petriv1.PullRequestState {
	return &petriv1.PullRequestState{
		ObjectMeta: metav1.ObjectMeta{Namespace: mgmtNS, Name: "web-1-0123abcd"},
		Spec:       petriv1.PullRequestStateSpec{Forge: "github", Repository: "acme/web", Number: 1, Kept: true},
	}
}

// withEnv gives the Job's first container environment variables.
func withEnv(j *batchv1.Job, env ...corev1.EnvVar) *batchv1.Job {
	j.Spec.Template.Spec.Containers[0].Env = env
	return j
}

// withBinding mounts Secret values as the Job's values, as a step Job's
// binding is, and adds Secret envFrom to its first container's environment.
func withBinding(j *batchv1.Job, values, envFrom string) *batchv1.Job {
	pod := &j.Spec.Template.Spec
	pod.Volumes = []corev1.Volume{{Name: "values", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: values}}}}
	pod.Containers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: envFrom}}}}
	return j
}

// withInstance mounts Secret instance as the Job's volume "instance", as a
// provision or deprovision Job's instance keys are, and adds it to its first
// container's envFrom.
func withInstance(j *batchv1.Job, instance string) *batchv1.Job {
	pod := &j.Spec.Template.Spec
	pod.Volumes = append(pod.Volumes, corev1.Volume{Name: "instance", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: instance}}})
	pod.Containers[0].EnvFrom = append(pod.Containers[0].EnvFrom, corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: instance}}})
	return j
}

// identity is one of Petri's: a ServiceAccount the API server authenticates.
type identity struct{ title, namespace, name string }

var (
	operator       = identity{"operator", mgmtNS, "petri-operator"}
	syncer         = identity{"sync", syncNS, "petri-sync"}
	deployer       = identity{"an environment's deployer", mgmtNS, deployerSA}
	sharedDeployer = identity{"shared deployer", mgmtNS, "petri-shared-deployer"}
)

// as impersonates the identity with the groups a ServiceAccount token carries.
func as(t *testing.T, id identity) client.Client {
	cfg := rest.CopyConfig(cluster.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: serviceaccount.MakeUsername(id.namespace, id.name),
		Groups:   append(serviceaccount.MakeGroupNames(id.namespace), "system:authenticated"),
	}
	c, err := client.New(cfg, client.Options{Scheme: controlplane.Scheme()})
	require.NoError(t, err)
	return c
}

// check is one request an identity makes and the answer it must get.
type check struct {
	who  identity
	what string
	// allowed is the answer Petri needs: true, the identity must be able to
	// do it; false, the API server must refuse it.
	allowed bool
	do      func(ctx context.Context, c client.Client) error
	// fence, when set, is the admission policy that must be the one
	// refusing (the API server would admit it on RBAC alone).
	fence string
}

var dryRun = client.DryRunAll

func checks() []check {
	dryDelete := &client.DeleteOptions{DryRun: []string{metav1.DryRunAll}}
	get := func(obj client.Object, ns, name string) func(context.Context, client.Client) error {
		return func(ctx context.Context, c client.Client) error {
			return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj)
		}
	}
	create := func(obj client.Object) func(context.Context, client.Client) error {
		return func(ctx context.Context, c client.Client) error { return c.Create(ctx, obj, dryRun) }
	}
	del := func(obj client.Object) func(context.Context, client.Client) error {
		return func(ctx context.Context, c client.Client) error { return c.Delete(ctx, obj, dryDelete) }
	}
	ns := func(name string) *corev1.Namespace {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	}
	lease := func(namespace, name string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("petri-sync-1")}}
	}
	update := func(obj client.Object) func(context.Context, client.Client) error {
		return func(ctx context.Context, c client.Client) error { return c.Update(ctx, obj, dryRun) }
	}
	repository := func(namespace string) *petriv1.Repository {
		return &petriv1.Repository{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "acme-shop-0123456789"},
			Spec: petriv1.RepositorySpec{Forge: "github", Repository: "acme/shop"}}
	}
	mergePatch := func(obj client.Object, patch string) func(context.Context, client.Client) error {
		return func(ctx context.Context, c client.Client) error {
			return c.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(patch)), dryRun)
		}
	}
	deployment := func(namespace string) *appsv1.Deployment {
		return &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "web"},
			Spec: appsv1.DeploymentSpec{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "example.com/web:1"}}},
				},
			},
		}
	}
	ee := &petriv1.EphemeralEnvironment{
		ObjectMeta: metav1.ObjectMeta{Namespace: mgmtNS, Name: "web-pr-3"},
		Spec: petriv1.EphemeralEnvironmentSpec{Components: []petriv1.Component{{
			Name: "web", Chart: petriv1.ChartReference{Repository: "/charts", Name: "web", Version: "1.0.0"},
		}}},
	}
	stepLabels := map[string]string{"petri.dev/action": "provision"}
	pgStep := map[string]string{"petri.dev/action": "provision", "petri.dev/component": "pg"}
	pgBind := map[string]string{"petri.dev/action": "bind", "petri.dev/component": "pg"}
	sub := func(ns, name string) rbacv1.Subject {
		return rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}
	}
	fresh := withLevel(petriNamespace("web-pr-9-ef56", "web-pr-9", "petri-deployer-web-pr-9", "uid-9"), "baseline")
	unlabelled := petriNamespace("web-pr-8-ef57", "web-pr-8", "petri-deployer-web-pr-8", "uid-8")
	privileged := withLevel(petriNamespace("web-pr-7-ef58", "web-pr-7", "petri-deployer-web-pr-7", "uid-7"), "privileged")
	// nsNaming is a new workload namespace of env, at the installation's
	// level, whose annotation names sa as its deployer.
	nsNaming := func(name, env, sa string) *corev1.Namespace {
		return withLevel(petriNamespace(name, env, sa, "uid-"+name), "baseline")
	}
	unnamed := nsNaming("web-pr-9-ef68", "web-pr-9", "petri-deployer-web-pr-9")
	delete(unnamed.Annotations, petriv1.AnnotationEnvironment)
	level := func(name, level string) func(context.Context, client.Client) error {
		return mergePatch(ns(name), `{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":"`+level+`","pod-security.kubernetes.io/enforce-version":"latest"}}}`)
	}
	const (
		fNS   = "petri-operator-namespaces"
		fRB   = "petri-operator-rolebindings"
		fJobs = "petri-operator-jobs"
	)
	return []check{
		// The operator: what it needs.
		{who: operator, what: "create a workload namespace with Petri's marks, at the installation's Pod Security level", allowed: true, do: create(fresh)},
		{who: operator, what: "create the workload namespace of an environment whose name is not a DNS label (" + dottedEnv + "), naming its deployer (readable part and hash)", allowed: true, do: create(nsNaming("web-pr-10-ef60", dottedEnv, dottedDeployerSA))},
		{who: operator, what: "create the workload namespace of an environment whose name is too long for `petri-deployer-<name>`, naming its deployer (cut, and a hash)", allowed: true, do: create(nsNaming("checkout-ef61", longEnv, longDeployerSA))},
		{who: operator, what: "set the installation's Pod Security level (workload-pod-security) on a workload namespace", allowed: true, do: level(workloadNS, "baseline")},
		{who: operator, what: "set the installation's Pod Security level on the shared namespace " + sharedNS, allowed: true, do: level(sharedNS, "baseline")},
		{who: operator, what: "delete a workload namespace with Petri's marks", allowed: true, do: del(ns(workloadNS))},
		{who: operator, what: "create the deployer's admin RoleBinding in its workload namespace", allowed: true, do: create(adminBinding(otherWorkloadNS, otherDeployerSA).DeepCopy())},
		{who: operator, what: "create the deployer's admin RoleBinding in the workload namespace of " + dottedEnv + " (its hashed deployer)", allowed: true, do: create(adminBinding(dottedNS, dottedDeployerSA))},
		{who: operator, what: "create the shared deployer's admin RoleBinding in " + sharedNS, allowed: true, do: create(adminBinding(sharedNS, "petri-shared-deployer"))},
		{who: operator, what: "create a deploy Job as a deployer, deployer image", allowed: true, do: create(job("deploy", deployerSA, nil, deployerImage))},
		{who: operator, what: "create a shared-workload Job as the shared deployer, deployer image", allowed: true, do: create(job("shared", "petri-shared-deployer", nil, deployerImage))},
		{who: operator, what: "read and write Secrets and ServiceAccounts in " + mgmtNS, allowed: true, do: create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: mgmtNS, Name: "values"}})},
		{who: operator, what: "list EphemeralEnvironments in " + mgmtNS, allowed: true, do: func(ctx context.Context, c client.Client) error {
			var list petriv1.EphemeralEnvironmentList
			return c.List(ctx, &list, client.InNamespace(mgmtNS))
		}},
		// The operator: what the fences refuse although RBAC would allow it.
		{who: operator, what: "create a namespace without Petri's marks", fence: fNS, do: create(ns("web-pr-4-0000"))},
		{who: operator, what: "create a workload namespace without a Pod Security level", fence: fNS, do: create(unlabelled)},
		{who: operator, what: "create a workload namespace at another Pod Security level (privileged)", fence: fNS, do: create(privileged)},
		{who: operator, what: "create a workload namespace naming itself (petri-operator) as its deployer", fence: fNS, do: create(nsNaming("web-pr-9-ef62", "web-pr-9", "petri-operator"))},
		{who: operator, what: "create a workload namespace naming sync (petri-sync) as its deployer", fence: fNS, do: create(nsNaming("web-pr-9-ef63", "web-pr-9", "petri-sync"))},
		{who: operator, what: "create a workload namespace naming the shared deployer (petri-shared-deployer) as its deployer", fence: fNS, do: create(nsNaming("web-pr-9-ef64", "web-pr-9", "petri-shared-deployer"))},
		{who: operator, what: "create a workload namespace naming another environment's deployer", fence: fNS, do: create(nsNaming("web-pr-9-ef65", "web-pr-9", otherDeployerSA))},
		{who: operator, what: "create the workload namespace of " + dottedEnv + " naming web-pr-10's deployer (petri-deployer-web-pr-10)", fence: fNS, do: create(nsNaming("web-pr-10-ef66", dottedEnv, "petri-deployer-web-pr-10"))},
		{who: operator, what: "create the workload namespace of a long-named environment naming a hashed deployer whose readable part is another's", fence: fNS, do: create(nsNaming("checkout-ef67", longEnv, "petri-deployer-web-pr-9-69cd6093"))},
		{who: operator, what: "create a workload namespace that names no environment (annotation petri.dev/environment)", fence: fNS, do: create(unnamed)},
		{who: operator, what: "set another Pod Security level (privileged) on a workload namespace", fence: fNS, do: level(workloadNS, "privileged")},
		{who: operator, what: "remove the Pod Security level of a workload namespace", fence: fNS, do: mergePatch(ns(workloadNS), `{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":null}}}`)},
		{who: operator, what: "change another label of a workload namespace with its Pod Security level", fence: fNS, do: mergePatch(ns(workloadNS),
			`{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":"baseline","petri.dev/environment-uid":"uid-2"}}}`)},
		{who: operator, what: "set the Pod Security level on a namespace Petri did not make (" + foreignNS + ")", fence: fNS, do: level(foreignNS, "baseline")},
		{who: operator, what: "delete a namespace Petri did not make (" + foreignNS + ")", fence: fNS, do: del(ns(foreignNS))},
		{who: operator, what: "delete kube-system", do: del(ns("kube-system"))},
		{who: operator, what: "delete kube-node-lease", fence: fNS, do: del(ns("kube-node-lease"))},
		{who: operator, what: "delete the shared namespace " + sharedNS, fence: fNS, do: del(ns(sharedNS))},
		{who: operator, what: "delete " + syncNS + " (sync and its credentials)", fence: fNS, do: del(ns(syncNS))},
		{who: operator, what: "create a RoleBinding to admin in kube-system", fence: fRB, do: create(binding("kube-system", "petri-deployer", "admin", sub(mgmtNS, "petri-operator")))},
		{who: operator, what: "create a RoleBinding to admin in a namespace Petri did not make", fence: fRB, do: create(binding(foreignNS, "petri-deployer", "admin", sub(mgmtNS, deployerSA)))},
		{who: operator, what: "bind admin in a workload namespace to itself", fence: fRB, do: create(binding(otherWorkloadNS, "petri-deployer", "admin", sub(mgmtNS, "petri-operator")))},
		{who: operator, what: "bind admin to itself in a namespace with Petri's marks that names it as the deployer (made without the operator)", fence: fRB, do: create(adminBinding(selfNamedNS, "petri-operator"))},
		{who: operator, what: "bind admin to the shared deployer in a namespace with Petri's marks that names it as the deployer (made without the operator)", fence: fRB, do: create(adminBinding(sharedNamedNS, "petri-shared-deployer"))},
		{who: operator, what: "bind admin in a workload namespace to another environment's deployer", fence: fRB, do: create(binding(otherWorkloadNS, "petri-deployer", "admin", sub(mgmtNS, deployerSA)))},
		{who: operator, what: "bind admin in a workload namespace to sync", fence: fRB, do: create(binding(otherWorkloadNS, "petri-deployer", "admin", sub(syncNS, "petri-sync")))},
		{who: operator, what: "create a RoleBinding of another name in a workload namespace", fence: fRB, do: create(binding(otherWorkloadNS, "extra", "admin", sub(mgmtNS, otherDeployerSA)))},
		{who: operator, what: "delete a RoleBinding in kube-system", fence: fRB, do: del(&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "system::leader-locking-kube-controller-manager"}})},
		{who: operator, what: "create a Job running as petri-operator", fence: fJobs, do: create(job("as-operator", "petri-operator", nil, deployerImage))},
		{who: operator, what: "create a Job running as sync", fence: fJobs, do: create(job("as-sync", "petri-sync", nil, deployerImage))},
		{who: operator, what: "create a Job running as the default ServiceAccount", fence: fJobs, do: create(job("as-default", "", nil, deployerImage))},
		{who: operator, what: "create a deployer Job with another image", fence: fJobs, do: create(job("other-image", deployerSA, nil, "example.com/miner:1"))},
		{who: operator, what: "create a deployer Job with a second, other container", fence: fJobs, do: create(job("sidecar", deployerSA, nil, deployerImage, "example.com/miner:1"))},
		{who: operator, what: "create a provision Job with an image not in step-images", fence: fJobs, do: create(job("provision", deployerSA, stepLabels, "example.com/db-tools:1"))},
		{who: operator, what: "create a Job whose environment reads a Secret (valueFrom.secretKeyRef: the ownership key)", fence: fJobs, do: create(withEnv(job("env-secret", deployerSA, nil, deployerImage), corev1.EnvVar{Name: "KEY", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "petri-operator-ownership-key"}, Key: "key"}}}))},
		{who: operator, what: "create a Job whose environment reads a ConfigMap (valueFrom.configMapKeyRef)", fence: fJobs, do: create(withEnv(job("env-cm", deployerSA, nil, deployerImage), corev1.EnvVar{Name: "X", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: controllers.FenceParams}, Key: "deployer-image"}}}))},
		{who: operator, what: "create a Job with envFrom a Secret it does not mount as its values (another environment's binding)", fence: fJobs, do: create(withBinding(job("envfrom-other", deployerSA, nil, deployerImage), "binding-web-pr-1", "binding-web-pr-2"))},
		{who: operator, what: "create a Job with envFrom the Secret it mounts as its values (a step's binding)", allowed: true, do: create(withBinding(job("envfrom-own", deployerSA, nil, deployerImage), "binding-web-pr-1", "binding-web-pr-1"))},
		{who: operator, what: "create a provision Job with envFrom its own shared workload's instance Secret", allowed: true, do: create(withInstance(withBinding(job("instance-own", deployerSA, pgStep, deployerImage), "binding-web-pr-1", "binding-web-pr-1"), "pg-instance"))},
		{who: operator, what: "create a provision Job with envFrom another shared workload's instance Secret", fence: fJobs, do: create(withInstance(withBinding(job("instance-other", deployerSA, pgStep, deployerImage), "binding-web-pr-1", "binding-web-pr-1"), "queue-instance"))},
		{who: operator, what: "create a bind Job with envFrom its shared workload's instance Secret (into the environment's namespace)", fence: fJobs, do: create(withInstance(withBinding(job("instance-bind", deployerSA, pgBind, deployerImage), "binding-web-pr-1", "binding-web-pr-1"), "pg-instance"))},
		// The operator: what RBAC refuses.
		{who: operator, what: "write a pull request's lifecycle state (PullRequestState, sync's alone)", do: create(prState())},
		{who: operator, what: "read sync's Secret in " + syncNS, do: get(&corev1.Secret{}, syncNS, "petri-sync")},
		{who: operator, what: "create a Job in " + syncNS, do: create(&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: syncNS, Name: "x"}})},
		{who: operator, what: "create a Pod in " + mgmtNS, do: create(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: mgmtNS, Name: "x"}, Spec: corev1.PodSpec{ServiceAccountName: deployerSA, Containers: []corev1.Container{{Name: "c", Image: deployerImage}}}})},
		{who: operator, what: "create a Deployment in a workload namespace", do: create(deployment(otherWorkloadNS))},
		{who: operator, what: "read Secrets in a workload namespace", do: get(&corev1.Secret{}, otherWorkloadNS, "any")},
		{who: operator, what: "change the fences' settings (ConfigMap petri-operator)", do: func(ctx context.Context, c client.Client) error {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: mgmtNS, Name: controllers.FenceParams}, Data: map[string]string{"deployer-image": "example.com/miner:1"}}
			return c.Update(ctx, cm, client.DryRunAll)
		}},
		{who: operator, what: "delete a fence (ValidatingAdmissionPolicy)", do: del(&admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: fNS}})},
		{who: operator, what: "change its own rights (delete ClusterRole petri-operator)", do: del(&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "petri-operator"}})},
		{who: operator, what: "bind cluster-admin in a workload namespace", do: create(binding(otherWorkloadNS, "petri-deployer", "cluster-admin", sub(mgmtNS, otherDeployerSA)))},
		// sync.
		{who: syncer, what: "create an EphemeralEnvironment in " + mgmtNS, allowed: true, do: create(ee.DeepCopy())},
		{who: syncer, what: "list SharedWorkloads in " + mgmtNS, allowed: true, do: func(ctx context.Context, c client.Client) error {
			return c.List(ctx, &petriv1.SharedWorkloadList{}, client.InNamespace(mgmtNS))
		}},
		{who: syncer, what: "write a pull request's lifecycle state (PullRequestState) in " + mgmtNS, allowed: true, do: create(prState())},
		{who: syncer, what: "read Secrets in " + mgmtNS, do: get(&corev1.Secret{}, mgmtNS, "values")},
		{who: syncer, what: "create a Job in " + mgmtNS, do: create(job("from-sync", deployerSA, nil, deployerImage))},
		{who: syncer, what: "delete a namespace", do: del(ns(otherWorkloadNS))},
		{who: syncer, what: "write EphemeralEnvironment status", do: func(ctx context.Context, c client.Client) error {
			e := ee.DeepCopy()
			e.Name = "web-pr-1"
			return c.Status().Update(ctx, e, client.DryRunAll)
		}},
		{who: syncer, what: "list the pods of Jobs in " + mgmtNS + " (web page)", allowed: true, do: func(ctx context.Context, c client.Client) error {
			return c.List(ctx, &corev1.PodList{}, client.InNamespace(mgmtNS))
		}},
		{who: syncer, what: "read a Job pod's log in " + mgmtNS + " (web page)", allowed: true, do: readPodLog(syncer, mgmtNS)},
		{who: syncer, what: "read a pod's log in a workload namespace", do: readPodLog(syncer, workloadNS)},
		{who: syncer, what: "exec into a pod in " + mgmtNS, do: execInPod(syncer, mgmtNS)},
		{who: syncer, what: "delete a pod in " + mgmtNS, do: del(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: mgmtNS, Name: "absent"}})},
		// sync's two replicas: the Lease and the Repositories a follower
		// records webhooks on, in its own namespace, nothing else there.
		{who: syncer, what: "create its Lease petri-sync-leader in " + syncNS, allowed: true, do: create(lease(syncNS, "petri-sync-leader"))},
		{who: syncer, what: "read its Lease petri-sync-leader in " + syncNS, allowed: true, do: get(&coordinationv1.Lease{}, syncNS, "petri-sync-leader")},
		{who: syncer, what: "renew its Lease petri-sync-leader in " + syncNS, allowed: true, do: update(lease(syncNS, "petri-sync-leader"))},
		{who: syncer, what: "take another Lease in " + syncNS, do: update(lease(syncNS, "other"))},
		{who: syncer, what: "take the operator's Lease in " + mgmtNS, do: update(lease(mgmtNS, "petri-operator.petri.dev"))},
		{who: syncer, what: "create a Repository in " + syncNS + " (a webhook recorded for the leader)", allowed: true, do: create(repository(syncNS))},
		{who: syncer, what: "mark a Repository in " + syncNS + " to refresh", allowed: true, do: mergePatch(repository(syncNS), `{"metadata":{"annotations":{"refresh.petri.dev/repository":"2026-01-01T00:00:00Z"}}}`)},
		{who: syncer, what: "watch the Repositories in " + syncNS, allowed: true, do: func(ctx context.Context, c client.Client) error {
			return c.List(ctx, &petriv1.RepositoryList{}, client.InNamespace(syncNS))
		}},
		{who: syncer, what: "delete a Repository in " + syncNS + " (its repository left the config)", allowed: true, do: del(repository(syncNS))},
		{who: syncer, what: "create a Repository in " + mgmtNS, do: create(repository(mgmtNS))},
		{who: syncer, what: "list ConfigMaps in " + syncNS, do: func(ctx context.Context, c client.Client) error {
			return c.List(ctx, &corev1.ConfigMapList{}, client.InNamespace(syncNS))
		}},
		{who: syncer, what: "change its settings (ConfigMap petri-sync in " + syncNS + ")", do: mergePatch(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: syncNS, Name: "petri-sync"}}, `{"data":{"x":"y"}}`)},
		{who: syncer, what: "create a ConfigMap in " + syncNS, do: create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: syncNS, Name: "x"}})},
		{who: syncer, what: "read its Secret through the API (it reads mounted files)", do: get(&corev1.Secret{}, syncNS, "petri-sync")},
		// An environment's deployer.
		{who: deployer, what: "create a Deployment in its workload namespace", allowed: true, do: create(deployment(workloadNS))},
		{who: deployer, what: "read and write Secrets (Helm releases) in its workload namespace", allowed: true, do: create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: workloadNS, Name: "sh.helm.release.v1.web.v1"}})},
		{who: deployer, what: "create a Deployment in another environment's namespace", do: create(deployment(otherWorkloadNS))},
		{who: deployer, what: "read Secrets in " + mgmtNS, do: get(&corev1.Secret{}, mgmtNS, "values")},
		{who: deployer, what: "write a pull request's lifecycle state (PullRequestState)", do: create(prState())},
		{who: deployer, what: "read sync's Secret in " + syncNS, do: get(&corev1.Secret{}, syncNS, "petri-sync")},
		{who: deployer, what: "delete its own workload namespace", do: del(ns(workloadNS))},
		{who: deployer, what: "change the Pod Security level of its workload namespace", do: level(workloadNS, "privileged")},
		{who: deployer, what: "read a pod's log in its workload namespace (a crashed container's last line)", allowed: true, do: readPodLog(deployer, workloadNS)},
		{who: deployer, what: "read a pod's log in another environment's namespace", do: readPodLog(deployer, otherWorkloadNS)},
		{who: deployer, what: "create a Deployment in " + sharedNS, do: create(deployment(sharedNS))},
		// The shared deployer.
		{who: sharedDeployer, what: "read the shared workloads' Secrets in " + sharedNS, allowed: true, do: get(&corev1.Secret{}, sharedNS, "absent")},
		{who: sharedDeployer, what: "create a Deployment in a workload namespace", do: create(deployment(workloadNS))},
	}
}

// outcome runs one check and describes the API server's answer.
type outcome struct {
	allowed bool
	// by is "" when allowed, "RBAC" when authorization refused, or the
	// admission policy that refused.
	by  string
	err error
}

var policyRefusal = regexp.MustCompile(`ValidatingAdmissionPolicy '([a-z0-9-]+)'`)

func runCheck(ctx context.Context, t *testing.T, ch check) outcome {
	return classify(ch.do(ctx, as(t, ch.who)))
}

// classify describes the API server's answer err.
func classify(err error) outcome {
	if err == nil || apierrors.IsNotFound(err) || apierrors.IsAlreadyExists(err) {
		// A 404 answers an authorized read; a 409 on create comes from
		// storage, after authorization and admission admitted the request.
		return outcome{allowed: true}
	}
	if m := policyRefusal.FindStringSubmatch(err.Error()); m != nil {
		return outcome{by: m[1], err: err}
	}
	if apierrors.IsForbidden(err) {
		switch msg := err.Error(); {
		case strings.Contains(msg, "this namespace may not be deleted"):
			return outcome{by: "NamespaceLifecycle", err: err}
		case strings.Contains(msg, "attempting to grant RBAC permissions not currently held"):
			return outcome{by: "RBAC escalation check", err: err}
		case strings.Contains(msg, "cannot "):
			return outcome{by: "RBAC", err: err}
		}
	}
	return outcome{err: err}
}

// TestLeastPrivilege asks the API server every check and writes the table.
func TestLeastPrivilege(t *testing.T) {
	ctx := context.Background()
	var rows []string
	for _, ch := range checks() {
		got := runCheck(ctx, t, ch)
		if got.err != nil && got.by == "" {
			t.Errorf("%s: %s: unexpected error: %v", ch.who.title, ch.what, got.err)
			continue
		}
		if ch.allowed {
			assert.True(t, got.allowed, "%s must be able to %s; the API server answered: %v", ch.who.title, ch.what, got.err)
		} else {
			assert.False(t, got.allowed, "%s must be refused: %s", ch.who.title, ch.what)
			if ch.fence != "" {
				assert.Equal(t, ch.fence, got.by, "%s: %s must be refused by the fence %s (RBAC alone would admit it): %v", ch.who.title, ch.what, ch.fence, got.err)
			}
		}
		answer := "allowed"
		if !got.allowed {
			answer = "refused (" + refusedBy(got.by) + ")"
		}
		rows = append(rows, fmt.Sprintf("| %s | %s | %s |", ch.who.title, ch.what, answer))
	}
	table := "| identity | request | the API server's answer |\n|---|---|---|\n" + strings.Join(rows, "\n") + "\n"
	checkDoc(t, table)
}

func refusedBy(by string) string {
	if strings.HasPrefix(by, "petri-") {
		return "fence `" + by + "`"
	}
	return by
}

// TestOperatorRefusedByTheFences states the two refusals the operator's
// identity must get whatever its code does, with the API server's message.
func TestOperatorRefusedByTheFences(t *testing.T) {
	ctx := context.Background()
	c := as(t, operator)
	err := c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: foreignNS}})
	require.Error(t, err)
	assert.True(t, apierrors.IsForbidden(err) || apierrors.IsInvalid(err), "%v", err)
	assert.Contains(t, err.Error(), "petri-operator may delete only namespaces it marked as an environment's")
	require.NoError(t, cluster.Client.Get(ctx, client.ObjectKey{Name: foreignNS}, &corev1.Namespace{}), "the namespace is still there")

	err = c.Create(ctx, binding("kube-system", "petri-deployer", "admin", rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: mgmtNS, Name: "petri-operator"}))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "petri-operator may manage RoleBindings only in namespaces it marked as an environment's")
	err = cluster.Client.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "petri-deployer"}, &rbacv1.RoleBinding{})
	assert.True(t, apierrors.IsNotFound(err), "no RoleBinding was made in kube-system: %v", err)
}

// TestOperatorCannotBindAdminToItself: the operator cannot make a namespace
// that names itself as the deployer (a real create, not a dry run), and in
// such a namespace made without it cannot bind admin to itself: the fences
// checked only that the annotation was there, and the RoleBinding fence
// bound whatever it named.
func TestOperatorCannotBindAdminToItself(t *testing.T) {
	ctx := context.Background()
	c := as(t, operator)
	ns := withLevel(petriNamespace("web-pr-12-ab90", "web-pr-12", "petri-operator", "uid-12"), "baseline")
	t.Cleanup(func() {
		err := cluster.Client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns.Name}})
		assert.True(t, err == nil || apierrors.IsNotFound(err), "%v", err)
	})
	err := c.Create(ctx, ns.DeepCopy())
	require.Error(t, err, "the operator created a namespace naming itself as its deployer")
	assert.Equal(t, "petri-operator-namespaces", classify(err).by, "%v", err)
	assert.Contains(t, err.Error(), "names environment 'web-pr-12' and deployer 'petri-operator'")
	err = cluster.Client.Get(ctx, client.ObjectKey{Name: ns.Name}, &corev1.Namespace{})
	require.True(t, apierrors.IsNotFound(err), "no namespace was made: %v", err)

	// The same namespace, made without the operator.
	require.NoError(t, cluster.Client.Create(ctx, ns.DeepCopy()))
	err = c.Create(ctx, adminBinding(ns.Name, "petri-operator"), dryRun)
	require.Error(t, err, "the operator bound admin to itself")
	assert.Equal(t, "petri-operator-rolebindings", classify(err).by, "%v", err)
	assert.Contains(t, err.Error(), "petri-operator may bind admin only to the deployer ServiceAccount Petri makes for the environment a namespace names")
}

// TestProvisionImagesFromStepImages: a provision Job may run an image the
// installation allows in step-images, and a deploy Job still may not.
func TestProvisionImagesFromStepImages(t *testing.T) {
	ctx := context.Background()
	var cm corev1.ConfigMap
	require.NoError(t, cluster.Client.Get(ctx, client.ObjectKey{Namespace: mgmtNS, Name: controllers.FenceParams}, &cm))
	orig := cm.Data["step-images"]
	cm.Data["step-images"] = "example.com/db-tools:, example.com/other/"
	require.NoError(t, cluster.Client.Update(ctx, &cm))
	t.Cleanup(func() {
		require.NoError(t, cluster.Client.Get(ctx, client.ObjectKey{Namespace: mgmtNS, Name: controllers.FenceParams}, &cm))
		cm.Data["step-images"] = orig
		require.NoError(t, cluster.Client.Update(ctx, &cm))
	})
	c := as(t, operator)
	provision := map[string]string{"petri.dev/action": "provision"}
	deploy := map[string]string{"petri.dev/action": "deploy"}
	require.Eventually(t, func() bool {
		return c.Create(ctx, job("p1", deployerSA, provision, "example.com/db-tools:1.2"), dryRun) == nil
	}, 30e9, 100e6, "the fence reads the new step-images")
	assert.NoError(t, c.Create(ctx, job("p2", deployerSA, provision, "example.com/other/tool:3"), dryRun))
	err := c.Create(ctx, job("p3", deployerSA, provision, "example.com/db-toolsX:1"), dryRun)
	assert.ErrorContains(t, err, "petri-operator-jobs", "a prefix is matched exactly")
	err = c.Create(ctx, job("d1", deployerSA, deploy, "example.com/db-tools:1.2"), dryRun)
	assert.ErrorContains(t, err, "petri-operator-jobs", "deploy Jobs run the deployer image only")
}

// TestVerifyFences: the operator refuses to start without the fences or with
// settings that disagree with them.
func TestVerifyFences(t *testing.T) {
	ctx := context.Background()
	require.ErrorIs(t, fencesBefore, controllers.ErrFencesMissing, "before config/default was applied")
	o := controllers.DefaultOptions()
	o.DeployerImage = deployerImage
	require.NoError(t, controllers.VerifyFences(ctx, cluster.Client, o))
	o.DeployerImage = "example.com/other-deployer:1"
	err := controllers.VerifyFences(ctx, cluster.Client, o)
	require.ErrorContains(t, err, "the fences would refuse every Job")
	// As the operator's own identity: it may read what it verifies.
	o.DeployerImage = deployerImage
	require.NoError(t, controllers.VerifyFences(ctx, as(t, operator), o))
}

// probeAnswer is one answer of the operator's probes.
type probeAnswer struct {
	code int
	body string
	err  error // the gate's reason, for /readyz
}

func probe(gate *controllers.FenceGate, path string) probeAnswer {
	rec := httptest.NewRecorder()
	gate.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return probeAnswer{code: rec.Code, body: rec.Body.String(), err: gate.Reason()}
}

// TestOperatorWaitsForItsFences: an operator that starts before the
// installation has stored its fences stays alive and not ready, saying which
// fence is missing, and goes on once they exist (it exited before, and was
// restarted: a crash-loop on every fresh install under load).
func TestOperatorWaitsForItsFences(t *testing.T) {
	assert.Equal(t, http.StatusOK, probesBefore["/healthz"].code, "alive while it waits: a restart would not help")
	assert.Equal(t, http.StatusServiceUnavailable, probesBefore["/readyz"].code)
	assert.Contains(t, probesBefore["/readyz"].body, "admission fences missing: ValidatingAdmissionPolicy petri-operator-namespaces not found")
	require.NoError(t, gateAfter, "the wait ends once config/default is applied")
	assert.Equal(t, http.StatusOK, probesAfter["/readyz"].code)
	assert.NoError(t, probesAfter["/readyz"].err)
}

// TestInstallAppliesFencesFirst: kubectl apply -k config/default (and the
// sample overlay, since kustomize reads sortOptions only where it builds)
// creates the fences and their settings before the operator's Deployment.
func TestInstallAppliesFencesFirst(t *testing.T) {
	assets, err := controlplane.AssetsDir()
	require.NoError(t, err)
	out, err := exec.Command(filepath.Join(assets, "kubectl"), "kustomize", filepath.Join(root, "config", "samples", "install")).Output()
	require.NoError(t, err)
	manifests := filepath.Join(t.TempDir(), "sample.yaml")
	require.NoError(t, os.WriteFile(manifests, out, 0o644))
	objs, err := controlplane.ReadManifests(manifests)
	require.NoError(t, err)
	var sample []string
	for _, u := range objs {
		sample = append(sample, u.GetKind()+"/"+u.GetName())
	}
	for name, order := range map[string][]string{"config/default": installOrder, "config/samples/install": sample} {
		operator := slices.Index(order, "Deployment/petri-operator")
		require.GreaterOrEqual(t, operator, 0, name)
		fences := []string{"ConfigMap/" + controllers.FenceParams}
		for _, p := range controllers.FencePolicies {
			fences = append(fences, "ValidatingAdmissionPolicy/"+p, "ValidatingAdmissionPolicyBinding/"+p)
		}
		for _, f := range fences {
			i := slices.Index(order, f)
			require.GreaterOrEqual(t, i, 0, "%s has %s", name, f)
			assert.Less(t, i, operator, "%s applies %s before the operator's Deployment", name, f)
		}
	}
}

// TestStepEnvironmentIsLiteral: a SharedWorkload whose provision or
// deprovision step takes an environment variable from a Secret, a ConfigMap
// or the pod is refused by the API server (the CRD's rule): a step runs in
// the management namespace, beside the ownership key and every binding.
func TestStepEnvironmentIsLiteral(t *testing.T) {
	ctx := context.Background()
	sw := func(name string, env ...corev1.EnvVar) *petriv1.SharedWorkload {
		return &petriv1.SharedWorkload{
			ObjectMeta: metav1.ObjectMeta{Namespace: mgmtNS, Name: name},
			Spec: petriv1.SharedWorkloadSpec{
				Chart:     petriv1.ChartReference{Repository: "/charts", Name: "db", Version: "1.0.0"},
				Provision: &petriv1.ContainerTemplate{Image: "example.com/db-tools:1", Env: env},
			},
		}
	}
	c := as(t, syncer)
	require.NoError(t, c.Create(ctx, sw("literal", corev1.EnvVar{Name: "MODE", Value: "create"}), dryRun), "literal values are fine")
	for name, from := range map[string]*corev1.EnvVarSource{
		"secret":    {SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "petri-operator-ownership-key"}, Key: "key"}},
		"configmap": {ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: controllers.FenceParams}, Key: "deployer-image"}},
		"field":     {FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}},
	} {
		err := c.Create(ctx, sw("from-"+name, corev1.EnvVar{Name: "MODE", Value: "create"}, corev1.EnvVar{Name: "STOLEN", ValueFrom: from}), dryRun)
		require.Error(t, err, name)
		assert.True(t, apierrors.IsInvalid(err), "%s: %v", name, err)
		assert.ErrorContains(t, err, "spec.provision.env: Invalid value: valueFrom is refused in a step's env", name)
	}
}

// TestSyncRunsWithoutTheOperatorsReach: nothing of sync's lives where the
// operator has any right.
func TestSyncRunsWithoutTheOperatorsReach(t *testing.T) {
	ctx := context.Background()
	var d appsv1.Deployment
	require.NoError(t, cluster.Client.Get(ctx, client.ObjectKey{Namespace: syncNS, Name: "petri-sync"}, &d))
	assert.Equal(t, "petri-sync", d.Spec.Template.Spec.ServiceAccountName)
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Secret != nil {
			assert.Equal(t, "petri-sync", v.Secret.SecretName)
		}
	}
	err := as(t, operator).List(ctx, &corev1.SecretList{}, client.InNamespace(syncNS))
	assert.True(t, apierrors.IsForbidden(err), "the operator cannot list Secrets in %s: %v", syncNS, err)
	err = as(t, operator).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: syncNS, Name: "steal"}, Spec: corev1.PodSpec{
		ServiceAccountName: "petri-sync", AutomountServiceAccountToken: ptr.To(true),
		Containers: []corev1.Container{{Name: "c", Image: deployerImage}},
	}}, dryRun)
	assert.True(t, apierrors.IsForbidden(err), "the operator cannot start pods as sync: %v", err)
}

const (
	docBegin = "<!-- BEGIN generated by tests/security (make security-docs) -->\n"
	docEnd   = "<!-- END generated by tests/security -->\n"
)

// checkDoc compares the table with docs/security.md, or writes it there with
// PETRI_UPDATE_DOCS=1.
func checkDoc(t *testing.T, table string) {
	path := filepath.Join(root, "docs", "security.md")
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	doc := string(data)
	i, j := strings.Index(doc, docBegin), strings.Index(doc, docEnd)
	require.True(t, i >= 0 && j > i, "docs/security.md lacks the markers of the generated table")
	want := doc[:i+len(docBegin)] + table + doc[j:]
	if os.Getenv("PETRI_UPDATE_DOCS") == "1" {
		require.NoError(t, os.WriteFile(path, []byte(want), 0o644))
		return
	}
	assert.Equal(t, want, doc, "docs/security.md's table is stale: run make security-docs")
}

// waitForFences waits until the API server enforces every fence: a policy
// takes effect a moment after it is created (the API server compiles it
// through its own watch), and a check made before would be admitted.
func waitForFences(ctx context.Context) error {
	cfg := rest.CopyConfig(cluster.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: serviceaccount.MakeUsername(operator.namespace, operator.name),
		Groups:   append(serviceaccount.MakeGroupNames(operator.namespace), "system:authenticated"),
	}
	c, err := client.New(cfg, client.Options{Scheme: controlplane.Scheme()})
	if err != nil {
		return err
	}
	probes := map[string]client.Object{
		"petri-operator-namespaces":   &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fence-probe"}},
		"petri-operator-rolebindings": binding("kube-system", "petri-deployer", "admin", rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: mgmtNS, Name: "petri-operator"}),
		"petri-operator-jobs":         job("fence-probe", "petri-operator", nil, "example.com/probe:1"),
	}
	deadline := time.Now().Add(time.Minute)
	for policy, obj := range probes {
		for {
			err := c.Create(ctx, obj.DeepCopyObject().(client.Object), dryRun)
			if err != nil && strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+policy+"'") {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("fence %s not in effect after a minute (last answer: %v)", policy, err)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}
