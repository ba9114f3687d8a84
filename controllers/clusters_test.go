package controllers_test

import (
	"context"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers"
	"github.com/petri-dev/petri/local/controlplane"
)

// workload is the second control plane of these tests, with its own node:
// a workload cluster, fenced and set up as the chart's workload mode sets
// one up (config/workload).
var workload struct {
	once    sync.Once
	cluster *controlplane.Cluster
	// operatorConfig is Petri's identity there.
	operatorConfig *rest.Config
	err            error
}

// workloadCluster starts the workload control plane once; the suite's
// TestMain stops it.
func workloadCluster(t testing.TB) *controlplane.Cluster {
	t.Helper()
	workload.once.Do(func() {
		workload.cluster, workload.err = startWorkloadCluster()
		if workload.err == nil {
			workload.operatorConfig, workload.err = workload.cluster.ServiceAccountConfig(context.Background(), mgmtNS, "petri-operator")
		}
	})
	require.NoError(t, workload.err)
	return workload.cluster
}

func startWorkloadCluster() (*controlplane.Cluster, error) {
	c, err := controlplane.Start(controlplane.Options{
		Images:     map[string]string{deployerImage: bins["petri-deployer"], helperImage: bins["petri-testhelper"], appImage: bins["app"]},
		ImageFiles: map[string]map[string]string{deployerImage: {imageCharts: chartsDir()}},
		SkipCRDs:   true,
	})
	if err != nil {
		return nil, err
	}
	stopWorkload = c.Stop
	root, err := controlplane.RepoRoot()
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	files := append([]string{filepath.Join(root, "config", "default", "namespaces.yaml")}, rbacManifests()...)
	fences, err := filepath.Glob(filepath.Join(root, "config", "fences", "*.yaml"))
	if err != nil {
		return nil, err
	}
	for _, f := range fences {
		if filepath.Base(f) != "kustomization.yaml" {
			files = append(files, f)
		}
	}
	if err := c.Apply(ctx, files...); err != nil {
		return nil, err
	}
	o := testOptions()
	for _, obj := range []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: mgmtNS, Name: controllers.FenceParams},
			Data: map[string]string{"deployer-image": o.DeployerImage, "step-images": helperImage, "shared-namespace": o.SharedNamespace}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: mgmtNS, Name: chartCASecret}, Data: map[string][]byte{"ca.crt": chartRepo.CA}},
	} {
		if err := c.Client.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, err
		}
	}
	return c, nil
}

// stopWorkload stops the workload control plane, when one was started.
var stopWorkload = func() {}

// register makes a WorkloadCluster named name in the management cluster
// whose credentials reach server (the workload cluster's API server, or a
// proxy in front of it) as Petri's identity there, and waits until it is
// Reachable.
func register(t testing.TB, name, server string, capacity int32, labels map[string]string) {
	t.Helper()
	registerKubeconfig(t, name, operatorKubeconfig(t, name, server), capacity, labels)
	waitCluster(t, name, "reachable", func(wc *petriv1.WorkloadCluster) bool {
		return apimeta.IsStatusConditionTrue(wc.Status.Conditions, petriv1.ConditionReachable)
	})
}

// operatorKubeconfig is a kubeconfig of Petri's identity in the workload
// cluster, as docs/clusters.md makes one: an inline token of its
// ServiceAccount, the cluster's CA inline.
func operatorKubeconfig(t testing.TB, name, server string) []byte {
	t.Helper()
	cfg := workload.operatorConfig
	kc := clientcmdapi.NewConfig()
	kc.Clusters[name] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["petri-operator"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: "petri-operator"}
	kc.CurrentContext = name
	data, err := clientcmd.Write(*kc)
	require.NoError(t, err)
	return data
}

// registerKubeconfig makes a WorkloadCluster named name in the management
// cluster with the kubeconfig data in its Secret; both are deleted when the
// test ends.
func registerKubeconfig(t testing.TB, name string, data []byte, capacity int32, labels map[string]string) {
	t.Helper()
	ctx := context.Background()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: mgmtNS, Name: "petri-cluster-" + name}, Data: map[string][]byte{"kubeconfig": data}}
	require.NoError(t, env.Client.Create(ctx, secret))
	wc := &petriv1.WorkloadCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: mgmtNS, Name: name, Labels: labels},
		Spec: petriv1.WorkloadClusterSpec{
			Credentials: petriv1.ClusterCredentials{Name: secret.Name},
			Capacity:    petriv1.ClusterCapacity{Environments: capacity},
		},
	}
	require.NoError(t, env.Client.Create(ctx, wc))
	t.Cleanup(func() {
		_ = env.Client.Delete(ctx, wc)
		_ = env.Client.Delete(ctx, secret)
	})
}

func waitCluster(t testing.TB, name, what string, cond func(*petriv1.WorkloadCluster) bool) *petriv1.WorkloadCluster {
	t.Helper()
	wc := &petriv1.WorkloadCluster{}
	ok := eventually(90*time.Second, func() bool {
		return env.Client.Get(context.Background(), client.ObjectKey{Namespace: mgmtNS, Name: name}, wc) == nil && cond(wc)
	})
	require.True(t, ok, "workload cluster %s never %s: %+v", name, what, wc.Status)
	return wc
}

func placedIn(cluster string, components ...petriv1.Component) func(string) *petriv1.EphemeralEnvironment {
	return func(name string) *petriv1.EphemeralEnvironment {
		e := newEnv(name, components...)
		e.Spec.Placement = &petriv1.Placement{Cluster: cluster}
		return e
	}
}

// proxy is a TCP proxy in front of the workload cluster's API server that
// a test can cut: every connection refused and every open one closed, as a
// cluster that went away.
type proxy struct {
	ln      net.Listener
	backend string
	mu      sync.Mutex
	conns   []net.Conn
	cut     bool
}

func newProxy(t testing.TB, backend string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &proxy{ln: ln, backend: backend}
	go p.serve()
	t.Cleanup(func() { _ = ln.Close() })
	return p
}

func (p *proxy) url() string { return "https://" + p.ln.Addr().String() }

func (p *proxy) serve() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			_ = in.Close()
			continue
		}
		out, err := net.Dial("tcp", p.backend)
		if err != nil {
			p.mu.Unlock()
			_ = in.Close()
			continue
		}
		p.conns = append(p.conns, in, out)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(out, in); _ = out.Close() }()
		go func() { _, _ = io.Copy(in, out); _ = in.Close() }()
	}
}

// setCut cuts the cluster off (true) or lets it answer again.
func (p *proxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.conns = nil
	}
}

func backendOf(t testing.TB, c *controlplane.Cluster) string {
	u, err := url.Parse(c.Config.Host)
	require.NoError(t, err)
	return u.Host
}

// remoteJobs lists the environment's Jobs in the workload cluster.
func remoteJobs(t *testing.T, c *controlplane.Cluster, e *petriv1.EphemeralEnvironment) []batchv1.Job {
	var list batchv1.JobList
	require.NoError(t, c.Client.List(context.Background(), &list, client.InNamespace(mgmtNS), client.MatchingLabels{petriv1.LabelEnvironmentUID: string(e.UID)}))
	return list.Items
}
