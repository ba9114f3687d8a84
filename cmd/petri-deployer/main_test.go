package main

import (
	"bytes"
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/provenance"
	"helm.sh/helm/v3/pkg/registry"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/repo"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/petri-dev/petri/api/contract"
	"github.com/petri-dev/petri/deployer"
	"github.com/petri-dev/petri/local/controlplane"
)

var (
	env    *controlplane.Cluster
	binary string
	charts string
)

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	root, err := controlplane.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	charts = filepath.Join(root, "examples", "charts")
	dir, err := os.MkdirTemp("", "petri-deployer-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	bins, err := controlplane.Build(dir, "./cmd/petri-deployer")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	binary = bins["petri-deployer"]
	env, err = controlplane.Start(controlplane.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer env.Stop()
	return m.Run()
}

type result struct {
	code           int
	stdout, stderr string
	// terminationLog is the file's content; "<absent>" when not written.
	terminationLog string
}

// runDeployer runs the built binary as a Job's container would, with KUBECONFIG
// standing in for the in-cluster ServiceAccount.
func runDeployer(t *testing.T, kubeconfig string, args ...string) result {
	t.Helper()
	tlog := filepath.Join(t.TempDir(), "termination-log")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, append(args, "--termination-log", tlog)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "HOME="+t.TempDir())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := result{stdout: stdout.String(), stderr: stderr.String(), terminationLog: "<absent>"}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		res.code = exit.ExitCode()
	} else {
		require.NoError(t, err)
	}
	if data, err := os.ReadFile(tlog); err == nil {
		res.terminationLog = string(data)
	}
	return res
}

// decoded is the typed result of the termination log; the test fails when it
// is not one.
func (r result) decoded(t *testing.T) contract.Result {
	t.Helper()
	res, ok := contract.Decode(r.terminationLog)
	require.True(t, ok, "termination log %q is not a result", r.terminationLog)
	assert.LessOrEqual(t, len(r.terminationLog), contract.MaxBytes)
	assert.NotContains(t, r.terminationLog, "\n")
	return res
}

func namespace(t *testing.T) string {
	t.Helper()
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 40 {
		name = name[:40]
	}
	ns, err := env.CreateNamespace(context.Background(), strings.Trim(name, "-"))
	require.NoError(t, err)
	return ns
}

func valuesFile(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "values.yaml")
	require.NoError(t, os.WriteFile(path, []byte(yaml), 0o600))
	return path
}

func configMapData(ctx context.Context, ns, name string) map[string]string {
	var cm corev1.ConfigMap
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &cm); err != nil {
		return nil
	}
	return cm.Data
}

func TestBinaryDeployUpgradeUndeploy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	deploy := func(values string) result {
		return runDeployer(t, env.Kubeconfig, "deploy", "--release", "web", "--namespace", ns,
			"--chart-repository", charts, "--chart-name", "greeter", "--chart-version", "0.1.0",
			"--values", valuesFile(t, values), "--wait", "--timeout", "1m")
	}

	res := deploy("message: first\nreplicas: 0\n")
	require.Equal(t, 0, res.code, "stdout:\n%s\nstderr:\n%s", res.stdout, res.stderr)
	deployed := res.decoded(t)
	assert.Equal(t, contract.Result{Action: contract.ActionDeploy, Outcome: contract.OutcomeSucceeded, Revision: 1, Message: "Deployed: revision 1"}, deployed,
		"a successful deploy reports the revision it made (status.components[].revision)")
	assert.Contains(t, res.stdout, `"msg":"Deployed","release":"web","namespace":"`+ns+`","action":"install","revision":1,"status":"deployed"`)
	assert.Equal(t, "first", configMapData(ctx, ns, "web-greeter")["message"])

	res = deploy("message: second\nreplicas: 0\n")
	require.Equal(t, 0, res.code, "stdout:\n%s\nstderr:\n%s", res.stdout, res.stderr)
	assert.Contains(t, res.stdout, `"action":"upgrade","revision":2,"status":"deployed"`)
	assert.Equal(t, "second", configMapData(ctx, ns, "web-greeter")["message"])

	for range 2 { // the second time the release is absent
		res = runDeployer(t, env.Kubeconfig, "undeploy", "--release", "web", "--namespace", ns, "--timeout", "1m")
		require.Equal(t, 0, res.code, "stdout:\n%s\nstderr:\n%s", res.stdout, res.stderr)
		assert.Equal(t, "<absent>", res.terminationLog)
	}
	assert.Contains(t, res.stdout, "Release absent, nothing to undeploy")
	err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-greeter"}, &corev1.ConfigMap{})
	assert.True(t, apierrors.IsNotFound(err), "ConfigMap removed: %v", err)
}

// TestBinaryDeployFromRemoteSources checks the --ca-file and --plain-http
// wiring: a TLS chart repository with a private CA, and a plain-HTTP OCI
// registry.
func TestBinaryDeployFromRemoteSources(t *testing.T) {
	t.Parallel()
	ch, err := loader.Load(filepath.Join(charts, "greeter"))
	require.NoError(t, err)
	archive, err := chartutil.Save(ch, t.TempDir())
	require.NoError(t, err)
	data, err := os.ReadFile(archive)
	require.NoError(t, err)
	digest, err := provenance.DigestFile(archive)
	require.NoError(t, err)

	index := repo.NewIndexFile()
	require.NoError(t, index.MustAdd(ch.Metadata, "greeter-0.1.0.tgz", "", digest))
	indexYAML, err := yaml.Marshal(index)
	require.NoError(t, err)
	chartRepo := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/index.yaml":
			_, _ = w.Write(indexYAML)
		case "/greeter-0.1.0.tgz":
			_, _ = w.Write(data)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(chartRepo.Close)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: chartRepo.Certificate().Raw}), 0o600))

	ociRegistry := httptest.NewServer(ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(ociRegistry.Close)
	host := strings.TrimPrefix(ociRegistry.URL, "http://")
	rc, err := registry.NewClient(registry.ClientOptPlainHTTP(), registry.ClientOptWriter(io.Discard))
	require.NoError(t, err)
	_, err = rc.Push(data, host+"/charts/greeter:0.1.0")
	require.NoError(t, err)

	tests := []struct {
		name   string
		source []string
	}{
		{"https repository", []string{"--chart-repository", chartRepo.URL, "--ca-file", caFile}},
		{"oci registry", []string{"--chart-repository", "oci://" + host + "/charts", "--plain-http"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ns := namespace(t)
			args := append([]string{"deploy", "--release", "web", "--namespace", ns, "--chart-name", "greeter", "--chart-version", "0.1.0",
				"--values", valuesFile(t, "message: "+tt.name+"\n")}, tt.source...)
			res := runDeployer(t, env.Kubeconfig, args...)
			require.Equal(t, 0, res.code, "stdout:\n%s\nstderr:\n%s", res.stdout, res.stderr)
			assert.Equal(t, tt.name, configMapData(context.Background(), ns, "web-greeter")["message"])
		})
	}
}

// TestBinaryRecordsFailureOnSIGTERM: a deployer pod that is deleted gets
// SIGTERM; the release must end failed, not pending, so the next deploy
// needs no unlock.
func TestBinaryRecordsFailureOnSIGTERM(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	cmd := exec.Command(binary, "deploy", "--release", "web", "--namespace", ns,
		"--chart-repository", charts, "--chart-name", "greeter", "--chart-version", "0.1.0",
		// No node runs the pod, so the wait lasts until the signal.
		"--values", valuesFile(t, "replicas: 1\n"), "--wait", "--timeout", "5m",
		"--termination-log", filepath.Join(t.TempDir(), "termination-log"))
	cmd.Env = append(os.Environ(), "KUBECONFIG="+env.Kubeconfig, "HOME="+t.TempDir())
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	cfg, err := deployer.NewActionConfig(deployer.NewRESTClientGetter(env.Kubeconfig, ns), ns, logr.Discard())
	require.NoError(t, err)
	status := func() release.Status {
		rel, err := cfg.Releases.Last("web")
		if err != nil {
			return ""
		}
		return rel.Info.Status
	}
	require.Eventually(t, func() bool { return status() == release.StatusPendingInstall }, 30*time.Second, 50*time.Millisecond)
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	err = cmd.Wait()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, 1, exit.ExitCode())
	assert.Equal(t, release.StatusFailed, status())
}

func TestBinaryReportsFailures(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	ctx := context.Background()
	require.NoError(t, env.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nobody"}}))
	nobody := serviceAccountKubeconfig(t, ns, "nobody")
	greeter := []string{"--release", "web", "--namespace", ns, "--chart-repository", charts, "--chart-name", "greeter"}
	good := valuesFile(t, "message: hi\n")

	tests := []struct {
		name       string
		kubeconfig string
		args       []string
		code       int
		message    string
		reason     contract.Reason
		retryable  bool
	}{
		{
			name: "missing version",
			args: append([]string{"deploy", "--chart-version", "9.9.9", "--values", good}, greeter...),
			code: 1, message: "VersionNotFound: chart greeter version 9.9.9 not in " + charts + " (it holds version 0.1.0)",
			reason: contract.ReasonVersionNotFound, retryable: false,
		},
		{
			name: "missing chart",
			args: []string{"deploy", "--release", "web", "--namespace", ns, "--chart-repository", charts, "--chart-name", "nope", "--chart-version", "0.1.0", "--values", good},
			code: 1, message: "ChartNotFound: " + charts + " is not a chart directory and has no nope/ chart",
			reason: contract.ReasonChartNotFound, retryable: false,
		},
		{
			name: "schema violation",
			args: []string{"deploy", "--release", "api", "--namespace", ns, "--chart-repository", charts, "--chart-name", "strict", "--chart-version", "0.1.0", "--values", valuesFile(t, "replicas: 0\n")},
			code: 3, message: "ValuesInvalid: install api: values don't meet the specifications of the schema(s) in the following chart(s): strict: - at '/replicas': minimum: got 0, want 1",
			reason: contract.ReasonValuesInvalid, retryable: false,
		},
		{
			name: "values file is not YAML",
			args: append([]string{"deploy", "--chart-version", "0.1.0", "--values", valuesFile(t, "message: [unclosed\n")}, greeter...),
			code: 3, message: "ValuesInvalid: values file ",
			reason: contract.ReasonValuesInvalid, retryable: false,
		},
		{
			name: "kubeVersion excludes the cluster",
			args: []string{"deploy", "--release", "old", "--namespace", ns, "--chart-repository", charts, "--chart-name", "legacy", "--chart-version", "0.1.0", "--values", good},
			code: 3, message: "KubeVersionIncompatible: install old: chart requires kubeVersion: <1.20.0 which is incompatible with Kubernetes v",
			reason: contract.ReasonKubeVersionIncompatible, retryable: false,
		},
		{
			name: "required value missing",
			args: []string{"deploy", "--release", "pdb", "--namespace", ns, "--chart-repository", charts, "--chart-name", "capabilities", "--chart-version", "0.1.0", "--values", valuesFile(t, "minAvailable: null\n")},
			code: 3, message: "RequiredValueMissing: install pdb: execution error at (capabilities/templates/poddisruptionbudget.yaml:12:19): minAvailable is required",
			reason: contract.ReasonRequiredValueMissing, retryable: false,
		},
		{
			name:       "no rights in the namespace",
			kubeconfig: nobody,
			args:       append([]string{"deploy", "--chart-version", "0.1.0", "--values", good}, greeter...),
			code:       1, message: `KubernetesRefused: lock release web: create lease petri-release-web: leases.coordination.k8s.io is forbidden: User "system:serviceaccount:` + ns + `:nobody" cannot create resource "leases"`,
			reason: contract.ReasonKubernetesRefused, retryable: true,
		},
		{
			name: "missing flags",
			args: []string{"deploy", "--release", "web", "--namespace", ns},
			code: 2, message: "InvalidArguments: deploy --chart-name, --chart-repository, --chart-version, --values required",
			reason: contract.ReasonInvalidArguments, retryable: false,
		},
		{
			name: "unknown flag",
			args: []string{"undeploy", "--release", "web", "--namespace", ns, "--wait"},
			code: 2, message: "InvalidArguments: flag provided but not defined: -wait",
			reason: contract.ReasonInvalidArguments, retryable: false,
		},
		{
			name: "unknown command",
			args: []string{"rollback", "--release", "web"},
			code: 2, message: `InvalidArguments: unknown command "rollback": want deploy, undeploy, write-secret, sleep, wake or verify`,
			reason: contract.ReasonInvalidArguments, retryable: false,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			kubeconfig := tt.kubeconfig
			if kubeconfig == "" {
				kubeconfig = env.Kubeconfig
			}
			res := runDeployer(t, kubeconfig, tt.args...)
			assert.Equal(t, tt.code, res.code, "stdout:\n%s\nstderr:\n%s", res.stdout, res.stderr)
			got := res.decoded(t)
			assert.Equal(t, contract.OutcomeFailed, got.Outcome)
			assert.Equal(t, tt.reason, got.Reason)
			assert.Equal(t, tt.retryable, got.Retryable, "whether a new Job of the same spec may succeed")
			assert.True(t, strings.HasPrefix(got.Message, tt.message), "message %q does not start with %q", got.Message, tt.message)
			assert.NotContains(t, got.Message, "\n")
			assert.LessOrEqual(t, len(got.Message), 1024)
			assert.Contains(t, res.stderr, got.Message)
		})
	}

	t.Run("termination log not writable", func(t *testing.T) {
		t.Parallel()
		cmd := exec.Command(binary, "deploy", "--termination-log", "/nonexistent/dir/termination-log")
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit)
		assert.Equal(t, 2, exit.ExitCode())
		assert.Contains(t, string(out), "InvalidArguments: deploy --chart-name")
		assert.Contains(t, string(out), "cannot write termination log /nonexistent/dir/termination-log")
	})
}

func TestTerminationLogArg(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want string
	}{
		{nil, defaultTerminationLog},
		{[]string{"deploy", "--release", "x"}, defaultTerminationLog},
		{[]string{"deploy", "--bogus", "--termination-log", "/tmp/a"}, "/tmp/a"},
		{[]string{"deploy", "-termination-log=/tmp/b", "--bogus"}, "/tmp/b"},
		{[]string{"deploy", "--termination-log"}, defaultTerminationLog},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, terminationLogArg(tt.args), "%q", tt.args)
	}
}

func serviceAccountKubeconfig(t *testing.T, ns, name string) string {
	t.Helper()
	cfg, err := env.ServiceAccountConfig(context.Background(), ns, name)
	require.NoError(t, err)
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "c"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*kc, path))
	return path
}

// write-secret makes the Secret hold the directory's files: a re-run from
// the same files writes nothing, and a Secret holding other keys (a binding
// copied by an earlier version, with the instance keys) is written again
// with exactly the directory's.
func TestBinaryWriteSecretHoldsExactlyTheDirectory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "PASSWORD"), []byte("first"), 0o600))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "..data"), 0o700))
	res := runDeployer(t, env.Kubeconfig, "write-secret", "--namespace", ns, "--name", "binding", "--from-dir", dir)
	require.Equal(t, 0, res.code, "stdout:\n%s\nstderr:\n%s", res.stdout, res.stderr)
	s := &corev1.Secret{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "binding"}, s))
	assert.Equal(t, map[string][]byte{"PASSWORD": []byte("first")}, s.Data, "hidden entries are skipped")
	written := s.ResourceVersion

	res = runDeployer(t, env.Kubeconfig, "write-secret", "--namespace", ns, "--name", "binding", "--from-dir", dir)
	require.Equal(t, 0, res.code)
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "binding"}, s))
	assert.Equal(t, written, s.ResourceVersion, "a re-run from the same files writes nothing")

	s.Data["ADMIN_PASSWORD"] = []byte("instance-secret")
	require.NoError(t, env.Client.Update(ctx, s))
	res = runDeployer(t, env.Kubeconfig, "write-secret", "--namespace", ns, "--name", "binding", "--from-dir", dir)
	require.Equal(t, 0, res.code, "stdout:\n%s\nstderr:\n%s", res.stdout, res.stderr)
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "binding"}, s))
	assert.Equal(t, map[string][]byte{"PASSWORD": []byte("first")}, s.Data, "a key that is not the directory's is gone")
	assert.NotContains(t, res.stdout+res.stderr, "instance-secret", "no value is logged")

	res = runDeployer(t, env.Kubeconfig, "write-secret", "--namespace", ns, "--from-dir", dir)
	assert.Equal(t, 2, res.code)
	assert.Contains(t, res.terminationLog, "InvalidArguments")
	assert.Contains(t, res.terminationLog, "--name")
}

// A credential in the chart repository's URL (userinfo, query) is in none
// of the deployer's outputs when the repository refuses it and echoes the
// Authorization header: not in the termination message (which the operator
// copies into the environment's status, conditions and Events), its stderr
// or its log.
func TestBinaryFailureCarriesNoCredentials(t *testing.T) {
	t.Parallel()
	const planted = "PLANTED-dep-3b7a1f"
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		status := http.StatusUnauthorized
		if strings.HasPrefix(r.URL.Path, "/gone") {
			status = http.StatusNotFound
		}
		w.WriteHeader(status)
		fmt.Fprintf(w, "refused: Authorization: %s; query %s\n", r.Header.Get("Authorization"), r.URL.RawQuery)
	}))
	t.Cleanup(srv.Close)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600))
	for _, path := range []string{"/charts", "/gone"} {
		repository := strings.Replace(srv.URL, "https://", "https://ci:"+planted+"@", 1) + path + "?token=" + planted
		ns := namespace(t)
		res := runDeployer(t, env.Kubeconfig, "deploy", "--release", "web", "--namespace", ns, "--chart-name", "greeter", "--chart-version", "0.1.0",
			"--values", valuesFile(t, "message: hi\n"), "--chart-repository", repository, "--ca-file", caFile)
		require.NotEqual(t, 0, res.code)
		failure := res.decoded(t)
		assert.Contains(t, failure.Message, strings.TrimPrefix(srv.URL, "https://"), "the message names the repository's host")
		for where, text := range map[string]string{"termination message": res.terminationLog, "stderr": res.stderr, "log": res.stdout} {
			assert.NotContains(t, text, planted, "%s of %s", where, path)
		}
	}
}
