package objects

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// The Pod Security admission labels the operator sets.
const (
	LabelPodSecurityEnforce        = "pod-security.kubernetes.io/enforce"
	LabelPodSecurityEnforceVersion = "pod-security.kubernetes.io/enforce-version"
)

// PodSecurityLabels put a namespace at level, for the latest version of
// the standards the API server knows.
func PodSecurityLabels(level string) map[string]string {
	return map[string]string{LabelPodSecurityEnforce: level, LabelPodSecurityEnforceVersion: "latest"}
}

// WithPodSecurity adds the labels of level to a namespace about to be
// created.
func WithPodSecurity(ns *corev1.Namespace, level string) *corev1.Namespace {
	if ns.Labels == nil {
		ns.Labels = map[string]string{}
	}
	for k, v := range PodSecurityLabels(level) {
		ns.Labels[k] = v
	}
	return ns
}

// EnsurePodSecurity puts ns at level when its labels say otherwise: one
// merge patch of the two labels, no request when they already say it.
func EnsurePodSecurity(ctx context.Context, c client.Client, ns *corev1.Namespace, level string) error {
	want := PodSecurityLabels(level)
	same := true
	for k, v := range want {
		if ns.Labels[k] != v {
			same = false
		}
	}
	if same {
		return nil
	}
	was := ns.Labels[LabelPodSecurityEnforce]
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": want}})
	if err != nil {
		return err
	}
	if err := c.Patch(ctx, ns, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("set Pod Security level %s on namespace %s: %w", level, ns.Name, err)
	}
	log.FromContext(ctx).Info("Set the namespace's Pod Security level", "namespace", ns.Name, "level", level, "was", was)
	return nil
}
