package realnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	// ClusterDomain is the node's cluster DNS domain.
	ClusterDomain = "cluster.local"
	// DNSServiceIP is the cluster DNS Service's address, in the control
	// plane's Service range; kubelet gives it to pods as their nameserver.
	DNSServiceIP = "10.0.0.10"
)

// kubeletConfig is kubelet's configuration for this machine:
//   - failCgroupV1 false: kubelet 1.37 refuses cgroup v1 otherwise, and this
//     machine has v1 with a hybrid cgroup2 mount;
//   - cgroupfs, with the node's own cgroupRoot (containerd 1.6 cannot say
//     which driver it uses);
//   - oomScoreAdj 0 and protectKernelDefaults: it neither lowers its score
//     nor writes kernel sysctls (see holderScript);
//   - makeIPTablesUtilChains false: nothing of kubelet's own in iptables;
//   - image GC off (imageGCHighThresholdPercent 100): containerd 1.6 does
//     not protect the pause image, which cannot be pulled again here;
//   - no eviction thresholds: a shared machine's disk is not the node's to
//     guard, and a DiskPressure taint would leave the pods Pending;
//   - its server on NodeIP for the API server's logs and exec, anonymous and
//     allowed (reachable only from this machine and the node).
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /{{marker}}
containerRuntimeEndpoint: unix://{{dir}}/containerd/containerd.sock
address: {{nodeip}}
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
clusterDomain: {{domain}}
clusterDNS: [{{dns}}]
resolvConf: {{dir}}/resolv.conf
podLogsDir: {{dir}}/pod-logs
volumePluginDir: {{dir}}/volume-plugins
oomScoreAdj: 0
protectKernelDefaults: true
makeIPTablesUtilChains: false
failSwapOn: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "0%"
  nodefs.available: "0%"
  nodefs.inodesFree: "0%"
  imagefs.available: "0%"
serializeImagePulls: false
syncFrequency: 10s
nodeStatusUpdateFrequency: 4s
fileCheckFrequency: 5s
maxPods: 110
`

// startKubelet gives kubelet a client certificate as system:node:<name>
// (bound to the system:node ClusterRole), starts it in the node's
// namespaces and waits until its Node is Ready.
func (n *Node) startKubelet(ctx context.Context) error {
	user := "system:node:" + n.Name
	kubeconfig, err := n.Cluster.WriteKubeconfig(user, "system:nodes")
	if err != nil {
		return err
	}
	if err := n.bind(ctx, "petri-realnode:"+n.Name, "system:node", rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}); err != nil {
		return err
	}
	// Pods with dnsPolicy Default get no nameserver: nothing is resolved
	// outside the cluster.
	if err := os.WriteFile(filepath.Join(n.Dir, "resolv.conf"), nil, 0o644); err != nil {
		return err
	}
	config := filepath.Join(n.Dir, "kubelet.yaml")
	text := strings.NewReplacer("{{marker}}", n.Marker, "{{dir}}", n.Dir, "{{nodeip}}", n.NodeIP,
		"{{domain}}", ClusterDomain, "{{dns}}", DNSServiceIP).Replace(kubeletConfig)
	if err := os.WriteFile(config, []byte(text), 0o644); err != nil {
		return err
	}
	p, err := n.startProcess("kubelet", n.inNode(filepath.Join(n.bin, "kubelet"),
		"--config="+config,
		"--kubeconfig="+kubeconfig,
		"--root-dir="+filepath.Join(n.Dir, "kubelet"),
		"--cert-dir="+filepath.Join(n.Dir, "kubelet-pki"),
		"--hostname-override="+n.Name,
		"--node-ip="+n.NodeIP,
		"--v=2",
	))
	if err != nil {
		return err
	}
	n.kubelet = p
	return waitFor(ctx, "kubelet's node Ready", 90*time.Second, func(ctx context.Context) error {
		node, err := n.Cluster.Clientset.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				if c.Status == corev1.ConditionTrue {
					return nil
				}
				return fmt.Errorf("node %s: %s", c.Reason, c.Message)
			}
		}
		return fmt.Errorf("node %s has no Ready condition", n.Name)
	}, p)
}

// bind binds a ClusterRole to subject with a ClusterRoleBinding named name.
func (n *Node) bind(ctx context.Context, name, role string, subject rbacv1.Subject) error {
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{subject},
	}
	_, err := n.Cluster.Clientset.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("bind %s: %w", role, err)
	}
	return nil
}

// kubeProxyConfig runs kube-proxy in iptables mode in the node's network
// namespace, where its rules stay. conntrack.maxPerCore 0 and the zero
// timeouts leave nf_conntrack's global settings alone.
const kubeProxyConfig = `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection:
  kubeconfig: {{kubeconfig}}
hostnameOverride: {{name}}
bindAddress: {{nodeip}}
clusterCIDR: {{podcidr}}
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
iptables:
  localhostNodePorts: false
`

// startKubeProxy starts kube-proxy as system:kube-proxy (bound to
// system:node-proxier by the API server's own bootstrap policy). Its rules
// are proven by CoreDNS, which Start waits for: CoreDNS reaches the API
// server through the kubernetes Service.
func (n *Node) startKubeProxy(ctx context.Context) error {
	kubeconfig, err := n.Cluster.WriteKubeconfig("system:kube-proxy")
	if err != nil {
		return err
	}
	config := filepath.Join(n.Dir, "kube-proxy.yaml")
	text := strings.NewReplacer("{{kubeconfig}}", kubeconfig, "{{name}}", n.Name, "{{nodeip}}", n.NodeIP,
		"{{podcidr}}", PodCIDR).Replace(kubeProxyConfig)
	if err := os.WriteFile(config, []byte(text), 0o644); err != nil {
		return err
	}
	p, err := n.startProcess("kube-proxy", n.inNode(filepath.Join(n.bin, "kube-proxy"), "--config="+config, "--v=2"))
	if err != nil {
		return err
	}
	n.proxy = p
	return nil
}

// startScheduler starts kube-scheduler as system:kube-scheduler (bound by
// the bootstrap policy) without leader election or a serving port.
func (n *Node) startScheduler(ctx context.Context) error {
	kubeconfig, err := n.Cluster.WriteKubeconfig("system:kube-scheduler")
	if err != nil {
		return err
	}
	p, err := n.startProcess("kube-scheduler", n.inNode(filepath.Join(n.bin, "kube-scheduler"),
		"--kubeconfig="+kubeconfig, "--leader-elect=false", "--secure-port=0", "--v=1"))
	if err != nil {
		return err
	}
	n.scheduler = p
	return nil
}
