package stack

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ClientNamespace is where the real node's scenario runs its client pods:
// another namespace than the environment's, under Pod Security restricted.
const ClientNamespace = "petri-client"

// RealResult is what the scenario observed on the real node only.
type RealResult struct {
	// InCluster are the pages a pod in ClientNamespace read from the
	// application's Service by its cluster DNS name, after each deploy.
	InCluster []string
	// Forwarded are the pages read through kubectl port-forward.
	Forwarded []string
	// ReplicaSets are the application's active ReplicaSet after each deploy.
	ReplicaSets []string
	// PodSecurity is the Pod Security level the environment's namespace
	// enforces.
	PodSecurity string
}

// checkRealNode checks, on the real node, what only real containers show:
// the application's Service answers a pod by its cluster DNS name and
// answers kubectl port-forward, from the deployed commit, and each deploy
// rolled a new ReplicaSet.
func (sc *Scenario) checkRealNode(ctx context.Context, res *Result, sha string) error {
	if sc.Stack.RealNode == nil {
		return nil
	}
	s, r := sc.Stack, sc.Report
	held, err := s.RealNode.Containers(ctx, res.Namespace)
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(held, func(c string) bool { return strings.HasPrefix(c, "container ") && strings.Contains(c, " app ") }) {
		return fmt.Errorf("containerd holds no container app of %s: %v", res.Namespace, held)
	}
	var ns corev1.Namespace
	if err := s.Client.Get(ctx, client.ObjectKey{Name: res.Namespace}, &ns); err != nil {
		return err
	}
	res.Real.PodSecurity = ns.Labels["pod-security.kubernetes.io/enforce"]
	r.Event("namespace %s enforces Pod Security %q", res.Namespace, res.Real.PodSecurity)
	url := fmt.Sprintf("http://%s.%s.svc.cluster.local/", demoComponent, res.Namespace)
	page, err := sc.RunClient(ctx, "get", url)
	if err != nil {
		return err
	}
	if !strings.Contains(page, "commit: "+sha) {
		return fmt.Errorf("%s answered a pod in %s with %q, not commit %s", url, ClientNamespace, page, sha)
	}
	res.Real.InCluster = append(res.Real.InCluster, page)
	r.Event("a pod in %s: petri-example-app get %s: commit %s", ClientNamespace, url, short(sha))
	page, err = s.PortForwardGet(ctx, res.Namespace, "svc/"+demoComponent, 80, "/")
	if err != nil {
		return err
	}
	if !strings.Contains(page, "commit: "+sha) {
		return fmt.Errorf("kubectl port-forward svc/%s answered %q, not commit %s", demoComponent, page, sha)
	}
	res.Real.Forwarded = append(res.Real.Forwarded, page)
	r.Event("$ kubectl -n %s port-forward svc/%s :80; curl: commit %s", res.Namespace, demoComponent, short(sha))
	rs, err := sc.activeReplicaSet(ctx, res.Namespace)
	if err != nil {
		return err
	}
	if n := len(res.Real.ReplicaSets); n > 0 && res.Real.ReplicaSets[n-1] == rs {
		return fmt.Errorf("the redeploy kept ReplicaSet %s: no new pods were rolled", rs)
	}
	res.Real.ReplicaSets = append(res.Real.ReplicaSets, rs)
	r.Event("ReplicaSet %s/%s runs the application", res.Namespace, rs)
	return nil
}

// activeReplicaSet is the application's ReplicaSet that has replicas; the
// older ones a rollout leaves are scaled to 0.
func (sc *Scenario) activeReplicaSet(ctx context.Context, ns string) (string, error) {
	var list appsv1.ReplicaSetList
	if err := sc.Stack.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return "", err
	}
	var active []string
	for _, rs := range list.Items {
		if rs.Spec.Replicas != nil && *rs.Spec.Replicas > 0 {
			active = append(active, rs.Name)
		}
	}
	if len(active) != 1 {
		return "", fmt.Errorf("namespace %s has %d ReplicaSets with replicas (%s), want 1", ns, len(active), strings.Join(active, ", "))
	}
	return active[0], nil
}

// checkRealNodeGone waits until containerd holds nothing of the closed
// environment's namespace: no sandbox, no container, running or exited.
func (sc *Scenario) checkRealNodeGone(ctx context.Context, ns string) error {
	n := sc.Stack.RealNode
	if n == nil {
		return nil
	}
	var left []string
	err := poll(ctx, sc.StepTimeout, func() (bool, error) {
		var err error
		left, err = n.Containers(ctx, ns)
		return err == nil && len(left) == 0, nil
	}, func() string { return "containerd still holds " + strings.Join(left, "; ") })
	if err != nil {
		return fmt.Errorf("containers of %s left on the node: %w", ns, err)
	}
	sc.Report.Event("containerd holds no sandbox nor container of %s (crictl pods, crictl ps -a)", ns)
	return nil
}

// RunClient runs the example application's image with args as a pod in
// ClientNamespace (restricted), waits until it has ended and returns its
// output; an error if it failed. The real node only.
func (sc *Scenario) RunClient(ctx context.Context, args ...string) (string, error) {
	s := sc.Stack
	if err := s.ensureClientNamespace(ctx); err != nil {
		return "", err
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "client-", Namespace: ClientNamespace},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: ptr.To(false),
			SecurityContext:              &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{
				Name: "client", Image: s.Image("example-app") + ":" + exampleAppTag, Args: args,
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
			}},
		},
	}
	if err := s.Client.Create(ctx, pod); err != nil {
		return "", fmt.Errorf("client pod: %w", err)
	}
	defer func() { _ = s.Client.Delete(context.Background(), pod) }()
	err := poll(ctx, sc.StepTimeout, func() (bool, error) {
		if err := s.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return false, nil
		}
		return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed, nil
	}, func() string { return fmt.Sprintf("client pod %s is %s", pod.Name, pod.Status.Phase) })
	if err != nil {
		return "", err
	}
	logs, err := s.Cluster.Clientset.CoreV1().Pods(ClientNamespace).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		return "", fmt.Errorf("logs of client pod %s: %w", pod.Name, err)
	}
	if pod.Status.Phase == corev1.PodFailed {
		return "", fmt.Errorf("client pod %s (%s) failed: %s", pod.Name, strings.Join(args, " "), strings.TrimSpace(string(logs)))
	}
	return string(logs), nil
}

func (s *Stack) ensureClientNamespace(ctx context.Context) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ClientNamespace, Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}}
	if err := s.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("namespace %s: %w", ClientNamespace, err)
	}
	return nil
}

var forwarding = regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) ->`)

// PortForwardGet runs kubectl port-forward to target (svc/NAME, pod/NAME)
// in ns on a free local port and returns what path answers through it.
func (s *Stack) PortForwardGet(ctx context.Context, ns, target string, port int, path string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.opts.Binaries[BinKubectl], "--kubeconfig", s.Cluster.Kubeconfig, "-n", ns, "port-forward", target, fmt.Sprintf(":%d", port))
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return "", err
	}
	defer func() { cancel(); _ = cmd.Wait() }()
	local := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if m := forwarding.FindStringSubmatch(sc.Text()); m != nil {
				local <- m[1]
				break
			}
		}
		_, _ = io.Copy(io.Discard, out)
		close(local)
	}()
	var p string
	select {
	case p = <-local:
	case <-ctx.Done():
	}
	if p == "" {
		return "", fmt.Errorf("kubectl port-forward %s in %s did not forward: %s", target, ns, strings.TrimSpace(stderr.String()))
	}
	code, body, err := httpGet(ctx, "http://127.0.0.1:"+p+path)
	if err != nil {
		return "", fmt.Errorf("through kubectl port-forward %s: %w", target, err)
	}
	if code != 200 {
		return "", fmt.Errorf("through kubectl port-forward %s: %d %s", target, code, body)
	}
	return body, nil
}
