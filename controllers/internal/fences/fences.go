// Package fences checks the admission fences Petri is installed with: the
// ValidatingAdmissionPolicies through which the API server itself refuses
// what the operator must never do. Verify reads that they are there and
// agree with the operator's settings, Prove has the API server refuse what
// they must refuse (server-side dry runs), and Gate holds the operator's
// start until they are.
package fences

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/controllers/internal/options"
)

// Policies are the ValidatingAdmissionPolicies that config/fences
// installs, each bound by a ValidatingAdmissionPolicyBinding of the same
// name. With them the API server itself refuses what the operator must never
// do (delete a namespace that is not Petri's, bind admin outside Petri's
// namespaces, run a Job as another identity or image), whatever its code does.
var Policies = []string{"petri-operator-namespaces", "petri-operator-rolebindings", "petri-operator-jobs"}

// OperatorServiceAccount is the operator's identity in its management
// namespace, in every cluster: the fences match its username
// (system:serviceaccount:<namespace>:petri-operator), and a workload
// cluster's kubeconfig must authenticate as it there.
const OperatorServiceAccount = "petri-operator"

// OperatorUsername is the username of the operator's ServiceAccount, as the
// API server and the fences know it.
func OperatorUsername(namespace string) string {
	return "system:serviceaccount:" + namespace + ":" + OperatorServiceAccount
}

// Params is the ConfigMap in the management namespace that the fences
// read their settings from: the deployer image, the step images, the shared
// namespace, the workloads' Pod Security level.
const Params = "petri-operator"

// ErrMissing means the API server would not refuse what the fences
// refuse; the operator does not start unless told to run without them.
var ErrMissing = errors.New("admission fences missing")

// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingadmissionpolicies;validatingadmissionpolicybindings,verbs=get

// Verify checks that the fences are installed, enforcing, and agree with
// the operator's settings: every policy and its binding exist, the bindings
// deny, and the ConfigMap they read names the operator's deployer image,
// shared namespace and workload Pod Security level (a different image would
// make every Job refused).
// On a cluster without ValidatingAdmissionPolicy (Kubernetes before 1.30) it
// says so.
func Verify(ctx context.Context, c client.Reader, o options.Options) error {
	for _, name := range Policies {
		var p admissionregistrationv1.ValidatingAdmissionPolicy
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &p); err != nil {
			if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) && isMissingAPI(err) {
				return fmt.Errorf("%w: this cluster does not serve admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy (Kubernetes 1.30 or later); upgrade it, or start the operator with --require-fences=false to run without fences (docs/security.md)", ErrMissing)
			}
			if apierrors.IsNotFound(err) {
				return fmt.Errorf("%w: ValidatingAdmissionPolicy %s not found; install config/fences (part of config/default), or start the operator with --require-fences=false (docs/security.md)", ErrMissing, name)
			}
			return fmt.Errorf("get ValidatingAdmissionPolicy %s: %w", name, err)
		}
		var b admissionregistrationv1.ValidatingAdmissionPolicyBinding
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &b); err != nil {
			if apierrors.IsNotFound(err) {
				return fmt.Errorf("%w: ValidatingAdmissionPolicyBinding %s not found; install config/fences (part of config/default)", ErrMissing, name)
			}
			return fmt.Errorf("get ValidatingAdmissionPolicyBinding %s: %w", name, err)
		}
		if b.Spec.PolicyName != name || !slices.Contains(b.Spec.ValidationActions, admissionregistrationv1.Deny) {
			return fmt.Errorf("%w: ValidatingAdmissionPolicyBinding %s must bind policy %s with validationActions [Deny]", ErrMissing, name, name)
		}
	}
	var cm corev1.ConfigMap
	if err := c.Get(ctx, client.ObjectKey{Namespace: o.ManagementNamespace, Name: Params}, &cm); err != nil {
		return fmt.Errorf("%w: the fences' settings, ConfigMap %s/%s: %w", ErrMissing, o.ManagementNamespace, Params, err)
	}
	if got := cm.Data["deployer-image"]; got != o.DeployerImage {
		return fmt.Errorf("ConfigMap %s/%s names deployer-image %q but the operator runs %q: the fences would refuse every Job; set one value in both", o.ManagementNamespace, Params, got, o.DeployerImage)
	}
	if got := cm.Data["shared-namespace"]; got != o.SharedNamespace {
		return fmt.Errorf("ConfigMap %s/%s names shared-namespace %q but the operator uses %q: the fences would refuse the shared deployer's RoleBinding; set one value in both", o.ManagementNamespace, Params, got, o.SharedNamespace)
	}
	got, ok := cm.Data["workload-pod-security"]
	if !ok {
		// An installation from before the setting: the fences assume the
		// default.
		got = options.DefaultWorkloadPodSecurity
	}
	if got != o.WorkloadPodSecurity {
		return fmt.Errorf("ConfigMap %s/%s names workload-pod-security %q but the operator uses %q: the fences would refuse every namespace it creates; set one value in both", o.ManagementNamespace, Params, got, o.WorkloadPodSecurity)
	}
	return nil
}

// ErrNotEnforced means the fences are in place but the API server let
// through a request one of them must refuse: a policy whose matchConditions
// or match resources no longer catch the operator's requests is present and
// bound, yet fences nothing.
var ErrNotEnforced = errors.New("admission fences not enforced")

// fenceProof is a request that a fence must refuse, made as a server-side
// dry run: the API server authorizes and admits it, and stores nothing.
type fenceProof struct {
	policy string
	what   string
	obj    client.Object
}

// fenceProofs are one request per fence that the fence, and nothing else,
// refuses the operator's identity: RBAC grants each of them.
func fenceProofs(o options.Options) []fenceProof {
	const name = "petri-fence-probe"
	return []fenceProof{
		{policy: "petri-operator-namespaces", what: "create a namespace without Petri's marks",
			obj: &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}},
		{policy: "petri-operator-rolebindings", what: "create a RoleBinding to admin in kube-system",
			obj: &rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: name},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "admin"},
				Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: o.ManagementNamespace, Name: OperatorServiceAccount}},
			}},
		{policy: "petri-operator-jobs", what: "create a Job running as " + OperatorServiceAccount,
			obj: &batchv1.Job{
				ObjectMeta: metav1.ObjectMeta{Namespace: o.ManagementNamespace, Name: name},
				Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
					ServiceAccountName: OperatorServiceAccount,
					RestartPolicy:      corev1.RestartPolicyNever,
					Containers:         []corev1.Container{{Name: "probe", Image: o.DeployerImage}},
				}}},
			}},
	}
}

// Prove shows that the fences are enforced, not only present: as the
// client's identity it makes a server-side dry run of one request each fence
// must refuse, and requires each to be refused by that fence. A request let
// through, or refused by another admission, is ErrNotEnforced naming
// the fence; an authorization refusal or a failed request is returned as the
// API server's error.
func Prove(ctx context.Context, c client.Client, o options.Options) error {
	for _, p := range fenceProofs(o) {
		err := c.Create(ctx, p.obj, client.DryRunAll)
		switch {
		case err == nil, apierrors.IsAlreadyExists(err):
			return fmt.Errorf("%w: the API server let through a server-side dry run to %s, which the fence %s must refuse: its binding or its matchConditions no longer match the operator's requests", ErrNotEnforced, p.what, p.policy)
		case strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+p.policy+"'"):
			continue
		case policyRefusal.MatchString(err.Error()):
			return fmt.Errorf("%w: a server-side dry run to %s was refused by %s, not by the fence %s", ErrNotEnforced, p.what, policyRefusal.FindString(err.Error()), p.policy)
		default:
			return fmt.Errorf("server-side dry run to %s: %w", p.what, err)
		}
	}
	return nil
}

// policyRefusal finds the policy that refused a request in the API server's
// message.
var policyRefusal = regexp.MustCompile(`ValidatingAdmissionPolicy '[^']*'`)

// isMissingAPI tells a 404 for the resource type (the group/version is not
// served) from a 404 for one object.
func isMissingAPI(err error) bool {
	var s apierrors.APIStatus
	if !errors.As(err, &s) {
		return false
	}
	d := s.Status().Details
	return d == nil || d.Name == ""
}

// Gate holds the operator back until its fences are in place. An
// installation applies the operator's Deployment and the fences in one go, and
// a cluster may start the operator's pod before it has stored the policies:
// the operator then waits, alive but not ready, and says why, instead of
// exiting and being restarted.
type Gate struct {
	c client.Reader
	o options.Options

	mu     sync.Mutex
	reason error // nil once the fences were verified
}

// NewGate starts closed: nothing is verified yet.
func NewGate(c client.Reader, o options.Options) *Gate {
	return &Gate{c: c, o: o, reason: errors.New("the admission fences have not been checked yet")}
}

// fenceRetry bounds the wait between two checks of the fences: quick while an
// installation is being applied, then at most every 15 seconds.
var fenceRetry = wait.Backoff{Duration: 250 * time.Millisecond, Factor: 2, Steps: math.MaxInt32, Cap: 15 * time.Second}

// Wait checks the fences until they pass or ctx ends; each new reason to wait
// is logged once.
func (g *Gate) Wait(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx)
	backoff := fenceRetry
	var said string
	for {
		err := Verify(ctx, g.c, g.o)
		g.mu.Lock()
		g.reason = err
		g.mu.Unlock()
		if err == nil {
			log.Info("Admission fences verified")
			return nil
		}
		if err.Error() != said {
			said = err.Error()
			log.Info("Waiting for the admission fences before starting", "reason", said)
		}
		t := time.NewTimer(backoff.Step())
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("waiting for the admission fences: %w (last: %w)", ctx.Err(), err)
		case <-t.C:
		}
	}
}

// Reason is why the operator is not ready yet, nil once the fences passed.
func (g *Gate) Reason() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.reason
}

// ServeHTTP answers the operator's probes while it waits: /healthz says it is
// alive (a restart would not help), /readyz says why it is not ready yet.
func (g *Gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/healthz":
		_, _ = io.WriteString(w, "ok")
	case "/readyz":
		if reason := g.Reason(); reason != nil {
			http.Error(w, "not ready: "+reason.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok")
	default:
		http.NotFound(w, r)
	}
}

// Await waits for the fences as NewGate's gate does, serving the
// probes on o.ProbeAddr meanwhile; the address is free again when it returns,
// for the manager's own probes.
func Await(ctx context.Context, c client.Reader, o options.Options) error {
	g := NewGate(c, o)
	if o.ProbeAddr == "" || o.ProbeAddr == "0" {
		return g.Wait(ctx)
	}
	l, err := net.Listen("tcp", o.ProbeAddr)
	if err != nil {
		return fmt.Errorf("listen for probes on %s: %w", o.ProbeAddr, err)
	}
	srv := &http.Server{Handler: g, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	defer func() { _ = srv.Close() }()
	return g.Wait(ctx)
}
