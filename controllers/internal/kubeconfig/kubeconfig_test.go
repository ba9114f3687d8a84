package kubeconfig

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"
	"sigs.k8s.io/yaml"
)

// Values that no error may quote.
const (
	token   = "tok-3f9a1c77e2d04b5c"
	caData  = "ca-5d2e8b01"
	crtData = "crt-7a41c9e0"
	keyData = "key-c0ffee42"
	path    = "/var/run/secrets/kubernetes.io/serviceaccount/token"
	command = "gke-gcloud-auth-plugin"
	secret  = "pw-91b3"
)

// kubeconfig is a kubeconfig of the safe shape, as a Secret carries it,
// changed by edit.
func kubeconfig(t *testing.T, edit func(*clientcmdv1.Config)) []byte {
	t.Helper()
	cfg := clientcmdv1.Config{
		CurrentContext: "east",
		Clusters: []clientcmdv1.NamedCluster{{Name: "east", Cluster: clientcmdv1.Cluster{
			Server: "https://east.example.com:6443", CertificateAuthorityData: []byte(caData),
		}}},
		AuthInfos: []clientcmdv1.NamedAuthInfo{{Name: "petri-operator", AuthInfo: clientcmdv1.AuthInfo{Token: token}}},
		Contexts:  []clientcmdv1.NamedContext{{Name: "east", Context: clientcmdv1.Context{Cluster: "east", AuthInfo: "petri-operator", Namespace: "petri-system"}}},
	}
	if edit != nil {
		edit(&cfg)
	}
	data, err := yaml.Marshal(cfg)
	require.NoError(t, err)
	return data
}

func user(f func(*clientcmdv1.AuthInfo)) func(*clientcmdv1.Config) {
	return func(c *clientcmdv1.Config) { f(&c.AuthInfos[0].AuthInfo) }
}

func cluster(f func(*clientcmdv1.Cluster)) func(*clientcmdv1.Config) {
	return func(c *clientcmdv1.Config) { f(&c.Clusters[0].Cluster) }
}

func TestRESTConfigTakesInlineCredentials(t *testing.T) {
	t.Run("token", func(t *testing.T) {
		cfg, err := RESTConfig(kubeconfig(t, nil))
		require.NoError(t, err)
		assert.Equal(t, "https://east.example.com:6443", cfg.Host)
		assert.Equal(t, token, cfg.BearerToken)
		assert.Equal(t, []byte(caData), cfg.CAData)
		assert.Nil(t, cfg.ExecProvider)
		assert.Nil(t, cfg.AuthProvider)
		assert.Empty(t, cfg.BearerTokenFile)
		assert.False(t, cfg.Insecure)
	})
	t.Run("client certificate", func(t *testing.T) {
		cfg, err := RESTConfig(kubeconfig(t, user(func(u *clientcmdv1.AuthInfo) {
			u.Token, u.ClientCertificateData, u.ClientKeyData = "", []byte(crtData), []byte(keyData)
		})))
		require.NoError(t, err)
		assert.Equal(t, []byte(crtData), cfg.CertData)
		assert.Equal(t, []byte(keyData), cfg.KeyData)
		assert.Empty(t, cfg.BearerToken)
	})
	t.Run("other contexts are not read", func(t *testing.T) {
		_, err := RESTConfig(kubeconfig(t, func(c *clientcmdv1.Config) {
			c.AuthInfos = append(c.AuthInfos, clientcmdv1.NamedAuthInfo{Name: "laptop", AuthInfo: clientcmdv1.AuthInfo{Exec: &clientcmdv1.ExecConfig{Command: command, APIVersion: "client.authentication.k8s.io/v1"}}})
			c.Contexts = append(c.Contexts, clientcmdv1.NamedContext{Name: "laptop", Context: clientcmdv1.Context{Cluster: "east", AuthInfo: "laptop"}})
		}))
		require.NoError(t, err)
	})
}

func TestRESTConfigRefusesWhatIsNotInline(t *testing.T) {
	cases := []struct {
		name  string
		edit  func(*clientcmdv1.Config)
		field string
	}{
		{"exec plugin", user(func(u *clientcmdv1.AuthInfo) {
			u.Token = ""
			u.Exec = &clientcmdv1.ExecConfig{Command: command, Args: []string{"--token", secret}, APIVersion: "client.authentication.k8s.io/v1"}
		}), "user.exec"},
		{"auth provider", user(func(u *clientcmdv1.AuthInfo) {
			u.Token = ""
			u.AuthProvider = &clientcmdv1.AuthProviderConfig{Name: "oidc", Config: map[string]string{"id-token": secret}}
		}), "user.auth-provider"},
		{"token file", user(func(u *clientcmdv1.AuthInfo) { u.Token, u.TokenFile = "", path }), "user.tokenFile"},
		{"token file beside a token", user(func(u *clientcmdv1.AuthInfo) { u.TokenFile = path }), "user.tokenFile"},
		{"client certificate path", user(func(u *clientcmdv1.AuthInfo) {
			u.Token, u.ClientCertificate, u.ClientKeyData = "", path, []byte(keyData)
		}), "user.client-certificate"},
		{"client key path", user(func(u *clientcmdv1.AuthInfo) {
			u.Token, u.ClientCertificateData, u.ClientKey = "", []byte(crtData), path
		}), "user.client-key"},
		{"client certificate without its key", user(func(u *clientcmdv1.AuthInfo) {
			u.Token, u.ClientCertificateData = "", []byte(crtData)
		}), "user.client-key-data"},
		{"token and client certificate", user(func(u *clientcmdv1.AuthInfo) {
			u.ClientCertificateData, u.ClientKeyData = []byte(crtData), []byte(keyData)
		}), "user.token"},
		{"impersonation", user(func(u *clientcmdv1.AuthInfo) {
			u.Impersonate = "system:serviceaccount:petri-system:petri-operator"
		}), "user.as"},
		{"impersonated groups", user(func(u *clientcmdv1.AuthInfo) { u.ImpersonateGroups = []string{"system:masters"} }), "user.as"},
		{"basic authentication", user(func(u *clientcmdv1.AuthInfo) { u.Token, u.Username, u.Password = "", "admin", secret }), "user.username"},
		{"no credential", user(func(u *clientcmdv1.AuthInfo) { u.Token = "" }), "user.token"},
		{"insecure-skip-tls-verify", cluster(func(c *clientcmdv1.Cluster) {
			c.InsecureSkipTLSVerify, c.CertificateAuthorityData = true, nil
		}), "cluster.insecure-skip-tls-verify"},
		{"insecure-skip-tls-verify beside a CA", cluster(func(c *clientcmdv1.Cluster) { c.InsecureSkipTLSVerify = true }), "cluster.insecure-skip-tls-verify"},
		{"CA path", cluster(func(c *clientcmdv1.Cluster) { c.CertificateAuthority, c.CertificateAuthorityData = path, nil }), "cluster.certificate-authority"},
		{"no CA", cluster(func(c *clientcmdv1.Cluster) { c.CertificateAuthorityData = nil }), "cluster.certificate-authority-data"},
		{"plain http", cluster(func(c *clientcmdv1.Cluster) { c.Server = "http://east.example.com:8080" }), "cluster.server"},
		{"no server", cluster(func(c *clientcmdv1.Cluster) { c.Server = "" }), "cluster.server"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := RESTConfig(kubeconfig(t, tc.edit))
			require.Error(t, err)
			assert.Nil(t, cfg)
			var unsafe *UnsafeError
			require.ErrorAs(t, err, &unsafe)
			assert.Equal(t, tc.field, unsafe.Field)
			assert.Contains(t, err.Error(), tc.field)
			assertQuotesNothing(t, err)
		})
	}
}

func TestRESTConfigRefusesWhatIsNoKubeconfig(t *testing.T) {
	cases := []struct {
		name string
		data []byte
		says string
	}{
		{"not YAML", []byte("token: " + token + "\n\t: ["), ""},
		{"no current context", kubeconfig(t, func(c *clientcmdv1.Config) { c.CurrentContext = "" }), "no current-context"},
		{"unknown context", kubeconfig(t, func(c *clientcmdv1.Config) { c.CurrentContext = "west" }), "current-context is not among its contexts"},
		{"unknown cluster", kubeconfig(t, func(c *clientcmdv1.Config) { c.Contexts[0].Context.Cluster = "west" }), "cluster of its current context"},
		{"unknown user", kubeconfig(t, func(c *clientcmdv1.Config) { c.Contexts[0].Context.AuthInfo = "admin" }), "user of its current context"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := RESTConfig(tc.data)
			require.ErrorIs(t, err, ErrInvalid)
			assert.False(t, errors.As(err, new(*UnsafeError)))
			assert.Contains(t, err.Error(), tc.says)
			assertQuotesNothing(t, err)
		})
	}
}

func assertQuotesNothing(t *testing.T, err error) {
	t.Helper()
	for _, v := range []string{token, caData, crtData, keyData, path, command, secret, "petri-operator", "east"} {
		assert.NotContains(t, err.Error(), v)
	}
}
