package controllers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// FencePolicies are the ValidatingAdmissionPolicies that config/fences
// installs, each bound by a ValidatingAdmissionPolicyBinding of the same
// name. With them the API server itself refuses what the operator must never
// do (delete a namespace that is not Petri's, bind admin outside Petri's
// namespaces, run a Job as another identity or image), whatever its code does.
var FencePolicies = []string{"petri-operator-namespaces", "petri-operator-rolebindings", "petri-operator-jobs"}

// FenceParams is the ConfigMap in the management namespace that the fences
// read their settings from: the deployer image, the step images, the shared
// namespace, the workloads' Pod Security level.
const FenceParams = "petri-operator"

// ErrFencesMissing means the API server would not refuse what the fences
// refuse; the operator does not start unless told to run without them.
var ErrFencesMissing = errors.New("admission fences missing")

// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingadmissionpolicies;validatingadmissionpolicybindings,verbs=get

// VerifyFences checks that the fences are installed, enforcing, and agree with
// the operator's settings: every policy and its binding exist, the bindings
// deny, and the ConfigMap they read names the operator's deployer image,
// shared namespace and workload Pod Security level (a different image would
// make every Job refused).
// On a cluster without ValidatingAdmissionPolicy (Kubernetes before 1.30) it
// says so.
func VerifyFences(ctx context.Context, c client.Reader, o Options) error {
	for _, name := range FencePolicies {
		var p admissionregistrationv1.ValidatingAdmissionPolicy
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &p); err != nil {
			if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) && isMissingAPI(err) {
				return fmt.Errorf("%w: this cluster does not serve admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy (Kubernetes 1.30 or later); upgrade it, or start the operator with --require-fences=false to run without fences (docs/security.md)", ErrFencesMissing)
			}
			if apierrors.IsNotFound(err) {
				return fmt.Errorf("%w: ValidatingAdmissionPolicy %s not found; install config/fences (part of config/default), or start the operator with --require-fences=false (docs/security.md)", ErrFencesMissing, name)
			}
			return fmt.Errorf("get ValidatingAdmissionPolicy %s: %w", name, err)
		}
		var b admissionregistrationv1.ValidatingAdmissionPolicyBinding
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &b); err != nil {
			if apierrors.IsNotFound(err) {
				return fmt.Errorf("%w: ValidatingAdmissionPolicyBinding %s not found; install config/fences (part of config/default)", ErrFencesMissing, name)
			}
			return fmt.Errorf("get ValidatingAdmissionPolicyBinding %s: %w", name, err)
		}
		if b.Spec.PolicyName != name || !slices.Contains(b.Spec.ValidationActions, admissionregistrationv1.Deny) {
			return fmt.Errorf("%w: ValidatingAdmissionPolicyBinding %s must bind policy %s with validationActions [Deny]", ErrFencesMissing, name, name)
		}
	}
	var cm corev1.ConfigMap
	if err := c.Get(ctx, client.ObjectKey{Namespace: o.ManagementNamespace, Name: FenceParams}, &cm); err != nil {
		return fmt.Errorf("%w: the fences' settings, ConfigMap %s/%s: %w", ErrFencesMissing, o.ManagementNamespace, FenceParams, err)
	}
	if got := cm.Data["deployer-image"]; got != o.DeployerImage {
		return fmt.Errorf("ConfigMap %s/%s names deployer-image %q but the operator runs %q: the fences would refuse every Job; set one value in both", o.ManagementNamespace, FenceParams, got, o.DeployerImage)
	}
	if got := cm.Data["shared-namespace"]; got != o.SharedNamespace {
		return fmt.Errorf("ConfigMap %s/%s names shared-namespace %q but the operator uses %q: the fences would refuse the shared deployer's RoleBinding; set one value in both", o.ManagementNamespace, FenceParams, got, o.SharedNamespace)
	}
	got, ok := cm.Data["workload-pod-security"]
	if !ok {
		// An installation from before the setting: the fences assume the
		// default.
		got = DefaultWorkloadPodSecurity
	}
	if got != o.WorkloadPodSecurity {
		return fmt.Errorf("ConfigMap %s/%s names workload-pod-security %q but the operator uses %q: the fences would refuse every namespace it creates; set one value in both", o.ManagementNamespace, FenceParams, got, o.WorkloadPodSecurity)
	}
	return nil
}

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

// FenceGate holds the operator back until its fences are in place. An
// installation applies the operator's Deployment and the fences in one go, and
// a cluster may start the operator's pod before it has stored the policies:
// the operator then waits, alive but not ready, and says why, instead of
// exiting and being restarted.
type FenceGate struct {
	c client.Reader
	o Options

	mu     sync.Mutex
	reason error // nil once the fences were verified
}

// NewFenceGate starts closed: nothing is verified yet.
func NewFenceGate(c client.Reader, o Options) *FenceGate {
	return &FenceGate{c: c, o: o, reason: errors.New("the admission fences have not been checked yet")}
}

// fenceRetry bounds the wait between two checks of the fences: quick while an
// installation is being applied, then at most every 15 seconds.
var fenceRetry = wait.Backoff{Duration: 250 * time.Millisecond, Factor: 2, Steps: math.MaxInt32, Cap: 15 * time.Second}

// Wait checks the fences until they pass or ctx ends; each new reason to wait
// is logged once.
func (g *FenceGate) Wait(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx)
	backoff := fenceRetry
	var said string
	for {
		err := VerifyFences(ctx, g.c, g.o)
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
func (g *FenceGate) Reason() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.reason
}

// ServeHTTP answers the operator's probes while it waits: /healthz says it is
// alive (a restart would not help), /readyz says why it is not ready yet.
func (g *FenceGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
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

// AwaitFences waits for the fences as NewFenceGate's gate does, serving the
// probes on o.ProbeAddr meanwhile; the address is free again when it returns,
// for the manager's own probes.
func AwaitFences(ctx context.Context, c client.Reader, o Options) error {
	g := NewFenceGate(c, o)
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
