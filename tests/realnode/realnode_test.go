// Package realnode_test installs Petri on the real node (local/realnode:
// kubelet, containerd and runc) the ways users install it, from Petri's own
// images pulled from the node's registry, and plays a pull request's life
// and the faults only real containers show. It needs root: make test
// builds and installs the node (make node) and runs it as root.
package realnode_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/petri-dev/petri/local/controlplane"
	"github.com/petri-dev/petri/local/realnode"
	"github.com/petri-dev/petri/local/stack"
	"github.com/petri-dev/petri/tests/internal/stacktest"
)

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		// Never skipped: make test runs as root (sudo make test).
		os.Stderr.WriteString("tests/realnode runs the real node, which needs root: run 'sudo make test' (or 'sudo go test ./tests/realnode/' after 'sudo make node')\n")
		os.Exit(1)
	}
	ctrllog.SetLogger(logr.Discard())
	os.Exit(m.Run())
}

// start starts Petri on a real node, installed as install says, with the
// config repository made from examples/app/config-repo and the fault
// applications of testdata/faults.
func start(t *testing.T, install string, setup func(*stack.Options)) *stack.Stack {
	t.Helper()
	stacktest.RegisterInputs(t)
	root, err := controlplane.RepoRoot()
	require.NoError(t, err)
	assets, err := controlplane.AssetsDir()
	require.NoError(t, err)
	config := filepath.Join(t.TempDir(), "config-repo")
	require.NoError(t, os.CopyFS(config, os.DirFS(filepath.Join(root, "examples", "app", "config-repo"))))
	faults, err := os.ReadDir("testdata/faults")
	require.NoError(t, err)
	for _, f := range faults {
		data, err := os.ReadFile(filepath.Join("testdata/faults", f.Name()))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(config, "applications", f.Name()), data, 0o644))
	}
	opts := stack.Options{
		Dir:            filepath.Join(t.TempDir(), "run"),
		Binaries:       map[string]string{stack.BinKubectl: filepath.Join(assets, "kubectl")},
		IngressAddress: "localhost:0",
		ConfigSource:   config,
		Install:        install,
		Node:           stack.NodeReal,
		Report:         stack.NewReport(os.Stderr),
	}
	if setup != nil {
		setup(&opts)
	}
	// The start builds Petri's images (go build -trimpath, whose build cache
	// is not the tests'): from a cold cache, on 2 cores that also run the
	// other test packages, that alone took over 4.5 minutes.
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	s, err := stack.Start(ctx, opts)
	require.NoError(t, err)
	n := s.RealNode
	t.Cleanup(func() {
		s.Stop()
		// Nothing of the node is left on the host: processes, cgroups,
		// its network namespace and link (its routes with it), mounts.
		assert.Empty(t, realnode.Leftovers(n.Dir, n.Marker, n.NetNSInode), "the real node left this on the host")
	})
	return s
}

// play runs the demo's scenario and checks what it saw, on real
// containers.
func play(t *testing.T, s *stack.Stack, podSecurity string) *stack.Result {
	t.Helper()
	sc := &stack.Scenario{Stack: s, Report: stack.NewReport(os.Stderr), Number: 1, StepTimeout: 3 * time.Minute}
	start := time.Now()
	res, err := sc.Run(context.Background())
	require.NoError(t, err)
	t.Logf("the pull request's life on the real node: %s (open -> Ready and answering %s)", time.Since(start).Round(100*time.Millisecond), res.Steps[0].Duration.Round(100*time.Millisecond))

	require.Len(t, res.SHAs, 2)
	require.Len(t, res.Pages, 2)
	for i, sha := range res.SHAs {
		assert.Contains(t, res.Pages[i], "commit: "+sha+"\n", "through the ingress")
		assert.Contains(t, res.Real.InCluster[i], "commit: "+sha+"\n", "from a pod, by the Service's DNS name")
		assert.Contains(t, res.Real.Forwarded[i], "commit: "+sha+"\n", "through kubectl port-forward")
	}
	require.Len(t, res.Real.ReplicaSets, 2)
	assert.NotEqual(t, res.Real.ReplicaSets[0], res.Real.ReplicaSets[1], "the push rolled a new ReplicaSet")
	assert.Contains(t, res.Pages[1], "database: "+res.Database+" (ready)", "the shared workload was provisioned and bound")
	assert.Equal(t, "1", res.Sleep.Recorded)
	assert.NotEqual(t, 200, res.Sleep.AsleepAnswer)
	assert.Equal(t, podSecurity, res.Real.PodSecurity, "the installation's Pod Security level of workload namespaces")
	return res
}

// assertPetriPods checks that every pod of Petri's (operator, sync, every
// Job's) ran in its restricted namespace from the node's registry, and
// that the operator and sync never restarted.
func assertPetriPods(t *testing.T, s *stack.Stack) {
	t.Helper()
	ctx := context.Background()
	for _, ns := range []string{stack.ManagementNamespace, stack.SyncNamespace} {
		var n corev1.Namespace
		require.NoError(t, s.Client.Get(ctx, client.ObjectKey{Name: ns}, &n))
		assert.Equal(t, "restricted", n.Labels["pod-security.kubernetes.io/enforce"], "namespace %s", ns)
		var pods corev1.PodList
		require.NoError(t, s.Client.List(ctx, &pods, client.InNamespace(ns)))
		require.NotEmpty(t, pods.Items, ns)
		for _, p := range pods.Items {
			for _, c := range p.Status.ContainerStatuses {
				assert.True(t, strings.HasPrefix(c.Image, s.RealNode.Registry+"/"), "pod %s/%s runs %s", ns, p.Name, c.Image)
				assert.NotEmpty(t, c.ImageID, "pod %s/%s pulled its image", ns, p.Name)
				if strings.HasPrefix(p.Name, "petri-") {
					assert.Zero(t, c.RestartCount, "pod %s/%s restarted", ns, p.Name)
				}
			}
			assert.Contains(t, []corev1.PodPhase{corev1.PodRunning, corev1.PodSucceeded}, p.Status.Phase, "pod %s/%s", ns, p.Name)
		}
	}
}

// TestHelmInstall installs charts/petri with helm install (the Helm SDK),
// the fences on and the workload namespaces at Pod Security restricted
// (operator.workloadPodSecurity), then plays a pull request's life (the
// example application runs under restricted) and the faults.
func TestHelmInstall(t *testing.T) {
	s := start(t, stack.InstallChart, func(o *stack.Options) { o.WorkloadPodSecurity = "restricted" })
	play(t, s, "restricted")
	assertPetriPods(t, s)
	faults(t, s)
}

// TestKustomizeInstall installs config/default with kubectl apply -k and
// plays a pull request's life.
func TestKustomizeInstall(t *testing.T) {
	s := start(t, stack.InstallKustomize, nil)
	play(t, s, "baseline")
	assertPetriPods(t, s)
}
