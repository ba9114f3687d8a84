package realnode_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/petri-dev/petri/local/realnode"
)

const appImage = "petri.local/realnode-testapp:v1"

var (
	node *realnode.Node
	// hostBefore is what the host had before the node started, for the
	// check that Stop leaves it so.
	hostBefore hostState
)

func TestMain(m *testing.M) {
	if parent := os.Getenv(childEnv); parent != "" {
		os.Exit(runChild(parent))
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// What killed runs left is swept first (Start would), so the host is
	// compared with itself as it was without any node.
	if err := realnode.Sweep(os.TempDir()); err != nil {
		fmt.Fprintln(os.Stderr, "sweep:", err)
		return 1
	}
	hostBefore = readHost()
	start := time.Now()
	var err error
	node, err = realnode.Start(ctx, realnode.Options{Registry: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start the real node:", err)
		return 1
	}
	defer node.Stop()
	fmt.Printf("real node %s Ready with CoreDNS available in %s\n", node.Name, time.Since(start).Round(time.Millisecond))
	if err := loadTestApp(ctx, node); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// loadTestApp builds internal/testapp statically and loads it as appImage.
func loadTestApp(ctx context.Context, n *realnode.Node) error {
	dir, err := os.MkdirTemp("", "realnode-testapp-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	bin := filepath.Join(dir, "testapp")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./internal/testapp")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build testapp: %w: %s", err, out)
	}
	img, err := realnode.Image(map[string]realnode.File{"/testapp": {Source: bin, Mode: 0o755}}, "/testapp")
	if err != nil {
		return err
	}
	return n.LoadImage(ctx, appImage, img)
}

// restricted is the securityContext Pod Security "restricted" asks for, as
// user 65532.
func restricted() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		RunAsNonRoot:             ptr.To(true),
		RunAsUser:                ptr.To[int64](65532),
		RunAsGroup:               ptr.To[int64](65532),
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

func TestPodReadyAndReachedThroughServiceByDNSName(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cs := node.Cluster.Clientset
	ns, err := node.Cluster.CreateNamespace(ctx, "realnode")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	}, 30*time.Second, 100*time.Millisecond, "default ServiceAccount")

	labels := map[string]string{"app": "hello"}
	created := time.Now()
	_, err = cs.CoreV1().Pods(ns).Create(ctx, helloPod(labels), metav1.CreateOptions{})
	require.NoError(t, err)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "hello"},
		Spec:       corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromString("http")}}},
	}
	svcCreated, err := cs.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NotEmpty(t, svcCreated.Spec.ClusterIP)

	var pod *corev1.Pod
	require.Eventually(t, func() bool {
		pod, err = cs.CoreV1().Pods(ns).Get(ctx, "hello", metav1.GetOptions{})
		return err == nil && podReady(pod)
	}, 60*time.Second, 100*time.Millisecond, "pod hello Ready")
	t.Logf("pod Ready %s after it was created", time.Since(created).Round(time.Millisecond))
	require.Equal(t, node.Name, pod.Spec.NodeName, "scheduled onto the real node")
	require.NotEmpty(t, pod.Status.PodIP)
	require.NotEqual(t, node.NodeIP, pod.Status.PodIP, "a pod network address, not the node's")

	client := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "client"},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name:            "client",
				Image:           appImage,
				ImagePullPolicy: corev1.PullNever,
				Args:            []string{"fetch", fmt.Sprintf("http://hello.%s.svc.%s/", ns, realnode.ClusterDomain)},
				SecurityContext: restricted(),
			}},
		},
	}
	_, err = cs.CoreV1().Pods(ns).Create(ctx, client, metav1.CreateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		pod, err = cs.CoreV1().Pods(ns).Get(ctx, "client", metav1.GetOptions{})
		return err == nil && (pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed)
	}, 75*time.Second, 200*time.Millisecond, "client pod finished")
	require.Len(t, pod.Status.ContainerStatuses, 1)
	term := pod.Status.ContainerStatuses[0].State.Terminated
	require.NotNil(t, term)
	require.Equal(t, corev1.PodSucceeded, pod.Status.Phase, "client: %s", term.Message)
	// The server answered through the Service's DNS name, as user 65532
	// on a read-only root.
	require.Contains(t, term.Message, "host=hello ")
	require.Contains(t, term.Message, "uid=65532 ")
	require.Contains(t, term.Message, "rootfs=read-only")
	// The client reached the API server in-cluster: the kubernetes Service
	// through kube-proxy, its serving certificate verified with the
	// ServiceAccount's CA, its token accepted.
	require.Contains(t, term.Message, "api=200 OK")
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// helloPod serves on 8080 as user 65532 with a read-only root, every
// capability dropped, an emptyDir and a readiness probe that passes once the
// emptyDir holds its file.
func helloPod(labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hello", Labels: labels},
		Spec: corev1.PodSpec{
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			Containers: []corev1.Container{{
				Name:            "hello",
				Image:           appImage,
				ImagePullPolicy: corev1.PullNever,
				Args:            []string{"serve", "/data"},
				Ports:           []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				VolumeMounts:    []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("http")}},
					PeriodSeconds: 1,
				},
				SecurityContext: restricted(),
			}},
		},
	}
}
