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
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
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
