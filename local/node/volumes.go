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
	token := ""
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
	if needToken {
		var err error
		token, err = n.requestToken(ctx, pod)
		if err != nil {
			return env, err
		}
		env.serviceAccountDir = filepath.Join(dir, "serviceaccount")
		if err := writeFiles(env.serviceAccountDir, map[string][]byte{
			"token":     []byte(token),
			"ca.crt":    n.config.CAData,
			"namespace": []byte(pod.Namespace),
		}); err != nil {
			return env, err
		}
		env.tokenFiles = append(env.tokenFiles, filepath.Join(env.serviceAccountDir, "token"))
		env.kubeconfig = filepath.Join(dir, "kubeconfig")
		if err := n.writeKubeconfig(env.kubeconfig, pod.Namespace, filepath.Join(env.serviceAccountDir, "token")); err != nil {
			return env, err
		}
	}
	for _, v := range pod.Spec.Volumes {
		vdir := filepath.Join(dir, "volumes", v.Name)
		files := map[string][]byte{}
		switch {
		case v.Secret != nil:
			s, err := n.client.CoreV1().Secrets(pod.Namespace).Get(ctx, v.Secret.SecretName, metav1.GetOptions{})
			if err != nil {
				if v.Secret.Optional != nil && *v.Secret.Optional {
					break
				}
				return env, fmt.Errorf("volume %s: secret %q: %w", v.Name, v.Secret.SecretName, err)
			}
			if err := project(files, s.Data, v.Secret.Items); err != nil {
				return env, fmt.Errorf("volume %s: %w", v.Name, err)
			}
		case v.ConfigMap != nil:
			cm, err := n.client.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, v.ConfigMap.Name, metav1.GetOptions{})
			if err != nil {
				if v.ConfigMap.Optional != nil && *v.ConfigMap.Optional {
					break
				}
				return env, fmt.Errorf("volume %s: configmap %q: %w", v.Name, v.ConfigMap.Name, err)
			}
			if err := project(files, configMapData(cm), v.ConfigMap.Items); err != nil {
				return env, fmt.Errorf("volume %s: %w", v.Name, err)
			}
		case v.Projected != nil:
			for _, src := range v.Projected.Sources {
				switch {
				case src.Secret != nil:
					s, err := n.client.CoreV1().Secrets(pod.Namespace).Get(ctx, src.Secret.Name, metav1.GetOptions{})
					if err != nil {
						if src.Secret.Optional != nil && *src.Secret.Optional {
							continue
						}
						return env, fmt.Errorf("volume %s: secret %q: %w", v.Name, src.Secret.Name, err)
					}
					if err := project(files, s.Data, src.Secret.Items); err != nil {
						return env, err
					}
				case src.ConfigMap != nil:
					cm, err := n.client.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, src.ConfigMap.Name, metav1.GetOptions{})
					if err != nil {
						if src.ConfigMap.Optional != nil && *src.ConfigMap.Optional {
							continue
						}
						return env, fmt.Errorf("volume %s: configmap %q: %w", v.Name, src.ConfigMap.Name, err)
					}
					if err := project(files, configMapData(cm), src.ConfigMap.Items); err != nil {
						return env, err
					}
				case src.ServiceAccountToken != nil:
					files[src.ServiceAccountToken.Path] = []byte(token)
					env.tokenFiles = append(env.tokenFiles, filepath.Join(vdir, filepath.Clean("/"+src.ServiceAccountToken.Path)))
				case src.DownwardAPI != nil:
					for _, item := range src.DownwardAPI.Items {
						if item.FieldRef != nil {
							val, err := fieldValue(pod, item.FieldRef.FieldPath)
							if err != nil {
								return env, err
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
		case v.EmptyDir != nil:
		default:
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

// containerEnv resolves the container's environment: the node's base
// environment, env and envFrom (Secrets, ConfigMaps, fields), and KUBECONFIG.
//
// The returned set names the variables the container defined; only those are
// subject to mount-path rewriting (the node's own paths are already local).
func (n *Node) containerEnv(ctx context.Context, pod *corev1.Pod, c *corev1.Container, pe podEnv) ([]string, map[string]bool, error) {
	vars := map[string]string{}
	fromContainer := map[string]bool{}
	nodeProvided := true
	var order []string
	set := func(k, v string) {
		if _, ok := vars[k]; !ok {
			order = append(order, k)
		}
		vars[k] = v
		fromContainer[k] = !nodeProvided
	}
	for _, kv := range n.opts.Env {
		k, v, _ := strings.Cut(kv, "=")
		set(k, v)
	}
	if _, ok := vars["PATH"]; !ok {
		set("PATH", os.Getenv("PATH"))
	}
	set("HOME", filepath.Dir(pe.kubeconfigOr(n.opts.Dir)))
	set("HOSTNAME", pod.Name)
	if pe.kubeconfig != "" {
		set("KUBECONFIG", pe.kubeconfig)
	}
	if proxy := n.ProxyURL(); proxy != "" {
		set("HTTP_PROXY", proxy)
		set("http_proxy", proxy)
	}
	nodeProvided = false
	for _, from := range c.EnvFrom {
		var data map[string][]byte
		switch {
		case from.SecretRef != nil:
			s, err := n.client.CoreV1().Secrets(pod.Namespace).Get(ctx, from.SecretRef.Name, metav1.GetOptions{})
			if err != nil {
				if from.SecretRef.Optional != nil && *from.SecretRef.Optional {
					continue
				}
				return nil, nil, fmt.Errorf("envFrom secret %q: %w", from.SecretRef.Name, err)
			}
			data = s.Data
		case from.ConfigMapRef != nil:
			cm, err := n.client.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, from.ConfigMapRef.Name, metav1.GetOptions{})
			if err != nil {
				if from.ConfigMapRef.Optional != nil && *from.ConfigMapRef.Optional {
					continue
				}
				return nil, nil, fmt.Errorf("envFrom configmap %q: %w", from.ConfigMapRef.Name, err)
			}
			data = configMapData(cm)
		}
		keys := make([]string, 0, len(data))
		for k := range data {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			set(from.Prefix+k, string(data[k]))
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			set(e.Name, expandVars(e.Value, vars))
			continue
		}
		switch {
		case e.ValueFrom.FieldRef != nil:
			v, err := fieldValue(pod, e.ValueFrom.FieldRef.FieldPath)
			if err != nil {
				return nil, nil, fmt.Errorf("env %s: %w", e.Name, err)
			}
			set(e.Name, v)
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			s, err := n.client.CoreV1().Secrets(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
			optional := ref.Optional != nil && *ref.Optional
			if err != nil {
				if optional {
					continue
				}
				return nil, nil, fmt.Errorf("env %s: secret %q: %w", e.Name, ref.Name, err)
			}
			v, ok := s.Data[ref.Key]
			if !ok && !optional {
				return nil, nil, fmt.Errorf("env %s: secret %q has no key %q", e.Name, ref.Name, ref.Key)
			}
			set(e.Name, string(v))
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			cm, err := n.client.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
			optional := ref.Optional != nil && *ref.Optional
			if err != nil {
				if optional {
					continue
				}
				return nil, nil, fmt.Errorf("env %s: configmap %q: %w", e.Name, ref.Name, err)
			}
			v, ok := cm.Data[ref.Key]
			if !ok && !optional {
				return nil, nil, fmt.Errorf("env %s: configmap %q has no key %q", e.Name, ref.Name, ref.Key)
			}
			set(e.Name, v)
		}
	}
	out := make([]string, 0, len(order))
	for _, k := range order {
		out = append(out, k+"="+vars[k])
	}
	return out, fromContainer, nil
}

func (e podEnv) kubeconfigOr(dir string) string {
	if e.kubeconfig != "" {
		return e.kubeconfig
	}
	return filepath.Join(dir, "home")
}
