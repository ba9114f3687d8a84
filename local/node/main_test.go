package node_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/local/controlplane"
	"github.com/petri-dev/petri/local/node"
)

const helperImage = "petri.dev/testhelper"

var (
	env     *controlplane.Cluster
	helper  string
	scratch string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	scratch, err = os.MkdirTemp("", "localnode-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(scratch)
	bins, err := controlplane.Build(filepath.Join(scratch, "bin"), "./tests/cmd/petri-testhelper")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	helper = bins["petri-testhelper"]
	env, err = controlplane.Start(controlplane.Options{Images: map[string]string{helperImage: helper}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer env.Stop()
	return m.Run()
}

func namespace(t *testing.T) string {
	t.Helper()
	ns, err := env.CreateNamespace(context.Background(), strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")))
	require.NoError(t, err)
	return ns
}

func job(ns, name string, args ...string) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: batchv1.JobSpec{
			BackoffLimit: new(int32),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{
					Name:    "main",
					Image:   helperImage + ":v1",
					Command: []string{"/petri-testhelper"},
					Args:    args,
				}},
			}},
		},
	}
}

func jobCondition(ctx context.Context, ns, name string) func() batchv1.JobConditionType {
	return func() batchv1.JobConditionType {
		var j batchv1.Job
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &j); err != nil {
			return ""
		}
		for _, c := range j.Status.Conditions {
			if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
				return c.Type
			}
		}
		return ""
	}
}

// jobPods lists a Job's pods; an error reads as none, so it can be polled.
func jobPods(ns, name string) []corev1.Pod {
	var pods corev1.PodList
	if err := env.Client.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{"batch.kubernetes.io/job-name": name}); err != nil {
		return nil
	}
	return pods.Items
}

func TestJobRunsToCompletion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	require.NoError(t, env.Client.Create(ctx, job(ns, "ok", "succeed")))
	require.Eventually(t, func() bool { return jobCondition(ctx, ns, "ok")() == batchv1.JobComplete }, 30*time.Second, 50*time.Millisecond)

	pods := jobPods(ns, "ok")
	require.Len(t, pods, 1)
	pod := pods[0]
	assert.Equal(t, corev1.PodSucceeded, pod.Status.Phase)
	assert.Equal(t, env.Node.Name(), pod.Spec.NodeName, "the pod is bound to the local node")
	require.Len(t, pod.Status.ContainerStatuses, 1)
	require.NotNil(t, pod.Status.ContainerStatuses[0].State.Terminated)
	assert.Equal(t, int32(0), pod.Status.ContainerStatuses[0].State.Terminated.ExitCode)
	logs, err := os.ReadFile(env.Node.LogPath(ns, pod.Name, "main"))
	require.NoError(t, err)
	assert.Contains(t, string(logs), "succeeded as pod "+pod.Name, "the container's output is kept and HOSTNAME is the pod name")
}

func TestFailingJobReportsExitCodeAndMessage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	require.NoError(t, env.Client.Create(ctx, job(ns, "bad", "fail", "--termination-log=/dev/termination-log", "7", "chart not found: oci://nowhere/x")))
	require.Eventually(t, func() bool { return jobCondition(ctx, ns, "bad")() == batchv1.JobFailed }, 30*time.Second, 50*time.Millisecond)

	pods := jobPods(ns, "bad")
	require.Len(t, pods, 1, "backoffLimit 0: one pod, never run twice")
	term := pods[0].Status.ContainerStatuses[0].State.Terminated
	require.NotNil(t, term)
	assert.Equal(t, corev1.PodFailed, pods[0].Status.Phase)
	assert.Equal(t, int32(7), term.ExitCode)
	assert.Equal(t, "chart not found: oci://nowhere/x", term.Message)
}

func TestTwentyJobsRunConcurrently(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	release := filepath.Join(scratch, ns+"-release")
	const n = 20
	for i := range n {
		require.NoError(t, env.Client.Create(ctx, job(ns, fmt.Sprintf("j%02d", i), "wait-file", release)))
	}
	// All twenty are running at the same moment: none can finish before the
	// file appears.
	require.Eventually(t, func() bool {
		var pods corev1.PodList
		if err := env.Client.List(ctx, &pods, client.InNamespace(ns)); err != nil {
			return false
		}
		running := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running == n
	}, 60*time.Second, 100*time.Millisecond)
	require.NoError(t, os.WriteFile(release, nil, 0o644))
	for i := range n {
		name := fmt.Sprintf("j%02d", i)
		require.Eventually(t, func() bool { return jobCondition(ctx, ns, name)() == batchv1.JobComplete }, 60*time.Second, 100*time.Millisecond)
		assert.Len(t, jobPods(ns, name), 1, "job %s ran exactly one pod", name)
	}
}

func TestServiceAccountWithoutPermissionsIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	require.NoError(t, env.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nobody"}}))
	j := job(ns, "denied", "create-configmap", "--termination-log=/dev/termination-log", ns, "should-not-exist")
	j.Spec.Template.Spec.ServiceAccountName = "nobody"
	require.NoError(t, env.Client.Create(ctx, j))
	require.Eventually(t, func() bool { return jobCondition(ctx, ns, "denied")() == batchv1.JobFailed }, 30*time.Second, 50*time.Millisecond)
	msg := jobPods(ns, "denied")[0].Status.ContainerStatuses[0].State.Terminated.Message
	assert.Contains(t, msg, "forbidden")
	assert.Contains(t, msg, "system:serviceaccount:"+ns+":nobody", "the API server saw the pod's ServiceAccount")

	// The same pod identity with a RoleBinding succeeds: the refusal came from
	// RBAC, not from a broken token.
	require.NoError(t, env.Client.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nobody-edit"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "edit"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "nobody", Namespace: ns}},
	}))
	j = job(ns, "allowed", "create-configmap", ns, "created-by-pod")
	j.Spec.Template.Spec.ServiceAccountName = "nobody"
	require.NoError(t, env.Client.Create(ctx, j))
	require.Eventually(t, func() bool { return jobCondition(ctx, ns, "allowed")() == batchv1.JobComplete }, 30*time.Second, 50*time.Millisecond)
	var cm corev1.ConfigMap
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "created-by-pod"}, &cm))
}

func TestSecretVolumeAndEnvAreMaterialised(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	require.NoError(t, env.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "creds"},
		Data:       map[string][]byte{"password": []byte("s3cret"), "values.yaml": []byte("a: 1\n")},
	}))
	// The container mounts /tmp, so the file it writes for the test lives
	// outside /tmp.
	cacheDir, err := os.UserCacheDir()
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(cacheDir, 0o755))
	outDir, err := os.MkdirTemp(cacheDir, "petri-localnode-test-")
	require.NoError(t, err)
	defer os.RemoveAll(outDir)
	out := filepath.Join(outDir, "env")
	j := job(ns, "record", "record", out)
	c := &j.Spec.Template.Spec.Containers[0]
	c.Env = []corev1.EnvVar{
		{Name: "VALUES", Value: "/etc/values/values.yaml"},
		{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "password"}}},
		{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
		{Name: "GREETING", Value: "hello $(POD_NAMESPACE)"},
	}
	c.VolumeMounts = []corev1.VolumeMount{{Name: "values", MountPath: "/etc/values"}, {Name: "tmp", MountPath: "/tmp"}}
	j.Spec.Template.Spec.Volumes = []corev1.Volume{
		{Name: "values", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "creds"}}},
		{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}
	require.NoError(t, env.Client.Create(ctx, j))
	require.Eventually(t, func() bool { return jobCondition(ctx, ns, "record")() == batchv1.JobComplete }, 30*time.Second, 50*time.Millisecond)

	data, err := os.ReadFile(out)
	require.NoError(t, err)
	vars := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			vars[k] = v
		}
	}
	assert.Equal(t, "s3cret", vars["PASSWORD"])
	assert.Equal(t, ns, vars["POD_NAMESPACE"])
	assert.Equal(t, "hello "+ns, vars["GREETING"])
	require.NotEqual(t, "/etc/values/values.yaml", vars["VALUES"], "a path under a mount is rewritten to the local copy")
	values, err := os.ReadFile(vars["VALUES"])
	require.NoError(t, err)
	assert.Equal(t, "a: 1\n", string(values))
	// The node's own paths are never rewritten, even where they lie under a
	// directory the container mounts (/tmp here).
	_, err = os.Stat(vars["KUBECONFIG"])
	assert.NoError(t, err, "KUBECONFIG %q points at the pod's kubeconfig", vars["KUBECONFIG"])
}

// A node that restarts while its pod runs never runs that pod again: it marks
// the pod failed and the Job controller makes a new pod.
func TestRestartedNodeNeverRunsAPodTwice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	const image = "petri.dev/testhelper-restart"
	newNode := func() (*node.Node, context.CancelFunc, chan error) {
		n, err := node.New(env.Config, node.Options{Name: "restart-node", Images: map[string]string{image: helper}, Dir: filepath.Join(scratch, ns)})
		require.NoError(t, err)
		nctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- n.Run(nctx) }()
		return n, cancel, done
	}
	node, stop, done := newNode()

	j := job(ns, "restart", "block")
	one := int32(1)
	j.Spec.BackoffLimit = &one
	j.Spec.Template.Spec.Containers[0].Image = image
	require.NoError(t, env.Client.Create(ctx, j))
	var first corev1.Pod
	require.Eventually(t, func() bool {
		pods := jobPods(ns, "restart")
		if len(pods) == 1 && pods[0].Status.Phase == corev1.PodRunning {
			first = pods[0]
			return true
		}
		return false
	}, 30*time.Second, 50*time.Millisecond)
	// The process itself is up (Running is reported as it starts).
	require.Eventually(t, func() bool {
		logs, err := os.ReadFile(node.LogPath(ns, first.Name, "main"))
		return err == nil && strings.Contains(string(logs), "blocking until killed")
	}, 30*time.Second, 20*time.Millisecond)

	stop()
	require.NoError(t, <-done)
	node, stop, done = newNode()
	defer func() { stop(); <-done }()

	require.Eventually(t, func() bool {
		var p corev1.Pod
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(&first), &p)
		return err == nil && p.Status.Phase == corev1.PodFailed && p.Status.Reason == "NodeRestarted"
	}, 30*time.Second, 50*time.Millisecond)
	// The replacement pod runs on the new node; the first pod's log shows a
	// single start.
	require.Eventually(t, func() bool {
		for _, p := range jobPods(ns, "restart") {
			if p.UID != first.UID && p.Status.Phase == corev1.PodRunning {
				return true
			}
		}
		return false
	}, 30*time.Second, 50*time.Millisecond)
	logs, err := os.ReadFile(node.LogPath(ns, first.Name, "main"))
	require.NoError(t, err)
	assert.Equal(t, 1, strings.Count(string(logs), "blocking until killed"))
}

// Kill ends a running pod the way an out-of-memory kill does.
func TestKillFailsThePod(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	require.NoError(t, env.Client.Create(ctx, job(ns, "victim", "block")))
	var pod corev1.Pod
	require.Eventually(t, func() bool {
		pods := jobPods(ns, "victim")
		if len(pods) == 1 && pods[0].Status.Phase == corev1.PodRunning {
			pod = pods[0]
			return true
		}
		return false
	}, 30*time.Second, 50*time.Millisecond)
	require.NoError(t, env.Node.Kill(ns, pod.Name))
	require.Eventually(t, func() bool { return jobCondition(ctx, ns, "victim")() == batchv1.JobFailed }, 30*time.Second, 50*time.Millisecond)
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(&pod), &pod))
	assert.Equal(t, int32(137), pod.Status.ContainerStatuses[0].State.Terminated.ExitCode)
}

// KillContainer kills a container's process the way SIGKILL on a node does:
// the pod stays, and under restartPolicy Always the container starts again
// with the kill (exit 137) as its last state.
func TestKillContainerRestartsIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sigkilled"},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyAlways, Containers: []corev1.Container{{
			Name: "main", Image: helperImage, Command: []string{"/petri-testhelper"}, Args: []string{"block"},
		}}},
	}
	require.NoError(t, env.Client.Create(ctx, pod))
	running := func(restarts int32) func() bool {
		return func() bool {
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil || len(pod.Status.ContainerStatuses) == 0 {
				return false
			}
			cs := pod.Status.ContainerStatuses[0]
			return cs.RestartCount == restarts && cs.State.Running != nil
		}
	}
	require.Eventually(t, running(0), 30*time.Second, 50*time.Millisecond)
	require.Eventually(t, func() bool { return env.Node.KillContainer(ctx, ns, pod.Name, "main") == nil }, 10*time.Second, 50*time.Millisecond)
	require.Eventually(t, running(1), 30*time.Second, 50*time.Millisecond, "the killed container runs again")
	assert.Equal(t, corev1.PodRunning, pod.Status.Phase)
	last := pod.Status.ContainerStatuses[0].LastTerminationState.Terminated
	require.NotNil(t, last)
	assert.Equal(t, int32(137), last.ExitCode)
	assert.Error(t, env.Node.KillContainer(ctx, ns, pod.Name, "other"), "a container that does not run cannot be killed")
	require.NoError(t, env.Client.Delete(ctx, pod))
}

// A Deployment's pods each get their own local port, become Ready only when
// their readiness probe passes, and are reached by Service name through the
// node's proxy (as another pod does) and through an Ingress rule.
func TestServicesIngressAndReadiness(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	readyFile := filepath.Join(scratch, ns+"-ready")
	labels := map[string]string{"app": "web"}
	replicas := int32(2)
	require.NoError(t, env.Client.Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name:    "web",
					Image:   helperImage + ":v1",
					Command: []string{"/petri-testhelper"},
					Args:    []string{"serve", "--listen=:8080", "--ready-file=" + readyFile},
					Ports:   []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
						HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")},
					}},
				}}},
			},
		},
	}))
	require.NoError(t, env.Client.Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec:       corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}},
	}))
	prefix := networkingv1.PathTypePrefix
	require.NoError(t, env.Client.Create(ctx, &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{{
			Host: ns + ".example.test",
			IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{
				Path: "/", PathType: &prefix,
				Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "web", Port: networkingv1.ServiceBackendPort{Number: 80}}},
			}}}},
		}}},
	}))

	running := func() []corev1.Pod {
		var pods corev1.PodList
		if err := env.Client.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels(labels)); err != nil {
			return nil
		}
		var out []corev1.Pod
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && len(node.PodPorts(&p)) == 1 {
				out = append(out, p)
			}
		}
		return out
	}
	require.Eventually(t, func() bool { return len(running()) == 2 }, 30*time.Second, 50*time.Millisecond)
	pods := running()
	assert.NotEqual(t, node.PodPorts(&pods[0])[8080], node.PodPorts(&pods[1])[8080], "each pod listens on its own local port")
	for _, p := range pods {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				assert.Equal(t, corev1.ConditionFalse, c.Status, "pod %s is not ready while its probe fails", p.Name)
			}
		}
	}
	var dep appsv1.Deployment
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &dep))
	assert.Zero(t, dep.Status.AvailableReplicas)

	require.NoError(t, os.WriteFile(readyFile, nil, 0o644))
	require.Eventually(t, func() bool {
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &dep)
		return err == nil && dep.Status.AvailableReplicas == 2
	}, 30*time.Second, 50*time.Millisecond, "the Deployment becomes available once the probes pass")

	// Another pod reaches the Service by its cluster DNS name.
	require.NoError(t, env.Client.Create(ctx, job(ns, "fetch", "fetch", "--termination-log=/dev/termination-log", "http://web."+ns+".svc.cluster.local/hello")))
	require.Eventually(t, func() bool { return jobCondition(ctx, ns, "fetch")() == batchv1.JobComplete }, 30*time.Second, 50*time.Millisecond)
	msg := jobPods(ns, "fetch")[0].Status.ContainerStatuses[0].State.Terminated.Message
	assert.Regexp(t, `^pod web-[-a-z0-9]+ path /hello host web\.`+ns+`\.svc\.cluster\.local$`, msg)

	// The ingress routes by host and keeps the path.
	ingress := httptest.NewServer(env.Node.Ingress())
	defer ingress.Close()
	req, err := http.NewRequest(http.MethodGet, ingress.URL+"/a/b", nil)
	require.NoError(t, err)
	req.Host = ns + ".example.test"
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	assert.Contains(t, string(body), "path /a/b host "+ns+".example.test")

	req.Host = "unknown.example.test"
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
}

// A container of a pod with restartPolicy Always is started again after it
// exits, with the restart counted and its exit kept as the last state.
func TestRestartPolicyAlwaysRestartsTheContainer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "crasher"},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyAlways, Containers: []corev1.Container{{
			Name: "main", Image: helperImage, Command: []string{"/petri-testhelper"}, Args: []string{"fail", "--termination-log=/dev/termination-log", "3", "crashed"},
		}}},
	}
	require.NoError(t, env.Client.Create(ctx, pod))
	require.Eventually(t, func() bool {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil || len(pod.Status.ContainerStatuses) == 0 {
			return false
		}
		return pod.Status.ContainerStatuses[0].RestartCount >= 2
	}, 30*time.Second, 50*time.Millisecond)
	assert.Equal(t, corev1.PodRunning, pod.Status.Phase)
	last := pod.Status.ContainerStatuses[0].LastTerminationState.Terminated
	require.NotNil(t, last)
	assert.Equal(t, int32(3), last.ExitCode)
	assert.Equal(t, "crashed", last.Message)
	require.NoError(t, env.Client.Delete(ctx, pod))
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{}))
	}, 30*time.Second, 50*time.Millisecond, "a deleted pod is stopped and removed")
}

// Paths under a directory the image carries are rewritten to the local copy
// of those files; a mount over part of it wins.
func TestImageFilesAreMapped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	const image = "petri.dev/testhelper-files"
	charts := t.TempDir()
	node, err := node.New(env.Config, node.Options{
		Name: "files-node", Images: map[string]string{image: helper}, Dir: filepath.Join(scratch, ns),
		ImageFiles: map[string]map[string]string{image: {"/charts": charts}},
	})
	require.NoError(t, err)
	nctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- node.Run(nctx) }()
	defer func() { cancel(); <-done }()

	cacheDir, err := os.UserCacheDir()
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(cacheDir, 0o755))
	outDir, err := os.MkdirTemp(cacheDir, "petri-localnode-test-")
	require.NoError(t, err)
	defer os.RemoveAll(outDir)
	out := filepath.Join(outDir, "env")
	j := job(ns, "files", "record", out)
	c := &j.Spec.Template.Spec.Containers[0]
	c.Image = image + ":v1"
	c.Env = []corev1.EnvVar{{Name: "CHART", Value: "/charts/web"}, {Name: "OTHER", Value: "/chartsx"}, {Name: "LISTEN", Value: ":9090"}}
	require.NoError(t, env.Client.Create(ctx, j))
	require.Eventually(t, func() bool { return jobCondition(ctx, ns, "files")() == batchv1.JobComplete }, 30*time.Second, 50*time.Millisecond)
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.Contains(t, string(data), "CHART="+filepath.Join(charts, "web")+"\n")
	assert.Contains(t, string(data), "OTHER=/chartsx\n", "only whole path elements are rewritten")
	assert.Contains(t, string(data), "LISTEN=:9090\n", "an address on an undeclared port is left alone")
}

// A pod whose image the node does not know is never claimed: it stays
// Pending and unbound, as on a cluster without a node that can run it.
func TestUnknownImageStaysPending(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	unknown := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "elsewhere"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "db", Image: "postgres:16"}}},
	}
	require.NoError(t, env.Client.Create(ctx, unknown))
	// A known pod created after it runs to completion, so the node has seen
	// both.
	require.NoError(t, env.Client.Create(ctx, job(ns, "after", "succeed")))
	require.Eventually(t, func() bool { return jobCondition(ctx, ns, "after")() == batchv1.JobComplete }, 30*time.Second, 50*time.Millisecond)
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(unknown), unknown))
	assert.Equal(t, corev1.PodPending, unknown.Status.Phase)
	assert.Empty(t, unknown.Spec.NodeName)
}

// A pod that finishes while the API server is down still reports it once
// the API server is back, as a kubelet keeps syncing pod status: its Job
// completes.
func TestPodStatusSurvivesAPIServerRestart(t *testing.T) {
	c, err := controlplane.Start(controlplane.Options{Images: map[string]string{helperImage: helper}})
	require.NoError(t, err)
	t.Cleanup(c.Stop)
	ctx := context.Background()
	ns, err := c.CreateNamespace(ctx, "restart")
	require.NoError(t, err)
	done := filepath.Join(scratch, "restart-apiserver-done")
	j := job(ns, "outlives", "wait-file", done)
	require.NoError(t, c.Client.Create(ctx, j))
	require.Eventually(t, func() bool {
		var pods corev1.PodList
		if err := c.Client.List(ctx, &pods, client.InNamespace(ns)); err != nil || len(pods.Items) != 1 {
			return false
		}
		return pods.Items[0].Status.Phase == corev1.PodRunning
	}, 30*time.Second, 50*time.Millisecond)

	// The pod ends while the API server is down.
	restarted := make(chan error, 1)
	go func() { restarted <- c.RestartAPIServer(ctx, 3*time.Second) }()
	require.Eventually(t, func() bool {
		_, err := c.Clientset.Discovery().ServerVersion()
		return err != nil
	}, 10*time.Second, 20*time.Millisecond, "the API server goes down")
	require.NoError(t, os.WriteFile(done, nil, 0o644))
	require.NoError(t, <-restarted)

	require.Eventually(t, func() bool {
		var got batchv1.Job
		if err := c.Client.Get(ctx, client.ObjectKeyFromObject(j), &got); err != nil {
			return false
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == batchv1.JobComplete && cond.Status == corev1.ConditionTrue {
				return true
			}
		}
		return false
	}, 60*time.Second, 100*time.Millisecond, "the pod's success reaches the API server after its restart")
}

// lostAnswers performs requests whose path ends in suffix and then, the
// first times, reports a broken connection instead of the answer: the API
// server acted, the client never heard, as when the API server is killed
// mid-request.
type lostAnswers struct {
	next   http.RoundTripper
	suffix string
	lose   atomic.Int32
}

func (l *lostAnswers) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := l.next.RoundTrip(r)
	if err == nil && r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, l.suffix) && l.lose.Add(-1) >= 0 {
		resp.Body.Close()
		return nil, fmt.Errorf("connection reset by peer (answer to %s lost by the test)", r.URL.Path)
	}
	return resp, err
}

// A pod whose binding the API server made but whose answer the node never
// got (the API server restarted mid-request) is still run: the node retries
// the binding, is told the pod is already bound, and finds it bound to
// itself. Before, it took that answer for another node's and left the pod
// Pending for good.
func TestPodBoundWithTheAnswerLostStillRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	const image = "petri.dev/testhelper-lostbind"
	lost := &lostAnswers{suffix: "/binding"}
	lost.lose.Store(1)
	cfg := rest.CopyConfig(env.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { lost.next = rt; return lost }
	n, err := node.New(cfg, node.Options{Name: "lostbind-node", Images: map[string]string{image: helper}, Dir: filepath.Join(scratch, ns)})
	require.NoError(t, err)
	nctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- n.Run(nctx) }()
	t.Cleanup(func() { cancel(); <-done })

	j := job(ns, "lostbind", "succeed")
	j.Spec.Template.Spec.Containers[0].Image = image
	require.NoError(t, env.Client.Create(ctx, j))
	require.Eventually(t, func() bool { return jobCondition(ctx, ns, "lostbind")() == batchv1.JobComplete }, 60*time.Second, 50*time.Millisecond,
		"the Job completes on the node that bound its pod")
	assert.Equal(t, int32(-1), lost.lose.Load(), "one binding answer was lost")
}
