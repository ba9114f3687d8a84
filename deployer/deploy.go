package deployer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/kube"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/storage"
	"helm.sh/helm/v3/pkg/storage/driver"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
)

// DefaultTimeout bounds hooks and, with Wait, readiness, when the caller
// gives none; it matches Helm's own default.
const DefaultTimeout = 5 * time.Minute

// MaxHistory is how many release records an upgrade keeps. Every deploy of
// a pull request's new commit is an upgrade, so without a bound a long-lived
// environment would collect one Secret per push.
const MaxHistory = 5

// Deployer runs Helm actions for the releases of one namespace. It holds the
// action.Configuration so that a deploy reads the state and acts with the
// same clients and storage.
type Deployer struct {
	cfg       *action.Configuration
	cs        kubernetes.Interface
	namespace string
	// helmLog is Helm's debug output, for the storage of each operation.
	helmLog action.DebugLog
}

// New builds a Deployer for namespace from a client loader (see
// NewRESTClientGetter). Helm's own output goes to log at V(1).
func New(getter genericclioptions.RESTClientGetter, namespace string, log logr.Logger) (*Deployer, error) {
	cfg, err := NewActionConfig(getter, namespace, log)
	if err != nil {
		return nil, err
	}
	cs, err := NewClientset(getter)
	if err != nil {
		return nil, err
	}
	return &Deployer{cfg: cfg, cs: cs, namespace: namespace, helmLog: helmDebugLog(log)}, nil
}

// DeployRequest is one component's desired release.
type DeployRequest struct {
	// Release is the Helm release name.
	Release string
	// Chart is the loaded chart (see LoadChart).
	Chart *chart.Chart
	// Values are the complete values the operator computed; they replace the
	// previous revision's values instead of merging with them, so the release
	// always equals the environment's spec.
	Values map[string]any
	// Wait waits for the release's workloads to be ready, reading their
	// pods meanwhile: a problem no wait cures (an image that cannot be
	// pulled, a container that keeps crashing, pods the namespace's Pod
	// Security level refuses) fails the deploy at once, and a wait that
	// times out names what was not ready (PodsError).
	Wait bool
	// Timeout bounds hooks and the wait; DefaultTimeout when zero.
	Timeout time.Duration
}

// ReadValues reads the values file the operator mounted. A missing file is an
// InvalidArguments (the Job is wrong); unparsable YAML is ValuesInvalid.
func ReadValues(path string) (map[string]any, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: values file: %w", ErrInvalidArguments, err)
	}
	vals, err := chartutil.ReadValues(data)
	if err != nil {
		return nil, fmt.Errorf("%w: values file %s is not a YAML map: %w", ErrValuesInvalid, path, err)
	}
	return vals, nil
}

// Deploy brings the release to the requested chart and values, choosing the
// Helm action from the stored release state (see ChooseAction).
func (d *Deployer) Deploy(ctx context.Context, req DeployRequest) (*release.Release, error) {
	log := logr.FromContextOrDiscard(ctx).WithValues("release", req.Release, "namespace", d.namespace)
	if err := chartutil.ValidateReleaseName(req.Release); err != nil {
		return nil, fmt.Errorf("%w: release name %q: %w", ErrInvalidArguments, req.Release, err)
	}
	if req.Chart == nil {
		return nil, fmt.Errorf("%w: no chart", ErrInvalidArguments)
	}
	if req.Timeout <= 0 {
		req.Timeout = DefaultTimeout
	}
	// Held for the whole operation: only then may a pending record be
	// unlocked (see ChooseAction).
	ctx, unlock, err := d.lockRelease(ctx, req.Release)
	if err != nil {
		return nil, err
	}
	defer unlock()
	cfg := d.operation(ctx, req.Release)
	latest, err := d.latest(cfg, req.Release)
	if err != nil {
		return nil, err
	}
	act := ChooseAction(latest)
	if latest != nil {
		log.Info("Chose action", "action", act, "revision", latest.Version, "status", latest.Info.Status)
	} else {
		log.Info("Chose action", "action", act)
	}

	var rel *release.Release
	switch act {
	case ActionInstall:
		rel, err = install(ctx, cfg, d.namespace, req)
	case ActionUnlockUpgrade:
		if err = unlockRecord(cfg, latest); err != nil {
			return nil, err
		}
		log.Info("Unlocked release left pending by an interrupted deployer", "revision", latest.Version)
		rel, err = upgrade(ctx, cfg, d.namespace, req)
	default:
		rel, err = upgrade(ctx, cfg, d.namespace, req)
	}
	if err != nil {
		if cause := context.Cause(ctx); errors.Is(cause, ErrReleaseLockLost) {
			// Helm says only that its context ended.
			err = fmt.Errorf("%w; the Helm operation was stopped: %w", cause, err)
		}
		return rel, err
	}
	log.Info("Deployed", "action", act, "revision", rel.Version, "status", rel.Info.Status)
	return rel, nil
}

// Undeploy uninstalls the release and waits for its objects to be gone. A
// release that does not exist is already undeployed: teardown must be
// idempotent, since its Job may run again after a pod was lost.
func (d *Deployer) Undeploy(ctx context.Context, name string, timeout time.Duration) error {
	log := logr.FromContextOrDiscard(ctx).WithValues("release", name, "namespace", d.namespace)
	if err := chartutil.ValidateReleaseName(name); err != nil {
		return fmt.Errorf("%w: release name %q: %w", ErrInvalidArguments, name, err)
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, unlock, err := d.lockRelease(ctx, name)
	if err != nil {
		return err
	}
	defer unlock()
	cfg := d.operation(ctx, name)
	latest, err := d.latest(cfg, name)
	if err != nil {
		return err
	}
	if latest == nil {
		log.Info("Release absent, nothing to undeploy")
		return nil
	}
	if err := uninstall(cfg, name, timeout); err != nil {
		return err
	}
	log.Info("Undeployed", "revision", latest.Version)
	return nil
}

// operation is the Helm configuration of one operation on a release, made
// once the deployer holds the release's lock: its storage lists the
// release's records once (releaseRecords), and its waits watch the
// release's pods (podWatch), with ctx for their reads.
func (d *Deployer) operation(ctx context.Context, name string) *action.Configuration {
	cfg := *d.cfg
	records := driver.NewSecrets(newReleaseRecords(d.cs.CoreV1().Secrets(d.namespace), name))
	records.Log = d.helmLog
	cfg.Releases = storage.Init(records)
	if kc, ok := d.cfg.KubeClient.(*kube.Client); ok {
		cfg.KubeClient = &podWatch{Client: kc, ctx: ctx, cs: d.cs, namespace: d.namespace}
	}
	return &cfg
}

// latest is the release's newest record in cfg's storage, nil when it has
// none.
func (d *Deployer) latest(cfg *action.Configuration, name string) (*release.Release, error) {
	rel, err := cfg.Releases.Last(name)
	if errors.Is(err, driver.ErrReleaseNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read release %s in %s: %w", name, d.namespace, err)
	}
	return rel, nil
}
