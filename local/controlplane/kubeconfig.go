package controlplane

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// WriteServiceAccountKubeconfig writes a kubeconfig that authenticates as a
// ServiceAccount with a token from the TokenRequest API (valid for the
// longest time the API server allows, 48h here) and returns its path: for a
// program started as its own process under that identity, such as the
// operator in the benchmarks.
func (c *Cluster) WriteServiceAccountKubeconfig(ctx context.Context, namespace, name string) (string, error) {
	cfg, err := c.ServiceAccountConfig(ctx, namespace, name)
	if err != nil {
		return "", err
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["local"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: name, Namespace: namespace}
	kc.CurrentContext = "local"
	path := filepath.Join(c.Dir, fmt.Sprintf("kubeconfig-sa-%s-%s", namespace, name))
	data, err := clientcmd.Write(*kc)
	if err != nil {
		return "", fmt.Errorf("kubeconfig of serviceaccount %s/%s: %w", namespace, name, err)
	}
	return path, os.WriteFile(path, data, 0o600)
}
