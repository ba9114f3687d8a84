package realnode

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// CoreDNSImage is the cluster DNS image, built from bin/coredns (make node).
const CoreDNSImage = "petri.local/coredns:v1.15.0"

// corefile serves the cluster domain and reverse lookups from the API
// server and nothing else: there is no forward plugin, so no query leaves
// the node. It listens on 1053, so it runs unprivileged with every
// capability dropped; the Service maps 53 to it.
const corefile = `.:1053 {
    errors
    health :8080 {
        lameduck 1s
    }
    ready :8181
    kubernetes {{domain}} in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }
    cache 5
    loop
    reload
    loadbalance
}
`

// startCoreDNS runs CoreDNS as the kube-system Deployment coredns behind the
// Service kube-dns at DNSServiceIP, as a cluster's DNS add-on does, and
// waits until it is available.
func (n *Node) startCoreDNS(ctx context.Context) error {
	img, err := Image(map[string]File{"/coredns": {Source: filepath.Join(n.bin, "coredns"), Mode: 0o755}}, "/coredns")
	if err != nil {
		return fmt.Errorf("coredns image: %w", err)
	}
	if err := n.LoadImage(ctx, CoreDNSImage, img); err != nil {
		return err
	}
	cs := n.Cluster.Clientset
	const ns, name = "kube-system", "coredns"
	labels := map[string]string{"k8s-app": "kube-dns"}
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"endpoints", "services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		},
	}
	creates := []func() error{
		func() error {
			_, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{})
			return err
		},
		func() error {
			return n.bind(ctx, "system:coredns", "system:coredns", rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns})
		},
		func() error {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{
				"Corefile": strings.ReplaceAll(corefile, "{{domain}}", ClusterDomain)}}
			_, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := cs.CoreV1().Services(ns).Create(ctx, dnsService(labels), metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := cs.AppsV1().Deployments(ns).Create(ctx, n.coreDNSDeployment(labels), metav1.CreateOptions{})
			return err
		},
	}
	for _, create := range creates {
		if err := create(); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("coredns: %w", err)
		}
	}
	return waitFor(ctx, "coredns available", 90*time.Second, func(ctx context.Context) error {
		d, err := cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if d.Status.AvailableReplicas < 1 {
			return fmt.Errorf("%d of %d replicas available", d.Status.AvailableReplicas, d.Status.Replicas)
		}
		return nil
	}, n.kubelet, n.scheduler, n.proxy)
}

func dnsService(labels map[string]string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Labels: labels},
		Spec: corev1.ServiceSpec{
			Selector:  labels,
			ClusterIP: DNSServiceIP,
			Ports: []corev1.ServicePort{
				{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(1053)},
				{Name: "dns-tcp", Protocol: corev1.ProtocolTCP, Port: 53, TargetPort: intstr.FromInt32(1053)},
			},
		},
	}
}

// coreDNSDeployment is CoreDNS's Deployment: non-root, read-only root, no
// capabilities, probed on its health and ready plugins. It reaches the API
// server in-cluster, through the kubernetes Service and kube-proxy.
func (n *Node) coreDNSDeployment(labels map[string]string) *appsv1.Deployment {
	probe := func(path string, port int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt32(port)}},
			PeriodSeconds: 1, FailureThreshold: 60,
		}
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "coredns", Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName: "coredns",
					DNSPolicy:          corev1.DNSDefault,
					PriorityClassName:  "system-cluster-critical",
					SecurityContext:    &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
					Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{
						ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "coredns"}}}}},
					Containers: []corev1.Container{{
						Name:            "coredns",
						Image:           CoreDNSImage,
						ImagePullPolicy: corev1.PullNever,
						Args:            []string{"-conf", "/etc/coredns/Corefile"},
						Ports: []corev1.ContainerPort{
							{Name: "dns", ContainerPort: 1053, Protocol: corev1.ProtocolUDP},
							{Name: "dns-tcp", ContainerPort: 1053, Protocol: corev1.ProtocolTCP},
						},
						VolumeMounts:   []corev1.VolumeMount{{Name: "config", MountPath: "/etc/coredns", ReadOnly: true}},
						ReadinessProbe: probe("/ready", 8181),
						LivenessProbe:  probe("/health", 8080),
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptr.To(false),
							ReadOnlyRootFilesystem:   ptr.To(true),
							Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						},
					}},
				},
			},
		},
	}
}
