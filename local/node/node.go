// Package node stands in for a kubelet and a scheduler on a local control
// plane that has neither: it places and claims pods whose container images
// it knows, runs each container as a local process and reports the pod's
// status back through the API server. The Job controller, RBAC and
// everything else stay the real thing.
//
// It is not a container runtime: processes share the machine's file system,
// network and user, there are no cgroups, resource limits, images or image
// pulls, and liveness and startup probes are not run.
//
// The rules that make a local process look like a container:
//
//   - Image: the image name (without tag) maps to a local binary. The binary is
//     the entrypoint: argv is command[1:] followed by args, or args alone.
//   - Identity: the process gets a KUBECONFIG that authenticates as the pod's
//     ServiceAccount with a token from the TokenRequest API, bound to the pod.
//     Programs read it through the standard client loading rules, so they run
//     unchanged in a cluster (in-cluster config) and here.
//   - Files: Secret, ConfigMap, projected and emptyDir volumes are written to a
//     directory per pod. Every argument or environment value that is a volume's
//     mountPath (or lies under one), or the terminationMessagePath, is rewritten
//     to the local copy; so is a path under a directory the image carries, when
//     Options.ImageFiles says where those files are here. Apart from listen
//     addresses (below), nothing else is rewritten.
//   - Placement: the node reports the machine's CPUs and memory as its
//     allocatable (Options.Allocatable) and, as the scheduler would, runs
//     pods only while their requests fit in it together: a pod that does
//     not fit waits, unbound and Pending, until running pods finish (in the
//     order pods arrived, a smaller one passing a larger one). A pod that
//     requests more than the whole node is marked PodScheduled false,
//     Unschedulable, and never runs.
//   - Claim: a pod is claimed by binding it to this node through the pods/binding
//     subresource, which succeeds once; a pod is therefore never run twice. A pod
//     found bound to this node but unknown to this process (the node restarted)
//     is marked Failed, never re-run.
//   - Ports: pods share the machine's network, so every TCP containerPort gets a
//     free port on 127.0.0.1, recorded on the pod in the annotation
//     localnode.petri.dev/ports ("8080=41234"). An argument or environment value
//     that is a listen address on a declared port (":8080", "0.0.0.0:8080",
//     "--listen=:8080") is rewritten to 127.0.0.1 and the local port.
//   - Readiness: a container with an httpGet or tcpSocket readiness probe is
//     Ready once the probe passes on its local port (probed more often than a
//     kubelet would); without a probe it is Ready when started. Liveness and
//     startup probes are not run.
//   - Status: a pod is reported Running when the node starts it, then with
//     its outcome. A pod that runs to completion (restartPolicy Never, no
//     readiness probe) and finishes within 100 ms is reported once, with its
//     outcome, as a kubelet's status sync finds such a pod already finished.
//     Status writes start from the newest copy of the pod the node has seen.
//   - Restarts: under restartPolicy Always (OnFailure: after a failure) an
//     exited container is started again after a back-off, with restartCount and
//     lastState as the kubelet reports them.
//   - Services: every process gets HTTP_PROXY pointing at the node's service
//     proxy, which sends http://NAME.NAMESPACE.svc[.cluster.local][:PORT]/ to a
//     ready pod behind that Service (any other host is reached directly;
//     loopback addresses never use a proxy). TCP clients reach a Service with
//     "CONNECT NAME.NAMESPACE.svc:PORT" to the same proxy (a database driver
//     dialing through HTTP_PROXY). Ingress serves Ingress rules the same way,
//     for people and tests outside the "cluster".
//   - Tokens: the kubeconfig names the token file, which is renewed while the
//     pod runs; clients re-read it, as they do in a cluster.
//   - Logs: every container's output goes to a file (LogPath), and the node
//     registers a Node object pointing the API server at a loopback kubelet
//     endpoint that serves it, so pods/log (kubectl logs) works as in a
//     cluster (kubelet.go).
package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
)

// Options configure a local node.
type Options struct {
	// Name is the node name pods are bound to.
	Name string
	// Images maps an image name (registry/repository, without tag or digest)
	// to the local binary that plays it.
	Images map[string]string
	// Dir holds one directory per pod (volumes, kubeconfig, termination log)
	// and the logs directory.
	Dir string
	// Host is the API server URL written into pods' kubeconfigs; defaults to
	// the node's own rest.Config host.
	Host string
	// Env is added to every process (for instance PATH); the container's own
	// environment wins.
	Env []string
	// ImageFiles maps, per image name, a directory inside the image to a
	// local directory holding the same files (the charts the deployer image
	// carries). Arguments and environment values under it are rewritten like
	// mount paths.
	ImageFiles map[string]map[string]string
	// Allocatable is the CPU and memory the node offers pods, reported on
	// its Node object; the pods it runs together never request more
	// (DefaultAllocatable when nil: the machine's CPUs and memory).
	Allocatable corev1.ResourceList
}

// Node runs pods as local processes.
type Node struct {
	opts   Options
	config *rest.Config
	client kubernetes.Interface
	// capacity places pods within Options.Allocatable.
	capacity *capacity

	mu      sync.Mutex
	running map[types.UID]*podRun
	done    map[types.UID]bool
	// latest is the newest version seen of each pod running here, tried
	// first by status writes.
	latest map[types.UID]*corev1.Pod
	wg     sync.WaitGroup

	// proxyURL is the service proxy's URL once Run started it.
	proxyURL atomic.Value
	// roundRobin spreads requests over a Service's pods.
	roundRobin atomic.Uint64
}

// known returns a copy of the newest version of a pod the node has seen
// (watched or written), or nil.
func (n *Node) known(uid types.UID) *corev1.Pod {
	n.mu.Lock()
	defer n.mu.Unlock()
	if p := n.latest[uid]; p != nil {
		return p.DeepCopy()
	}
	return nil
}

// remember keeps p as the newest version of its pod the node has seen,
// unless a newer one is known. Only pods this node runs are kept.
func (n *Node) remember(p *corev1.Pod) {
	v, err := strconv.ParseUint(p.ResourceVersion, 10, 64)
	if err != nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, running := n.running[p.UID]; !running {
		return
	}
	if old := n.latest[p.UID]; old != nil {
		if ov, err := strconv.ParseUint(old.ResourceVersion, 10, 64); err == nil && ov >= v {
			return
		}
	}
	n.latest[p.UID] = p
}

type podRun struct {
	mu     sync.Mutex
	procs  []*os.Process
	killed bool
	// current is each container's running process (KillContainer).
	current map[string]*os.Process
	// stop is closed when the pod is killed.
	stop   chan struct{}
	exited chan struct{}
}

// New returns a node that talks to the API server with config (it needs
// rights to bind pods, update pod status, read Secrets and ConfigMaps and
// request ServiceAccount tokens: a system:masters user is the simple choice).
func New(config *rest.Config, opts Options) (*Node, error) {
	if opts.Name == "" {
		opts.Name = "petri-local-node"
	}
	if opts.Host == "" {
		opts.Host = config.Host
	}
	if opts.Allocatable == nil {
		opts.Allocatable = DefaultAllocatable()
	}
	if err := os.MkdirAll(filepath.Join(opts.Dir, "logs"), 0o755); err != nil {
		return nil, fmt.Errorf("local node directory: %w", err)
	}
	cfg := rest.CopyConfig(config)
	// Every pod costs about ten requests (binding, token, volumes, status);
	// thousands of Job pods at once must not queue behind a client-side
	// limit the kubelet's own API server does not impose on it.
	cfg.QPS, cfg.Burst = 2000, 4000
	// Protobuf, as the kubelet speaks it: the API server encodes each pod
	// change once per format for all its watchers, and the controller
	// manager already takes protobuf; JSON made every Job pod's change
	// encoded twice.
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Node{opts: opts, config: cfg, client: client, capacity: newCapacity(opts.Allocatable),
		running: map[types.UID]*podRun{}, done: map[types.UID]bool{}, latest: map[types.UID]*corev1.Pod{}}, nil
}

// Name returns the node name.
func (n *Node) Name() string { return n.opts.Name }

// LogDir is where every container's output is kept, one file per container
// named <namespace>_<pod>_<container>.log.
func (n *Node) LogDir() string { return filepath.Join(n.opts.Dir, "logs") }

// LogPath returns the log file of one container.
func (n *Node) LogPath(namespace, pod, container string) string {
	return filepath.Join(n.LogDir(), fmt.Sprintf("%s_%s_%s.log", namespace, pod, container))
}

// Run watches pods until ctx ends, then kills what still runs.
func (n *Node) Run(ctx context.Context) error {
	proxy, err := n.startProxy(ctx)
	if err != nil {
		return err
	}
	n.proxyURL.Store(proxy)
	if err := n.startKubeletAPI(ctx); err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactory(n.client, 0)
	inf := factory.Core().V1().Pods().Informer()
	_, err = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { n.observe(ctx, obj) },
		UpdateFunc: func(_, obj any) { n.observe(ctx, obj) },
		DeleteFunc: func(obj any) {
			if pod, ok := obj.(*corev1.Pod); ok {
				n.forget(pod)
			}
		},
	})
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	// A cancelled context is the normal way to stop, synced or not.
	cache.WaitForCacheSync(ctx.Done(), inf.HasSynced)
	<-ctx.Done()
	factory.Shutdown()
	n.mu.Lock()
	for _, r := range n.running {
		r.kill()
	}
	n.mu.Unlock()
	n.wg.Wait()
	return nil
}

// forget drops a deleted pod; one still waiting for room on the node stops
// waiting.
func (n *Node) forget(pod *corev1.Pod) {
	n.mu.Lock()
	defer n.mu.Unlock()
	run, ok := n.running[pod.UID]
	if !ok {
		delete(n.done, pod.UID)
		return
	}
	if pod.Spec.NodeName == "" {
		run.kill()
	}
}

// Waiting returns how many pods wait for room on the node: their requests
// do not fit beside the pods running here yet.
func (n *Node) Waiting() int { return n.capacity.waitingCount() }

// Handles reports whether the node knows every image of the pod.
func (n *Node) Handles(pod *corev1.Pod) bool {
	if len(pod.Spec.Containers) == 0 {
		return false
	}
	for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		if _, ok := n.binary(c.Image); !ok {
			return false
		}
	}
	return true
}

func (n *Node) binary(image string) (string, bool) {
	b, ok := n.opts.Images[imageName(image)]
	return b, ok
}

// imageName strips the tag and digest from an image reference.
func imageName(image string) string {
	name := image
	if i := strings.Index(name, "@"); i >= 0 {
		name = name[:i]
	}
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		name = name[:i]
	}
	return name
}

func (n *Node) observe(ctx context.Context, obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || ctx.Err() != nil {
		return
	}
	if pod.Spec.NodeName == n.opts.Name {
		n.remember(pod)
	}
	terminal := pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
	switch {
	case pod.Spec.NodeName == "" && pod.DeletionTimestamp == nil && !terminal && n.Handles(pod):
		n.mu.Lock()
		if _, ok := n.running[pod.UID]; ok || n.done[pod.UID] {
			n.mu.Unlock()
			return
		}
		run := &podRun{exited: make(chan struct{}), stop: make(chan struct{})}
		n.running[pod.UID] = run
		n.mu.Unlock()
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			n.runPod(ctx, pod.DeepCopy(), run)
		}()
	case pod.Spec.NodeName == n.opts.Name:
		n.mu.Lock()
		run, isRunning := n.running[pod.UID]
		isDone := n.done[pod.UID]
		n.mu.Unlock()
		switch {
		case pod.DeletionTimestamp != nil:
			n.wg.Add(1)
			go func() {
				defer n.wg.Done()
				if isRunning {
					run.kill()
					<-run.exited
				}
				n.finishDeletion(ctx, pod)
			}()
		case !isRunning && !isDone && !terminal:
			// Bound to this node name but not started by this process: the
			// node restarted while it ran. Never run it again.
			n.markOrphan(ctx, pod.DeepCopy())
		}
	}
}

func (n *Node) finishDeletion(ctx context.Context, pod *corev1.Pod) {
	uid := pod.UID
	err := n.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: new(int64),
		Preconditions:      &metav1.Preconditions{UID: &uid},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && ctx.Err() == nil {
		fmt.Fprintf(os.Stderr, "local node: delete pod %s/%s: %v\n", pod.Namespace, pod.Name, err)
	}
}

func (n *Node) markOrphan(ctx context.Context, pod *corev1.Pod) {
	now := metav1.Now()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := n.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.UID != pod.UID || cur.Status.Phase == corev1.PodSucceeded || cur.Status.Phase == corev1.PodFailed {
			return nil
		}
		n.mu.Lock()
		_, isRunning := n.running[pod.UID]
		n.mu.Unlock()
		if isRunning {
			return nil
		}
		cur.Status.Phase = corev1.PodFailed
		cur.Status.Reason = "NodeRestarted"
		cur.Status.Message = "the local node restarted while this pod ran; it is never run twice"
		for i, c := range cur.Spec.Containers {
			setContainerState(cur, i, c.Name, corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 137, Reason: "NodeRestarted", StartedAt: now, FinishedAt: now,
			}}, false)
		}
		setReady(cur, false)
		_, err = n.client.CoreV1().Pods(cur.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
		fmt.Fprintf(os.Stderr, "local node: mark orphan pod %s/%s failed: %v\n", pod.Namespace, pod.Name, err)
	}
}

// Kill stops the process of a running pod with SIGKILL, the way a container
// runtime kills an out-of-memory container: the pod fails with exit code 137.
func (n *Node) Kill(namespace, name string) error {
	pod, err := n.client.CoreV1().Pods(namespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	n.mu.Lock()
	run, ok := n.running[pod.UID]
	n.mu.Unlock()
	if !ok {
		return fmt.Errorf("pod %s/%s is not running on %s", namespace, name, n.opts.Name)
	}
	run.kill()
	<-run.exited
	return nil
}

func (r *podRun) kill() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.killed {
		close(r.stop)
	}
	r.killed = true
	for _, p := range r.procs {
		_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
	}
}

func (r *podRun) isKilled() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.killed
}

func (r *podRun) add(p *os.Process) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.killed {
		_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
		return false
	}
	r.procs = append(r.procs, p)
	return true
}

func (n *Node) runPod(ctx context.Context, pod *corev1.Pod, run *podRun) {
	defer func() {
		n.mu.Lock()
		delete(n.running, pod.UID)
		delete(n.latest, pod.UID)
		n.done[pod.UID] = true
		n.mu.Unlock()
		close(run.exited)
	}()
	need := podNeeds(pod)
	if why := n.capacity.neverFits(need); why != "" {
		n.unschedulable(ctx, pod, "0/1 nodes are available: 1 Insufficient "+why+".")
		return
	}
	if err := n.capacity.acquire(ctx, run.stop, need); err != nil {
		return
	}
	defer n.capacity.release(need)
	err := untilAnswered(ctx, func() error {
		return n.client.CoreV1().Pods(pod.Namespace).Bind(ctx, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
			Target:     corev1.ObjectReference{Kind: "Node", Name: n.opts.Name},
		}, metav1.CreateOptions{})
	})
	if err != nil && !n.boundHere(ctx, pod) {
		// Someone else bound it, or it is gone: not ours to run.
		return
	}
	dir := filepath.Join(n.opts.Dir, "pods", string(pod.UID))
	ports, err := allocatePorts(pod)
	if err != nil {
		n.fail(ctx, pod, "CreateContainerError", err.Error())
		return
	}
	if len(ports) > 0 {
		if err := n.annotatePorts(ctx, pod, ports); err != nil {
			n.fail(ctx, pod, "CreateContainerError", err.Error())
			return
		}
	}
	env, err := n.prepare(ctx, pod, dir)
	if err != nil {
		n.fail(ctx, pod, "CreateContainerConfigError", err.Error())
		return
	}
	env.ports = ports
	tokenCtx, stopTokens := context.WithCancel(ctx)
	defer stopTokens()
	go n.renewTokens(tokenCtx, pod, env.tokenFiles)
	start := metav1.Now()
	started := func(p *corev1.Pod) {
		if p.Status.StartTime == nil {
			p.Status.StartTime = &start
		}
		p.Status.HostIP, p.Status.PodIP = "127.0.0.1", "127.0.0.1"
		p.Status.PodIPs = []corev1.PodIP{{IP: "127.0.0.1"}}
	}
	finished := make(chan struct{})
	reported := n.reportRunning(ctx, pod, finished, func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodRunning
		started(p)
		for i, c := range p.Spec.Containers {
			// A container with a readiness probe is ready once it passes.
			setContainerState(p, i, c.Name, corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: start}}, c.ReadinessProbe == nil)
		}
		setReady(p, allContainersReady(p))
	})
	finish := func() {
		close(finished)
		<-reported
	}

	for i := range pod.Spec.InitContainers {
		res := n.runContainer(ctx, pod, &pod.Spec.InitContainers[i], dir, env, run)
		if res.ExitCode != 0 {
			finish()
			n.updateStatus(ctx, pod, func(p *corev1.Pod) {
				p.Status.Phase = corev1.PodFailed
				p.Status.Reason = "InitContainerFailed"
				p.Status.Message = res.Message
				started(p)
				setReady(p, false)
			})
			return
		}
	}
	results := make([]corev1.ContainerStateTerminated, len(pod.Spec.Containers))
	var wg sync.WaitGroup
	for i := range pod.Spec.Containers {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			results[i] = n.superviseContainer(ctx, pod, i, dir, env, run)
		}(i)
	}
	wg.Wait()
	finish()
	if ctx.Err() != nil {
		return
	}
	n.updateStatus(ctx, pod, func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodSucceeded
		started(p)
		for i, c := range p.Spec.Containers {
			r := results[i]
			if r.ExitCode != 0 {
				p.Status.Phase = corev1.PodFailed
			}
			setContainerState(p, i, c.Name, corev1.ContainerState{Terminated: &r}, false)
		}
		setReady(p, false)
	})
}

// runningReportDelay is how long a pod that runs to completion may take
// before its Running status is written: one that finishes sooner is
// reported once, with its final status, as a kubelet's status sync finds
// it already finished. At a thousand environments' deploy Jobs the Running
// write and the read before it were a fifth of the node's requests.
const runningReportDelay = 100 * time.Millisecond

// reportRunning writes the pod's Running status (mutate) and closes the
// channel it returns when that is done or skipped. A pod that restarts its
// containers or probes their readiness (both write status while running)
// is reported at once; one that runs to completion (restartPolicy Never,
// no readiness probe) only if it has not finished (finished closed) within
// runningReportDelay.
func (n *Node) reportRunning(ctx context.Context, pod *corev1.Pod, finished <-chan struct{}, mutate func(*corev1.Pod)) <-chan struct{} {
	done := make(chan struct{})
	deferred := pod.Spec.RestartPolicy == corev1.RestartPolicyNever
	for _, c := range pod.Spec.Containers {
		if c.ReadinessProbe != nil {
			deferred = false
		}
	}
	if !deferred {
		n.updateStatus(ctx, pod, mutate)
		close(done)
		return done
	}
	go func() {
		defer close(done)
		t := time.NewTimer(runningReportDelay)
		defer t.Stop()
		select {
		case <-finished:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n.updateStatus(ctx, pod, mutate)
	}()
	return done
}

// boundHere tells whether a pod whose binding was refused is bound to this
// node after all: a binding the API server made whose answer was lost (the
// API server restarted mid-request) is retried and refused as already
// bound, by this node's own first request.
func (n *Node) boundHere(ctx context.Context, pod *corev1.Pod) bool {
	var cur *corev1.Pod
	err := untilAnswered(ctx, func() error {
		var err error
		cur, err = n.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		return err
	})
	return err == nil && cur.UID == pod.UID && cur.Spec.NodeName == n.opts.Name && cur.DeletionTimestamp == nil
}

// annotatePorts records the pod's port mapping where Services, the ingress
// and people (kubectl get pod -o yaml) find it.
func (n *Node) annotatePorts(ctx context.Context, pod *corev1.Pod, ports map[int32]int32) error {
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, AnnotationPorts, formatPorts(ports))
	updated, err := n.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("record ports of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	pod.Annotations = updated.Annotations
	return nil
}

// unschedulable reports a pod the node can never place, as the scheduler
// does: Pending, with PodScheduled false.
func (n *Node) unschedulable(ctx context.Context, pod *corev1.Pod, msg string) {
	n.updateStatus(ctx, pod, func(p *corev1.Pod) {
		c := corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: corev1.PodReasonUnschedulable, Message: msg, LastTransitionTime: metav1.Now()}
		for i := range p.Status.Conditions {
			if p.Status.Conditions[i].Type == corev1.PodScheduled {
				p.Status.Conditions[i] = c
				return
			}
		}
		p.Status.Conditions = append(p.Status.Conditions, c)
	})
}

func (n *Node) fail(ctx context.Context, pod *corev1.Pod, reason, msg string) {
	n.updateStatus(ctx, pod, func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodFailed
		p.Status.Reason = reason
		p.Status.Message = msg
		now := metav1.Now()
		for i, c := range p.Spec.Containers {
			setContainerState(p, i, c.Name, corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 128, Reason: reason, Message: msg, StartedAt: now, FinishedAt: now,
			}}, false)
		}
	})
}

// updateStatus applies mutate to the freshest copy of the pod and writes the
// status subresource, retrying on conflicts.
func (n *Node) updateStatus(ctx context.Context, pod *corev1.Pod, mutate func(*corev1.Pod)) {
	// The newest copy the node knows (its own last write, or the watch's)
	// is tried first; a conflict means someone wrote since, and the pod is
	// read again.
	known := n.known(pod.UID)
	err := untilAnswered(ctx, func() error {
		return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
			cur := known
			known = nil
			if cur == nil {
				var err error
				if cur, err = n.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{}); err != nil {
					return err
				}
			}
			if cur.UID != pod.UID {
				return nil
			}
			mutate(cur)
			updated, err := n.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
			if err == nil {
				n.remember(updated)
			}
			return err
		})
	})
	if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
		fmt.Fprintf(os.Stderr, "local node: update status of pod %s/%s: %v\n", pod.Namespace, pod.Name, err)
	}
}

// apiRetryLimit bounds how long a call waits for an API server that cannot
// be reached.
const apiRetryLimit = 5 * time.Minute

// untilAnswered calls fn again, with back-off, while the API server cannot
// be reached or does not answer (it restarts, it is overloaded), the way a
// kubelet keeps syncing pod status until the API server takes it. Any
// answer about the object itself (not found, conflict, refused) ends it.
func untilAnswered(ctx context.Context, fn func() error) error {
	deadline := time.Now().Add(apiRetryLimit)
	delay := 100 * time.Millisecond
	for {
		err := fn()
		if err == nil || answered(err) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
		delay = min(2*delay, 5*time.Second)
	}
}

// answered tells an API server's answer about the request from a failure
// to get one.
func answered(err error) bool {
	return apierrors.IsNotFound(err) || apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) ||
		apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err) ||
		apierrors.IsUnauthorized(err) || apierrors.IsGone(err) || apierrors.IsMethodNotSupported(err)
}

func setContainerState(p *corev1.Pod, i int, name string, state corev1.ContainerState, ready bool) {
	for len(p.Status.ContainerStatuses) <= i {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{})
	}
	cs := &p.Status.ContainerStatuses[i]
	cs.Name = name
	cs.Image = p.Spec.Containers[i].Image
	cs.ImageID = p.Spec.Containers[i].Image
	cs.State = state
	cs.Ready = ready
	started := state.Running != nil
	cs.Started = &started
}

func setReady(p *corev1.Pod, ready bool) {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	now := metav1.Now()
	for _, t := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		s := status
		if t == corev1.PodScheduled || t == corev1.PodInitialized {
			s = corev1.ConditionTrue
		}
		found := false
		for i := range p.Status.Conditions {
			if p.Status.Conditions[i].Type == t {
				found = true
				if p.Status.Conditions[i].Status != s {
					p.Status.Conditions[i].Status = s
					p.Status.Conditions[i].LastTransitionTime = now
				}
			}
		}
		if !found {
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: t, Status: s, LastTransitionTime: now})
		}
	}
}

// runContainer runs one container to completion and returns its terminated
// state.
func (n *Node) runContainer(ctx context.Context, pod *corev1.Pod, c *corev1.Container, dir string, podEnv podEnv, run *podRun) corev1.ContainerStateTerminated {
	started := metav1.Now()
	result := func(code int32, reason, msg string) corev1.ContainerStateTerminated {
		return corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, Message: msg, StartedAt: started, FinishedAt: metav1.Now()}
	}
	bin, _ := n.binary(c.Image)
	env, fromContainer, err := n.containerEnv(ctx, pod, c, podEnv)
	if err != nil {
		return result(128, "CreateContainerConfigError", err.Error())
	}
	termPath := c.TerminationMessagePath
	if termPath == "" {
		termPath = corev1.TerminationMessagePathDefault
	}
	localTerm := filepath.Join(dir, "termination-log-"+c.Name)
	_ = os.WriteFile(localTerm, nil, 0o666)
	rewrites := append(podEnv.rewrites(c), rewrite{from: termPath, to: localTerm})
	for from, to := range n.opts.ImageFiles[imageName(c.Image)] {
		rewrites = append(rewrites, rewrite{from: from, to: to})
	}
	// Mounts shadow the image's own files, and the longest path wins.
	sort.SliceStable(rewrites, func(i, j int) bool { return len(rewrites[i].from) > len(rewrites[j].from) })

	argv := c.Args
	if len(c.Command) > 0 {
		argv = append(append([]string{}, c.Command[1:]...), c.Args...)
	}
	vars := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	args := make([]string, len(argv))
	for i, a := range argv {
		args[i] = applyRewrites(expandVars(a, vars), rewrites)
	}
	for i := range args {
		args[i] = rewriteAddress(args[i], podEnv.ports)
	}
	for i, kv := range env {
		if k, v, _ := strings.Cut(kv, "="); fromContainer[k] {
			env[i] = k + "=" + rewriteAddress(applyRewrites(v, rewrites), podEnv.ports)
		}
	}

	logFile, err := os.OpenFile(n.LogPath(pod.Namespace, pod.Name, c.Name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return result(128, "StartError", err.Error())
	}
	defer logFile.Close()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return result(128, "StartError", err.Error())
	}
	if !run.add(cmd.Process) {
		_ = cmd.Wait()
		return result(137, "Killed", "killed before it started")
	}
	run.setCurrent(c.Name, cmd.Process)
	waitErr := cmd.Wait()
	run.setCurrent(c.Name, nil)
	code := int32(0)
	reason := "Completed"
	if waitErr != nil {
		reason = "Error"
		var exitErr *exec.ExitError
		if errors.As(waitErr, &exitErr) {
			code = int32(exitErr.ExitCode())
			if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				code = 128 + int32(ws.Signal())
			}
		} else {
			code = 128
		}
	}
	msg := readTermination(localTerm)
	if msg == "" && code != 0 && c.TerminationMessagePolicy == corev1.TerminationMessageFallbackToLogsOnError {
		msg = tailFile(n.LogPath(pod.Namespace, pod.Name, c.Name), 2048, 80)
	}
	return result(code, reason, msg)
}

func readTermination(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if len(b) > 4096 {
		b = b[:4096]
	}
	return strings.TrimSpace(string(b))
}

func tailFile(path string, maxBytes, maxLines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if len(b) > maxBytes {
		b = b[len(b)-maxBytes:]
	}
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	if len(lines) > maxLines {
		lines = lines[len(lines)-maxLines:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// Wait blocks until every pod process has ended; used after Run returns.
func (n *Node) Wait(timeout time.Duration) bool {
	ch := make(chan struct{})
	go func() { n.wg.Wait(); close(ch) }()
	select {
	case <-ch:
		return true
	case <-time.After(timeout):
		return false
	}
}
