package controllers

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/petri-dev/petri/controllers/internal/options"
)

// Pod Security of the namespaces Petri places workloads in.
//
// Every namespace the operator creates for an environment, and the shared
// namespace, enforces one level of the Pod Security Standards through the
// API server's Pod Security admission: the installation's
// --workload-pod-security, which the admission fences read too (key
// workload-pod-security of the ConfigMap petri-operator). The operator sets
// it when it creates a namespace and puts it back on the next pass when a
// namespace carries another. Nothing an environment's spec, a pull request
// or a chart says moves it: the deployer identities may not change their
// namespace, and the fences let the operator set no other level and change
// nothing else of a namespace.

// The Pod Security admission labels the operator sets.
const (
	LabelPodSecurityEnforce        = "pod-security.kubernetes.io/enforce"
	LabelPodSecurityEnforceVersion = "pod-security.kubernetes.io/enforce-version"
)

// PodSecurityLevels are the levels --workload-pod-security takes.
var PodSecurityLevels = options.PodSecurityLevels

// DefaultWorkloadPodSecurity is the level of an installation that names
// none (options.DefaultWorkloadPodSecurity).
const DefaultWorkloadPodSecurity = options.DefaultWorkloadPodSecurity

// podSecurityLabels put a namespace at level, for the latest version of
// the standards the API server knows.
func podSecurityLabels(level string) map[string]string {
	return map[string]string{LabelPodSecurityEnforce: level, LabelPodSecurityEnforceVersion: "latest"}
}

// withPodSecurity adds the labels of level to a namespace about to be
// created.
func withPodSecurity(ns *corev1.Namespace, level string) *corev1.Namespace {
	if ns.Labels == nil {
		ns.Labels = map[string]string{}
	}
	for k, v := range podSecurityLabels(level) {
		ns.Labels[k] = v
	}
	return ns
}

// ensurePodSecurity puts ns at level when its labels say otherwise: one
// merge patch of the two labels, no request when they already say it.
func ensurePodSecurity(ctx context.Context, c client.Client, ns *corev1.Namespace, level string) error {
	want := podSecurityLabels(level)
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
