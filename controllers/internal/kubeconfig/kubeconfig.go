// Package kubeconfig reads the kubeconfig of a workload cluster's Secret into
// a rest.Config, refusing what would make the operator do more than present
// one inline credential to one verified server: running a command (exec, an
// auth provider), reading a file of its own pod (a token file, a certificate,
// key or CA path), trusting any server (insecure-skip-tls-verify, plain
// HTTP) or acting as someone else (impersonation). The management cluster's
// Secret then says all there is to know of the credentials: whoever can write
// it cannot make the operator run a binary of its image or send its own
// projected token elsewhere.
//
// Every error names a field of the kubeconfig, never a value of it, nor
// even the names of its contexts, clusters and users.
package kubeconfig

import (
	"errors"
	"fmt"
	"net/url"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ErrInvalid means the data is not a kubeconfig whose current context names
// a cluster and a user: there is nothing to connect with.
var ErrInvalid = errors.New("not a kubeconfig with a current context, its cluster and its user")

// UnsafeError names a field of the current context's cluster or user that
// Petri refuses, and why; it carries nothing of the field's value.
type UnsafeError struct {
	// Field is the field, under the current context's user or cluster:
	// user.exec, cluster.insecure-skip-tls-verify. Not even the user's or
	// the cluster's name is quoted.
	Field string
	// Why says what the field would make the operator do, or what is
	// missing.
	Why string
}

func (e *UnsafeError) Error() string {
	return fmt.Sprintf("the current context's %s: %s; Petri takes only an inline token or inline client-certificate-data and client-key-data, and an https server with inline certificate-authority-data", e.Field, e.Why)
}

// RESTConfig is the rest.Config of data's current context, once its cluster
// and user hold nothing but what Petri takes: an https server with inline
// certificate-authority-data (and optionally tls-server-name, proxy-url,
// disable-compression), and either an inline token or inline
// client-certificate-data with client-key-data. Errors are ErrInvalid
// (wrapped, with a detail that names no value) or an *UnsafeError.
func RESTConfig(data []byte) (*rest.Config, error) {
	cfg, err := clientcmd.Load(data)
	if err != nil {
		// The decoder's message may quote the data.
		return nil, ErrInvalid
	}
	if err := Check(cfg); err != nil {
		return nil, err
	}
	rc, err := clientcmd.NewDefaultClientConfig(*cfg, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalid, "its current context does not make a client configuration")
	}
	return rc, nil
}

// Check refuses a kubeconfig whose current context's cluster or user holds
// anything but what RESTConfig takes. Other contexts, clusters and users are
// not read, and not checked.
func Check(cfg *clientcmdapi.Config) error {
	if cfg.CurrentContext == "" {
		return fmt.Errorf("%w: it has no current-context", ErrInvalid)
	}
	kctx, ok := cfg.Contexts[cfg.CurrentContext]
	if !ok || kctx == nil {
		return fmt.Errorf("%w: its current-context is not among its contexts", ErrInvalid)
	}
	cluster, ok := cfg.Clusters[kctx.Cluster]
	if !ok || cluster == nil {
		return fmt.Errorf("%w: the cluster of its current context is not among its clusters", ErrInvalid)
	}
	user, ok := cfg.AuthInfos[kctx.AuthInfo]
	if !ok || user == nil {
		return fmt.Errorf("%w: the user of its current context is not among its users", ErrInvalid)
	}
	if err := checkCluster(cluster); err != nil {
		return err
	}
	return checkUser(user)
}

func checkCluster(c *clientcmdapi.Cluster) error {
	field := func(f string) string { return "cluster." + f }
	switch {
	case c.InsecureSkipTLSVerify:
		return &UnsafeError{Field: field("insecure-skip-tls-verify"), Why: "the operator would send its credentials to whichever server answers, unverified"}
	case c.CertificateAuthority != "":
		return &UnsafeError{Field: field("certificate-authority"), Why: "a file path, read from the operator's own file system"}
	case len(c.CertificateAuthorityData) == 0:
		return &UnsafeError{Field: field("certificate-authority-data"), Why: "missing: the server would be verified against the operator image's system roots instead of the workload cluster's CA"}
	}
	u, err := url.Parse(c.Server)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return &UnsafeError{Field: field("server"), Why: "not an https URL: the credentials would cross the network unencrypted, or to no server"}
	}
	return nil
}

func checkUser(u *clientcmdapi.AuthInfo) error {
	field := func(f string) string { return "user." + f }
	switch {
	case u.Exec != nil:
		return &UnsafeError{Field: field("exec"), Why: "a command the operator would run in its pod"}
	case u.AuthProvider != nil:
		return &UnsafeError{Field: field("auth-provider"), Why: "a plugin the operator would run, with state it would write back"}
	case u.TokenFile != "":
		return &UnsafeError{Field: field("tokenFile"), Why: "a file path, read from the operator's own file system (its own token, say) and sent to the server"}
	case u.ClientCertificate != "":
		return &UnsafeError{Field: field("client-certificate"), Why: "a file path, read from the operator's own file system"}
	case u.ClientKey != "":
		return &UnsafeError{Field: field("client-key"), Why: "a file path, read from the operator's own file system"}
	case u.Impersonate != "" || u.ImpersonateUID != "" || len(u.ImpersonateGroups) > 0 || len(u.ImpersonateUserExtra) > 0:
		return &UnsafeError{Field: field("as"), Why: "impersonation: the credentials would be another identity's than the one the cluster reports"}
	case u.Username != "" || u.Password != "":
		return &UnsafeError{Field: field("username"), Why: "basic authentication, which Kubernetes API servers no longer accept"}
	}
	cert, key := len(u.ClientCertificateData) > 0, len(u.ClientKeyData) > 0
	switch {
	case u.Token != "" && (cert || key):
		return &UnsafeError{Field: field("token"), Why: "given with a client certificate: give one credential, so that the one the cluster reports is the only one"}
	case cert && !key:
		return &UnsafeError{Field: field("client-key-data"), Why: "missing: client-certificate-data needs its key"}
	case key && !cert:
		return &UnsafeError{Field: field("client-certificate-data"), Why: "missing: client-key-data needs its certificate"}
	case u.Token == "" && !cert:
		return &UnsafeError{Field: field("token"), Why: "missing: the user has no inline credential"}
	}
	return nil
}
