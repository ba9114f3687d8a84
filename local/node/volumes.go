package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// serviceAccountMountPath is where a cluster mounts a pod's ServiceAccount
// token; it is rewritten like any other mount.
const serviceAccountMountPath = "/var/run/secrets/kubernetes.io/serviceaccount"

// podEnv is what prepare materialised for one pod.
type podEnv struct {
	// volumes maps a volume name to its local directory.
	volumes map[string]string
	// kubeconfig authenticates as the pod's ServiceAccount; empty when the pod
	// opted out of a token.
	kubeconfig string
	// serviceAccountDir holds token, ca.crt and namespace.
	serviceAccountDir string
	// tokenFiles are every copy of the ServiceAccount token, renewed while
	// the pod runs.
	tokenFiles []string
	// ports maps the pod's container ports to local ports.
	ports map[int32]int32
}

type rewrite struct{ from, to string }

// rewrites lists, longest mount path first, where the container's paths live
// locally.
func (e podEnv) rewrites(c *corev1.Container) []rewrite {
	var out []rewrite
	for _, m := range c.VolumeMounts {
		if dir, ok := e.volumes[m.Name]; ok {
			to := dir
			if m.SubPath != "" {
				to = filepath.Join(dir, m.SubPath)
			}
			out = append(out, rewrite{from: m.MountPath, to: to})
		}
	}
	if e.serviceAccountDir != "" {
		out = append(out, rewrite{from: serviceAccountMountPath, to: e.serviceAccountDir})
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i].from) > len(out[j].from) })
	return out
}

// applyRewrites maps a value that is a mount path, or lies under one, to its
// local copy.
func applyRewrites(v string, rws []rewrite) string {
	for _, r := range rws {
		from := strings.TrimSuffix(r.from, "/")
		if v == from {
			return r.to
		}
		if strings.HasPrefix(v, from+"/") {
			return filepath.Join(r.to, strings.TrimPrefix(v, from+"/"))
		}
		// --flag=/mount/path/file
		if i := strings.Index(v, "="+from); i >= 0 {
			rest := v[i+1+len(from):]
			if rest == "" || strings.HasPrefix(rest, "/") {
				return v[:i+1] + r.to + rest
			}
		}
	}
	return v
}

// expandVars expands $(VAR) references the way the kubelet does; $$(VAR)
// escapes.
func expandVars(s string, vars map[string]string) string {
	if !strings.Contains(s, "$(") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '$' && i+1 < len(s) {
			if s[i+1] == '$' {
				b.WriteByte('$')
				i++
				continue
			}
			if s[i+1] == '(' {
				if end := strings.IndexByte(s[i+2:], ')'); end >= 0 {
					name := s[i+2 : i+2+end]
					if v, ok := vars[name]; ok {
						b.WriteString(v)
						i += end + 2
						continue
					}
				}
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// prepare writes the pod's volumes and ServiceAccount credentials under dir.
func (n *Node) prepare(ctx context.Context, pod *corev1.Pod, dir string) (podEnv, error) {
	env := podEnv{volumes: map[string]string{}}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return env, err
	}
	token, err := n.writeCredentials(ctx, pod, dir, &env)
	if err != nil {
		return env, err
	}
	for _, v := range pod.Spec.Volumes {
		vdir := filepath.Join(dir, "volumes", v.Name)
		files, mounted, err := n.volumeFiles(ctx, pod, v, vdir, token, &env)
		if err != nil {
			return env, err
		}
		if !mounted {
			// Volume kinds a local process cannot have stay unmounted.
			continue
		}
		if err := writeFiles(vdir, files); err != nil {
			return env, err
		}
		env.volumes[v.Name] = vdir
	}
	return env, nil
}

// writeCredentials gives a pod that mounts a ServiceAccount token (by
// default, or through a projected volume) a token, the ServiceAccount
// directory and a kubeconfig, and returns the token ("" for a pod without
// one).
func (n *Node) writeCredentials(ctx context.Context, pod *corev1.Pod, dir string, env *podEnv) (string, error) {
	needToken := pod.Spec.AutomountServiceAccountToken == nil || *pod.Spec.AutomountServiceAccountToken
	for _, v := range pod.Spec.Volumes {
		if v.Projected != nil {
			for _, s := range v.Projected.Sources {
				if s.ServiceAccountToken != nil {
					needToken = true
				}
			}
		}
	}
	if !needToken {
		return "", nil
	}
	token, err := n.requestToken(ctx, pod)
	if err != nil {
		return "", err
	}
	env.serviceAccountDir = filepath.Join(dir, "serviceaccount")
	if err := writeFiles(env.serviceAccountDir, map[string][]byte{
		"token":     []byte(token),
		"ca.crt":    n.config.CAData,
		"namespace": []byte(pod.Namespace),
	}); err != nil {
		return "", err
	}
	env.tokenFiles = append(env.tokenFiles, filepath.Join(env.serviceAccountDir, "token"))
	env.kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := n.writeKubeconfig(env.kubeconfig, pod.Namespace, filepath.Join(env.serviceAccountDir, "token")); err != nil {
		return "", err
	}
	return token, nil
}

// volumeFiles returns the files of one volume (to be written to vdir);
// mounted is false for a volume kind a local process cannot have.
func (n *Node) volumeFiles(ctx context.Context, pod *corev1.Pod, v corev1.Volume, vdir, token string, env *podEnv) (files map[string][]byte, mounted bool, err error) {
	files = map[string][]byte{}
	switch {
	case v.Secret != nil:
		data, found, err := n.volumeData(ctx, pod, v.Name, "secret", v.Secret.SecretName, v.Secret.Optional)
		if err != nil {
			return nil, false, err
		}
		if found {
			if err := project(files, data, v.Secret.Items); err != nil {
				return nil, false, fmt.Errorf("volume %s: %w", v.Name, err)
			}
		}
	case v.ConfigMap != nil:
		data, found, err := n.volumeData(ctx, pod, v.Name, "configmap", v.ConfigMap.Name, v.ConfigMap.Optional)
		if err != nil {
			return nil, false, err
		}
		if found {
			if err := project(files, data, v.ConfigMap.Items); err != nil {
				return nil, false, fmt.Errorf("volume %s: %w", v.Name, err)
			}
		}
	case v.Projected != nil:
		if err := n.projectedFiles(ctx, pod, v, vdir, token, files, env); err != nil {
			return nil, false, err
		}
	case v.EmptyDir != nil:
	default:
		return nil, false, nil
	}
	return files, true, nil
}

// projectedFiles adds a projected volume's sources to files.
func (n *Node) projectedFiles(ctx context.Context, pod *corev1.Pod, v corev1.Volume, vdir, token string, files map[string][]byte, env *podEnv) error {
	for _, src := range v.Projected.Sources {
		switch {
		case src.Secret != nil:
			data, found, err := n.volumeData(ctx, pod, v.Name, "secret", src.Secret.Name, src.Secret.Optional)
			if err != nil {
				return err
			}
			if found {
				if err := project(files, data, src.Secret.Items); err != nil {
					return err
				}
			}
		case src.ConfigMap != nil:
			data, found, err := n.volumeData(ctx, pod, v.Name, "configmap", src.ConfigMap.Name, src.ConfigMap.Optional)
			if err != nil {
				return err
			}
			if found {
				if err := project(files, data, src.ConfigMap.Items); err != nil {
					return err
				}
			}
		case src.ServiceAccountToken != nil:
			files[src.ServiceAccountToken.Path] = []byte(token)
			env.tokenFiles = append(env.tokenFiles, filepath.Join(vdir, filepath.Clean("/"+src.ServiceAccountToken.Path)))
		case src.DownwardAPI != nil:
			for _, item := range src.DownwardAPI.Items {
				if item.FieldRef != nil {
					val, err := fieldValue(pod, item.FieldRef.FieldPath)
					if err != nil {
						return err
					}
					files[item.Path] = []byte(val)
				}
			}
		}
	}
	if v.Name == "kube-api-access" || strings.HasPrefix(v.Name, "kube-api-access-") {
		files["ca.crt"] = n.config.CAData
		files["namespace"] = []byte(pod.Namespace)
	}
	return nil
}

// volumeData reads the data of a Secret or ConfigMap (kind "secret" or
// "configmap") a volume names; found is false (and err nil) when it is
// absent and optional.
func (n *Node) volumeData(ctx context.Context, pod *corev1.Pod, volume, kind, name string, optional *bool) (data map[string][]byte, found bool, err error) {
	data, err = n.objectData(ctx, pod.Namespace, kind, name)
	if err != nil {
		if optional != nil && *optional {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("volume %s: %s %q: %w", volume, kind, name, err)
	}
	return data, true, nil
}

// objectData reads the data of a Secret or ConfigMap (kind "secret" or
// "configmap") in namespace.
func (n *Node) objectData(ctx context.Context, namespace, kind, name string) (map[string][]byte, error) {
	if kind == "secret" {
		s, err := n.client.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return s.Data, nil
	}
	cm, err := n.client.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return configMapData(cm), nil
}

func configMapData(cm *corev1.ConfigMap) map[string][]byte {
	data := map[string][]byte{}
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	return data
}

func project(files map[string][]byte, data map[string][]byte, items []corev1.KeyToPath) error {
	if len(items) == 0 {
		for k, v := range data {
			files[k] = v
		}
		return nil
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			if it.Key == "" {
				continue
			}
			return fmt.Errorf("key %q not found", it.Key)
		}
		files[it.Path] = v
	}
	return nil
}

func writeFiles(dir string, files map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for name, data := range files {
		p := filepath.Join(dir, filepath.Clean("/"+name))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(p, data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

func (n *Node) requestToken(ctx context.Context, pod *corev1.Pod) (string, error) {
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	expiry := int64(tokenLifetime.Seconds())
	tr, err := n.client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: &expiry,
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for serviceaccount %s/%s: %w", pod.Namespace, sa, err)
	}
	return tr.Status.Token, nil
}

// writeKubeconfig points at the token file rather than embedding the token:
// clients re-read the file, so a renewed token is picked up the way
// in-cluster clients pick up the kubelet's renewals.
func (n *Node) writeKubeconfig(path, namespace, tokenFile string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: n.opts.Host, CertificateAuthorityData: n.config.CAData}
	cfg.AuthInfos["pod"] = &clientcmdapi.AuthInfo{TokenFile: tokenFile}
	cfg.Contexts["pod"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "pod", Namespace: namespace}
	cfg.CurrentContext = "pod"
	return clientcmd.WriteToFile(*cfg, path)
}

func fieldValue(pod *corev1.Pod, path string) (string, error) {
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "status.podIP", "status.hostIP":
		return "127.0.0.1", nil
	}
	if strings.HasPrefix(path, "metadata.labels['") {
		return pod.Labels[strings.TrimSuffix(strings.TrimPrefix(path, "metadata.labels['"), "']")], nil
	}
	if strings.HasPrefix(path, "metadata.annotations['") {
		return pod.Annotations[strings.TrimSuffix(strings.TrimPrefix(path, "metadata.annotations['"), "']")], nil
	}
	return "", fmt.Errorf("fieldRef %q is not supported by the local node", path)
}
