package stack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/controlplane"
	"github.com/petri-dev/petri/local/node"
)

// workloadClusterNames name the workload clusters Options.Clusters starts,
// in order: the second cluster is east, the third west.
var workloadClusterNames = []string{"east", "west", "north", "south"}

// Settings of the workload clusters the stack registers.
const (
	// RegionLabel is the label a WorkloadCluster carries with its name
	// (region=east), for placement selectors.
	RegionLabel = "region"
	// WorkloadClusterCapacity is each WorkloadCluster's
	// spec.capacity.environments.
	WorkloadClusterCapacity = 50
	// ClusterTokenLifetime is how long the token of a workload cluster's
	// kubeconfig is valid (the TokenRequest's expirationSeconds); the stack
	// writes a new one into the Secret when two thirds of it have passed.
	ClusterTokenLifetime = 24 * time.Hour
	// OperatorServiceAccount is the operator's identity, in the management
	// namespace of every cluster.
	OperatorServiceAccount = "petri-operator"
)

// ClusterSecretName is the Secret of the management namespace that holds the
// kubeconfig of Petri's identity in the workload cluster.
func ClusterSecretName(cluster string) string { return "petri-cluster-" + cluster }

// workloadCluster is a workload cluster the stack runs: its own control
// plane and process node.
type workloadCluster struct {
	name     string
	cluster  *controlplane.Cluster
	node     *node.Node
	stopNode context.CancelFunc
	nodeDone chan error
}

// WorkloadClusters are the workload clusters' control planes by name (east,
// west, ...); empty with one cluster. Each Cluster.Client is that cluster's
// administrator.
func (s *Stack) WorkloadClusters() map[string]*controlplane.Cluster {
	m := map[string]*controlplane.Cluster{}
	for _, w := range s.workload {
		m[w.name] = w.cluster
	}
	return m
}

// clusterNames are the workload clusters' names for Options.Clusters.
func (opts *Options) clusterNames() []string {
	if opts.Clusters <= 1 {
		return nil
	}
	return workloadClusterNames[:opts.Clusters-1]
}

// checkClusters checks Options.Clusters and fills in its default.
func (opts *Options) checkClusters() error {
	if opts.Clusters == 0 {
		opts.Clusters = 1
	}
	if opts.Clusters < 1 || opts.Clusters > 1+len(workloadClusterNames) {
		return fmt.Errorf("clusters %d: want 1 (the management cluster alone) to %d", opts.Clusters, 1+len(workloadClusterNames))
	}
	if opts.Clusters > 1 && opts.Node == NodeReal {
		return fmt.Errorf("node %s runs one cluster; workload clusters run on the process node", NodeReal)
	}
	return nil
}

// startWorkloadClusters starts each workload cluster with its node (playing
// the images the management cluster's node plays), installs Petri's
// workload-cluster objects there and registers it in the management
// cluster: a Secret with the kubeconfig of its petri-operator and a
// WorkloadCluster. The tokens are renewed until Stop.
func (s *Stack) startWorkloadClusters(ctx context.Context, r *Report, images map[string]string, deployerImage string) error {
	for _, name := range s.opts.clusterNames() {
		step := r.Begin("Workload cluster " + name + ": etcd, kube-apiserver, kube-controller-manager, local node")
		w, err := s.startWorkloadCluster(name, images, deployerImage)
		if w != nil {
			s.workload = append(s.workload, w)
		}
		if err != nil {
			return step.Fail(err)
		}
		step.Done(w.cluster.Config.Host)

		step = r.Begin("Workload cluster " + name + ": " + map[string]string{
			InstallKustomize: "kubectl apply -k config/workload",
			InstallChart:     "helm install " + ChartRelease + " charts/petri --set mode=workload --skip-crds",
		}[s.opts.Install] + " (+ this machine's settings)")
		out, err := s.installWorkload(ctx, w)
		if err != nil {
			return step.Fail(err)
		}
		step.Done(fmt.Sprintf("%d objects", strings.Count(strings.TrimSpace(out), "\n")+1))

		step = r.Begin("Workload cluster " + name + ": the fences refuse " + OperatorServiceAccount + " what they must")
		if err := waitFences(ctx, w.cluster); err != nil {
			return step.Fail(err)
		}
		step.Done("")

		step = r.Begin("Register workload cluster " + name + ": Secret " + ClusterSecretName(name) + ", WorkloadCluster " + name + " in " + ManagementNamespace)
		expires, err := s.registerWorkloadCluster(ctx, w)
		if err != nil {
			return step.Fail(err)
		}
		step.Done("token of " + OperatorServiceAccount + " valid until " + expires.UTC().Format(time.RFC3339))
	}
	if len(s.workload) == 0 {
		return nil
	}
	renewCtx, cancel := context.WithCancel(context.Background())
	s.stopRenew, s.renewDone = cancel, make(chan struct{})
	go s.renewClusterTokens(renewCtx)
	out, err := s.kubectl(ctx, "get", "workloadclusters", "-n", ManagementNamespace, "-L", RegionLabel)
	if err != nil {
		return err
	}
	r.Event("kubectl get workloadclusters -n %s -L %s", ManagementNamespace, RegionLabel)
	r.Detail(out)
	return nil
}

// startWorkloadCluster starts a control plane without Petri's CRDs and a
// process node registered to it.
func (s *Stack) startWorkloadCluster(name string, images map[string]string, deployerImage string) (*workloadCluster, error) {
	dir := filepath.Join(s.opts.Dir, "clusters", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	c, err := controlplane.Start(controlplane.Options{Dir: dir, SkipCRDs: true})
	if err != nil {
		return nil, err
	}
	w := &workloadCluster{name: name, cluster: c}
	w.node, err = node.New(c.Config, node.Options{
		Name:       "petri-local-node-" + name,
		Images:     images,
		Dir:        filepath.Join(dir, "node"),
		ImageFiles: map[string]map[string]string{imageName(deployerImage): s.deployerFiles(s.root)},
	})
	if err != nil {
		return w, err
	}
	nodeCtx, cancel := context.WithCancel(context.Background())
	w.stopNode, w.nodeDone = cancel, make(chan error, 1)
	go func() { w.nodeDone <- w.node.Run(nodeCtx) }()
	return w, nil
}

// installWorkload installs config/workload (through an overlay with this
// machine's settings: those of the management cluster's ConfigMap
// petri-operator, which the fences there read) or the chart's workload mode.
func (s *Stack) installWorkload(ctx context.Context, w *workloadCluster) (string, error) {
	if s.opts.Install == InstallChart {
		return s.helmInstall(ctx, w.cluster.Kubeconfig, workloadValues(s.chartValues()), true)
	}
	overlay := filepath.Join(w.cluster.Dir, "install")
	if err := os.MkdirAll(overlay, 0o755); err != nil {
		return "", err
	}
	base, err := filepath.Rel(overlay, filepath.Join(s.root, "config", "workload"))
	if err != nil {
		return "", err
	}
	order, err := SortOptions(filepath.Join(s.root, "config", "workload"))
	if err != nil {
		return "", err
	}
	kustomization := fmt.Sprintf(`# Petri's objects in workload cluster %s on this machine: config/workload
# with the settings of the management cluster's ConfigMap petri-operator.
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - %s
configMapGenerator:
  - name: petri-operator
    namespace: %s
    behavior: merge
    literals:
      - "step-images=%s"%s
%s`, w.name, base, ManagementNamespace, strings.Join(s.stepImages(), ","), s.overlayOperatorSettings(), order)
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kustomization), 0o644); err != nil {
		return "", err
	}
	return s.kubectlOn(ctx, w.cluster.Kubeconfig, "apply", "-k", overlay)
}

// waitFences waits until the API server enforces every fence on the
// operator's identity: it takes up newly created admission policies a
// moment later, and until then that identity has its RBAC unfenced. Each
// probe is a server-side dry run that a fence, and not RBAC, must refuse.
func waitFences(ctx context.Context, c *controlplane.Cluster) error {
	cfg, err := c.ServiceAccountConfig(ctx, ManagementNamespace, OperatorServiceAccount)
	if err != nil {
		return err
	}
	// The probe Job is not meant to meet Pod Security: no warnings of it.
	cfg.WarningHandler = rest.NoWarnings{}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	probes := map[string]func() error{
		"an unmarked namespace": func() error {
			_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "petri-fence-probe"}}, dry)
			return err
		},
		"a RoleBinding in kube-system": func() error {
			_, err := cs.RbacV1().RoleBindings("kube-system").Create(ctx, &rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: "petri-fence-probe"},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "admin"},
				Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ManagementNamespace, Name: OperatorServiceAccount}},
			}, dry)
			return err
		},
		"a Job as " + OperatorServiceAccount: func() error {
			_, err := cs.BatchV1().Jobs(ManagementNamespace).Create(ctx, &batchv1.Job{
				ObjectMeta: metav1.ObjectMeta{Name: "petri-fence-probe"},
				Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
					ServiceAccountName: OperatorServiceAccount, RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{Name: "probe", Image: "petri-fence-probe"}},
				}}},
			}, dry)
			return err
		},
	}
	var missing []string
	return poll(ctx, time.Minute, func() (bool, error) {
		missing = nil
		for what, probe := range probes {
			if err := probe(); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "petri-operator may") {
				missing = append(missing, what)
			}
		}
		return len(missing) == 0, nil
	}, func() string { return "not refused by a fence: " + strings.Join(missing, ", ") })
}

// registerWorkloadCluster writes the Secret with a kubeconfig of the
// workload cluster's petri-operator and creates the WorkloadCluster naming
// it; it returns when the kubeconfig's token expires.
func (s *Stack) registerWorkloadCluster(ctx context.Context, w *workloadCluster) (time.Time, error) {
	expires, err := s.writeClusterSecret(ctx, w)
	if err != nil {
		return time.Time{}, err
	}
	wc := &petriv1.WorkloadCluster{
		ObjectMeta: metav1.ObjectMeta{
			Name:      w.name,
			Namespace: ManagementNamespace,
			Labels:    map[string]string{RegionLabel: w.name},
		},
		Spec: petriv1.WorkloadClusterSpec{
			Credentials: petriv1.ClusterCredentials{Name: ClusterSecretName(w.name), Key: petriv1.DefaultClusterCredentialsKey},
			Capacity:    petriv1.ClusterCapacity{Environments: WorkloadClusterCapacity},
		},
	}
	if err := s.Client.Create(ctx, wc); err != nil && !apierrors.IsAlreadyExists(err) {
		return time.Time{}, fmt.Errorf("create WorkloadCluster %s: %w", w.name, err)
	}
	return expires, nil
}

// writeClusterSecret requests a token of the workload cluster's
// petri-operator (valid for ClusterTokenLifetime) and creates or updates
// the management cluster's Secret with a kubeconfig carrying it.
func (s *Stack) writeClusterSecret(ctx context.Context, w *workloadCluster) (time.Time, error) {
	kubeconfig, expires, err := operatorKubeconfig(ctx, w.cluster)
	if err != nil {
		return time.Time{}, err
	}
	key := client.ObjectKey{Namespace: ManagementNamespace, Name: ClusterSecretName(w.name)}
	var secret corev1.Secret
	err = s.Client.Get(ctx, key, &secret)
	if apierrors.IsNotFound(err) {
		secret = corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Name: key.Name, Namespace: key.Namespace,
				Labels: map[string]string{"app.kubernetes.io/part-of": "petri", petriv1.LabelCluster: w.name},
			},
			Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{petriv1.DefaultClusterCredentialsKey: kubeconfig},
		}
		err = s.Client.Create(ctx, &secret)
	} else if err == nil {
		secret.Data = map[string][]byte{petriv1.DefaultClusterCredentialsKey: kubeconfig}
		err = s.Client.Update(ctx, &secret)
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("write Secret %s: %w", key, err)
	}
	return expires, nil
}

// operatorKubeconfig is a kubeconfig of the cluster's petri-operator with a
// token from the TokenRequest API, and the token's expiry.
func operatorKubeconfig(ctx context.Context, c *controlplane.Cluster) ([]byte, time.Time, error) {
	tr, err := c.Clientset.CoreV1().ServiceAccounts(ManagementNamespace).CreateToken(ctx, OperatorServiceAccount, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(ClusterTokenLifetime / time.Second))},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("token of serviceaccount %s/%s: %w", ManagementNamespace, OperatorServiceAccount, err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["workload"] = &clientcmdapi.Cluster{Server: c.Config.Host, CertificateAuthorityData: c.Config.CAData}
	kc.AuthInfos[OperatorServiceAccount] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts["workload"] = &clientcmdapi.Context{Cluster: "workload", AuthInfo: OperatorServiceAccount, Namespace: ManagementNamespace}
	kc.CurrentContext = "workload"
	data, err := clientcmd.Write(*kc)
	if err != nil {
		return nil, time.Time{}, err
	}
	return data, tr.Status.ExpirationTimestamp.Time, nil
}

// renewClusterTokens writes a new token into every workload cluster's Secret
// each time two thirds of ClusterTokenLifetime have passed; a failed renewal
// is tried again a minute later.
func (s *Stack) renewClusterTokens(ctx context.Context) {
	defer close(s.renewDone)
	wait := ClusterTokenLifetime * 2 / 3
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = ClusterTokenLifetime * 2 / 3
		for _, w := range s.workload {
			if _, err := s.writeClusterSecret(ctx, w); err != nil {
				s.opts.Report.Event("renew the token of workload cluster %s: %v", w.name, err)
				wait = time.Minute
			}
		}
	}
}

// stopWorkloadClusters stops the renewal, the workload clusters' nodes and
// their control planes.
func (s *Stack) stopWorkloadClusters() {
	if s.stopRenew != nil {
		s.stopRenew()
		<-s.renewDone
	}
	for _, w := range s.workload {
		if w.stopNode != nil {
			w.stopNode()
			<-w.nodeDone
		}
		w.cluster.Stop()
	}
}
