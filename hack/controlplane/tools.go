//go:build tools

// Package controlplane pins the sources of the local control plane binaries
// (etcd, kube-apiserver, kube-controller-manager) that the tests and the local
// run start. The Makefile builds them from this module into bin/.
package controlplane

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
