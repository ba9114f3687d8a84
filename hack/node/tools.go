//go:build tools

// Package node pins the sources of the real node's Kubernetes binaries
// (kubelet, kube-scheduler, kube-proxy) that local/realnode starts. They are
// built from the same k8s.io/kubernetes version as the control plane's
// kube-apiserver (hack/controlplane); the Makefile's node target builds them
// from this module into bin/.
package node

import (
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
