package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// containerEnv resolves the container's environment: the node's base
// environment, env and envFrom (Secrets, ConfigMaps, fields), and KUBECONFIG.
//
// The returned set names the variables the container defined; only those are
// subject to mount-path rewriting (the node's own paths are already local).
func (n *Node) containerEnv(ctx context.Context, pod *corev1.Pod, c *corev1.Container, pe podEnv) ([]string, map[string]bool, error) {
	e := &envVars{vars: map[string]string{}, fromContainer: map[string]bool{}}
	n.nodeEnv(e, pod, pe)
	e.container = true
	for _, from := range c.EnvFrom {
		if err := n.addEnvFrom(ctx, e, pod, from); err != nil {
			return nil, nil, err
		}
	}
	for _, ev := range c.Env {
		v, ok, err := n.envValue(ctx, pod, ev, e.vars)
		if err != nil {
			return nil, nil, err
		}
		if ok {
			e.set(ev.Name, v)
		}
	}
	return e.list(), e.fromContainer, nil
}

// envVars is an environment being resolved: a later value of a variable
// wins, its first setting fixes its place.
type envVars struct {
	vars  map[string]string
	order []string
	// fromContainer names the variables the container set; container says
	// whether set sets the container's own.
	fromContainer map[string]bool
	container     bool
}

func (e *envVars) set(k, v string) {
	if _, ok := e.vars[k]; !ok {
		e.order = append(e.order, k)
	}
	e.vars[k] = v
	e.fromContainer[k] = e.container
}

// list is the environment as KEY=VALUE, in order.
func (e *envVars) list() []string {
	out := make([]string, 0, len(e.order))
	for _, k := range e.order {
		out = append(out, k+"="+e.vars[k])
	}
	return out
}

// nodeEnv sets what the node gives every process: Options.Env, PATH, HOME,
// HOSTNAME, KUBECONFIG and the service proxy.
func (n *Node) nodeEnv(e *envVars, pod *corev1.Pod, pe podEnv) {
	for _, kv := range n.opts.Env {
		k, v, _ := strings.Cut(kv, "=")
		e.set(k, v)
	}
	if _, ok := e.vars["PATH"]; !ok {
		e.set("PATH", os.Getenv("PATH"))
	}
	e.set("HOME", filepath.Dir(pe.kubeconfigOr(n.opts.Dir)))
	e.set("HOSTNAME", pod.Name)
	if pe.kubeconfig != "" {
		e.set("KUBECONFIG", pe.kubeconfig)
	}
	if proxy := n.ProxyURL(); proxy != "" {
		e.set("HTTP_PROXY", proxy)
		e.set("http_proxy", proxy)
	}
}

// addEnvFrom sets every key of an envFrom Secret or ConfigMap, sorted, with
// its prefix.
func (n *Node) addEnvFrom(ctx context.Context, e *envVars, pod *corev1.Pod, from corev1.EnvFromSource) error {
	var kind, name string
	var optional *bool
	switch {
	case from.SecretRef != nil:
		kind, name, optional = "secret", from.SecretRef.Name, from.SecretRef.Optional
	case from.ConfigMapRef != nil:
		kind, name, optional = "configmap", from.ConfigMapRef.Name, from.ConfigMapRef.Optional
	default:
		return nil
	}
	data, err := n.objectData(ctx, pod.Namespace, kind, name)
	if err != nil {
		if optional != nil && *optional {
			return nil
		}
		return fmt.Errorf("envFrom %s %q: %w", kind, name, err)
	}
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		e.set(from.Prefix+k, string(data[k]))
	}
	return nil
}

// envValue resolves one env entry against the variables set so far; ok is
// false for an optional reference that is absent (the variable stays
// unset).
func (n *Node) envValue(ctx context.Context, pod *corev1.Pod, ev corev1.EnvVar, vars map[string]string) (v string, ok bool, err error) {
	if ev.ValueFrom == nil {
		return expandVars(ev.Value, vars), true, nil
	}
	switch {
	case ev.ValueFrom.FieldRef != nil:
		v, err := fieldValue(pod, ev.ValueFrom.FieldRef.FieldPath)
		if err != nil {
			return "", false, fmt.Errorf("env %s: %w", ev.Name, err)
		}
		return v, true, nil
	case ev.ValueFrom.SecretKeyRef != nil:
		ref := ev.ValueFrom.SecretKeyRef
		s, err := n.client.CoreV1().Secrets(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		optional := ref.Optional != nil && *ref.Optional
		if err != nil {
			if optional {
				return "", false, nil
			}
			return "", false, fmt.Errorf("env %s: secret %q: %w", ev.Name, ref.Name, err)
		}
		v, found := s.Data[ref.Key]
		if !found && !optional {
			return "", false, fmt.Errorf("env %s: secret %q has no key %q", ev.Name, ref.Name, ref.Key)
		}
		return string(v), true, nil
	case ev.ValueFrom.ConfigMapKeyRef != nil:
		ref := ev.ValueFrom.ConfigMapKeyRef
		cm, err := n.client.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		optional := ref.Optional != nil && *ref.Optional
		if err != nil {
			if optional {
				return "", false, nil
			}
			return "", false, fmt.Errorf("env %s: configmap %q: %w", ev.Name, ref.Name, err)
		}
		v, found := cm.Data[ref.Key]
		if !found && !optional {
			return "", false, fmt.Errorf("env %s: configmap %q has no key %q", ev.Name, ref.Name, ref.Key)
		}
		return v, true, nil
	}
	return "", false, nil
}

func (e podEnv) kubeconfigOr(dir string) string {
	if e.kubeconfig != "" {
		return e.kubeconfig
	}
	return filepath.Join(dir, "home")
}
