package realnode_test

import (
	"archive/tar"
	"context"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/petri-dev/petri/hack/images"
)

// TestRecipeImagesPulledFromNodeRegistry builds Petri's images from the
// recipe users build with (hack/images), pushes them to the node's
// registry, and runs the example application's image as kubelet and
// containerd pull it: as the image's user 65532 (the pod does not say
// which), from the pushed digest, and with no shell in any image.
func TestRecipeImagesPulledFromNodeRegistry(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	require.NotEmpty(t, node.Registry)
	start := time.Now()
	built, err := images.Build(ctx, images.Specs, images.Options{Root: "../..", Version: "test"})
	require.NoError(t, err)
	t.Logf("built %d images in %s", len(built), time.Since(start).Round(time.Millisecond))
	start = time.Now()
	require.NoError(t, images.Push(ctx, node.Registry, "test", true, built))
	t.Logf("pushed them to %s in %s", node.Registry, time.Since(start).Round(time.Millisecond))

	for _, b := range built {
		ref, err := name.NewTag(images.Ref(node.Registry, b.Spec.Name, "test"), name.Insecure)
		require.NoError(t, err)
		img, err := remote.Image(ref, remote.WithContext(ctx))
		require.NoError(t, err, "pull %s back", ref)
		cfg, err := img.ConfigFile()
		require.NoError(t, err)
		require.Equal(t, "65532:65532", cfg.Config.User, b.Spec.Name)
		require.Equal(t, []string{b.Spec.Binary}, cfg.Config.Entrypoint, b.Spec.Name)
		layers, err := img.Layers()
		require.NoError(t, err)
		for _, l := range layers {
			for _, p := range layerPaths(t, l.Uncompressed) {
				require.NotContains(t, []string{"sh", "bash", "busybox", "ash", "dash"}, path.Base(p), "%s holds a shell at %s", b.Spec.Name, p)
				require.False(t, strings.HasPrefix(p, "bin/") || strings.HasPrefix(p, "usr/"), "%s holds %s", b.Spec.Name, p)
			}
		}
	}

	appRef := images.Ref(node.Registry, "example-app", "test")
	pushed, err := remote.Head(must(name.NewTag(appRef, name.Insecure)), remote.WithContext(ctx))
	require.NoError(t, err)
	pod := pulledAppPod(t, ctx, appRef)
	require.Len(t, pod.Status.ContainerStatuses, 1)
	require.Contains(t, pod.Status.ContainerStatuses[0].ImageID, pushed.Digest.String(), "the container runs the pushed image")
	uid := processUID(t, string(pod.UID), "/petri-example-app")
	require.Equal(t, "65532", uid, "the image's user, as the kernel has it")
}

// pulledAppPod runs the example application from ref with
// imagePullPolicy Always (a pull from the registry, never an imported
// image) under Pod Security restricted without naming a user, and returns
// it once Ready.
func pulledAppPod(t *testing.T, ctx context.Context, ref string) *corev1.Pod {
	t.Helper()
	cs := node.Cluster.Clientset
	ns, err := node.Cluster.CreateNamespace(ctx, "realnode-registry")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	}, 30*time.Second, 100*time.Millisecond, "default ServiceAccount")
	sc := restricted()
	sc.RunAsUser, sc.RunAsGroup = nil, nil
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "example-app"},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{
				Name:            "app",
				Image:           ref,
				ImagePullPolicy: corev1.PullAlways,
				Args:            []string{"serve", "--listen=:8080"},
				Env:             []corev1.EnvVar{{Name: "MESSAGE", Value: "pulled"}},
				Ports:           []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")}},
					PeriodSeconds: 1,
				},
				SecurityContext: sc,
			}},
		},
	}
	created := time.Now()
	_, err = cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		pod, err = cs.CoreV1().Pods(ns).Get(ctx, "example-app", metav1.GetOptions{})
		return err == nil && podReady(pod)
	}, 90*time.Second, 100*time.Millisecond, "pod example-app Ready")
	t.Logf("pod pulled and Ready %s after it was created", time.Since(created).Round(time.Millisecond))
	return pod
}

// layerPaths are the paths a layer's tar holds.
func layerPaths(t *testing.T, open func() (io.ReadCloser, error)) []string {
	t.Helper()
	rc, err := open()
	require.NoError(t, err)
	defer func() { _ = rc.Close() }()
	var paths []string
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return paths
		}
		require.NoError(t, err)
		paths = append(paths, strings.TrimPrefix(path.Clean(h.Name), "/"))
	}
}

// processUID is the real, effective, saved and file-system user of the
// process of the pod podUID whose command is cmd, read from /proc: the
// container's process is found by its cgroup (kubelet's pod<uid>).
func processUID(t *testing.T, podUID, cmd string) string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	for _, e := range entries {
		dir := filepath.Join("/proc", e.Name())
		cgroup, err := os.ReadFile(filepath.Join(dir, "cgroup"))
		if err != nil || !strings.Contains(string(cgroup), "pod"+podUID) {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join(dir, "cmdline"))
		if err != nil || !strings.HasPrefix(string(cmdline), cmd+"\x00") {
			continue
		}
		status, err := os.ReadFile(filepath.Join(dir, "status"))
		require.NoError(t, err)
		for _, line := range strings.Split(string(status), "\n") {
			if f := strings.Fields(line); len(f) == 5 && f[0] == "Uid:" {
				for _, id := range f[2:] {
					require.Equal(t, f[1], id, "real, effective, saved and fs uid agree: %s", line)
				}
				return f[1]
			}
		}
	}
	require.Fail(t, "no process "+cmd+" of pod "+podUID)
	return ""
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
