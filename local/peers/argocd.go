package peers

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/petri-dev/petri/local/controlplane"
	"github.com/petri-dev/petri/local/githubapi"
	"github.com/petri-dev/petri/local/internal/benchkit"
)

// argoCD is Argo CD's components as processes of this machine, each as its
// ServiceAccount from install.yaml: Redis, the repo-server (which runs
// helm and git), the application controller and the ApplicationSet
// controller with its webhook server.
type argoCD struct {
	procs      []*process
	webhookURL string
}

// startArgoCD installs Argo CD's CRDs, RBAC and settings, starts its
// components and applies the ApplicationSet.
func startArgoCD(ctx context.Context, c *controlplane.Cluster, bin, dir string, setup Setup, chartCA []byte, webhookSecret, token string, logf func(string, ...any)) (_ *argoCD, err error) {
	manifests := filepath.Join(bin, "argocd-manifests")
	crds, err := filepath.Glob(filepath.Join(manifests, "crds", "*-crd.yaml"))
	if err != nil || len(crds) == 0 {
		return nil, fmt.Errorf("no Argo CD CRDs in %s (make bench-peers builds them): %v", manifests, err)
	}
	if _, err := c.Clientset.CoreV1().Namespaces().Get(ctx, ArgoCDNamespace, metav1.GetOptions{}); err != nil {
		if err := applyYAML(ctx, c, dir, "argocd-namespace.yaml", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: "+ArgoCDNamespace+"\n"); err != nil {
			return nil, err
		}
	}
	if err := c.Apply(ctx, crds...); err != nil {
		return nil, fmt.Errorf("apply Argo CD's CRDs: %w", err)
	}
	install, err := os.ReadFile(filepath.Join(manifests, "install.yaml"))
	if err != nil {
		return nil, err
	}
	rbac, err := InstallRBAC(install)
	if err != nil {
		return nil, err
	}
	if err := applyYAML(ctx, c, dir, "argocd-rbac.yaml", string(rbac)); err != nil {
		return nil, err
	}
	if err := applyYAML(ctx, c, dir, "argocd-settings.yaml", ArgoCDSettingsYAML(webhookSecret, token, githubapi.SHA("server key "+webhookSecret))); err != nil {
		return nil, err
	}
	cfg, err := c.ServiceAccountConfig(ctx, ArgoCDNamespace, "argocd-application-controller")
	if err != nil {
		return nil, err
	}
	if err := applyYAML(ctx, c, dir, "argocd-cluster.yaml", ClusterSecretYAML(setup.Cluster, cfg.BearerToken, cfg.CAData)); err != nil {
		return nil, err
	}
	// The files hold secrets: they are not kept.
	_ = os.Remove(filepath.Join(dir, "argocd-settings.yaml"))
	_ = os.Remove(filepath.Join(dir, "argocd-cluster.yaml"))

	a := &argoCD{}
	defer func() {
		if err != nil {
			a.stop()
		}
	}()
	ports, err := benchkit.FreePorts(7)
	if err != nil {
		return nil, err
	}
	redisAddr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	repoAddr := fmt.Sprintf("127.0.0.1:%d", ports[1])
	home := filepath.Join(dir, "argocd-home")
	tmp := filepath.Join(dir, "argocd-tmp")
	tls := filepath.Join(dir, "argocd-tls")
	for _, d := range []string{home, tmp, tls} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	// argocd-tls-certs-cm's files, as the repo-server's volume has them:
	// one PEM file per host name.
	if err := os.WriteFile(filepath.Join(tls, "127.0.0.1"), chartCA, 0o644); err != nil {
		return nil, err
	}
	argocd := filepath.Join(bin, "argocd")
	kubeconfig := func(sa string) (string, error) {
		return c.WriteServiceAccountKubeconfig(ctx, ArgoCDNamespace, sa)
	}
	common := []string{"HOME=" + home, "TMPDIR=" + tmp, "PATH=" + bin + ":" + os.Getenv("PATH"), "ARGOCD_GPG_ENABLED=false", "ARGOCD_TLS_DATA_PATH=" + tls, "ARGOCD_NAMESPACE=" + ArgoCDNamespace, "NAMESPACE=" + ArgoCDNamespace}

	logf("starting Argo CD: redis-server, argocd-repo-server, argocd-application-controller, argocd-applicationset-controller")
	redis, err := startProcess("redis-server", "redis-server", "", []string{"--port", fmt.Sprint(ports[0]), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"}, nil, filepath.Join(dir, "redis.log"), logf)
	if err != nil {
		return nil, fmt.Errorf("%w (make bench-peers installs Debian's redis-server)", err)
	}
	a.procs = append(a.procs, redis)
	if err := redis.waitTCP(ctx, redisAddr, 30*time.Second); err != nil {
		return nil, err
	}

	kc, err := kubeconfig("argocd-repo-server")
	if err != nil {
		return nil, err
	}
	repo, err := startProcess("argocd-repo-server", argocd, "argocd-repo-server",
		[]string{"--address", "127.0.0.1", "--port", fmt.Sprint(ports[1]), "--metrics-address", "127.0.0.1", "--metrics-port", fmt.Sprint(ports[2]), "--redis", redisAddr},
		append(common, "KUBECONFIG="+kc), filepath.Join(dir, "argocd-repo-server.log"), logf)
	if err != nil {
		return nil, err
	}
	a.procs = append(a.procs, repo)
	if err := repo.waitHTTP(ctx, fmt.Sprintf("http://127.0.0.1:%d/healthz", ports[2]), 90*time.Second); err != nil {
		return nil, err
	}

	if kc, err = kubeconfig("argocd-application-controller"); err != nil {
		return nil, err
	}
	ctl, err := startProcess("argocd-application-controller", argocd, "argocd-application-controller",
		[]string{"--repo-server", repoAddr, "--redis", redisAddr, "--metrics-port", fmt.Sprint(ports[3])},
		append(common, "KUBECONFIG="+kc, "HOSTNAME=argocd-application-controller-0"), filepath.Join(dir, "argocd-application-controller.log"), logf)
	if err != nil {
		return nil, err
	}
	a.procs = append(a.procs, ctl)
	if err := ctl.waitHTTP(ctx, fmt.Sprintf("http://127.0.0.1:%d/healthz", ports[3]), 90*time.Second); err != nil {
		return nil, err
	}

	if kc, err = kubeconfig("argocd-applicationset-controller"); err != nil {
		return nil, err
	}
	appset, err := startProcess("argocd-applicationset-controller", argocd, "argocd-applicationset-controller",
		[]string{"--metrics-addr", fmt.Sprintf("127.0.0.1:%d", ports[4]), "--probe-addr", fmt.Sprintf("127.0.0.1:%d", ports[5]),
			"--webhook-addr", fmt.Sprintf("127.0.0.1:%d", ports[6]), "--argocd-repo-server", repoAddr},
		append(common, "KUBECONFIG="+kc), filepath.Join(dir, "argocd-applicationset-controller.log"), logf)
	if err != nil {
		return nil, err
	}
	a.procs = append(a.procs, appset)
	// Its probe server answers no /healthz: ready is its webhook server
	// listening, which it starts once its caches are synced.
	if err := appset.waitTCP(ctx, fmt.Sprintf("127.0.0.1:%d", ports[6]), 90*time.Second); err != nil {
		return nil, err
	}
	a.webhookURL = fmt.Sprintf("http://127.0.0.1:%d/api/webhook", ports[6])
	if err := applyYAML(ctx, c, dir, "applicationset.yaml", ApplicationSetYAML(setup)); err != nil {
		return nil, err
	}
	return a, nil
}

func (a *argoCD) stop() {
	for i := len(a.procs) - 1; i >= 0; i-- {
		a.procs[i].stop()
	}
}

// applyYAML writes content into dir/name and applies it.
func applyYAML(ctx context.Context, c *controlplane.Cluster, dir, name, content string) error {
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		return err
	}
	// Objects of CRDs applied a moment ago are refused until the API
	// server serves their kind.
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := c.Apply(ctx, path)
		if err == nil {
			return nil
		}
		if !strings.Contains(err.Error(), "no matches for kind") || time.Now().After(deadline) {
			return fmt.Errorf("apply %s: %w", strings.TrimSuffix(name, ".yaml"), err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
