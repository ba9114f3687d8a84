package deployer_test

import (
	"context"
	"encoding/pem"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/provenance"
	"helm.sh/helm/v3/pkg/registry"
	"helm.sh/helm/v3/pkg/repo"
	"sigs.k8s.io/yaml"

	"github.com/petri-dev/petri/api/contract"
	"github.com/petri-dev/petri/deployer"
	testcharts "github.com/petri-dev/petri/tests/charts"
)

// packageChart packages examples/charts/NAME into dir as `helm package`
// would and returns the archive's path.
func packageChart(t *testing.T, name, dir string) string {
	t.Helper()
	path, err := testcharts.Package(filepath.Join(charts, name), dir)
	require.NoError(t, err)
	return path
}

// chartRepository serves greeter 0.1.0 over TLS twice: under /good with the
// archive's true digest in the index, under /bad with a wrong one. It returns
// the server and the path of a PEM file holding its CA.
func chartRepository(t *testing.T) (*httptest.Server, string) {
	t.Helper()
	dir := t.TempDir()
	archive := packageChart(t, "greeter", dir)
	digest, err := provenance.DigestFile(archive)
	require.NoError(t, err)
	data, err := os.ReadFile(archive)
	require.NoError(t, err)
	ch, err := loader.LoadFile(archive)
	require.NoError(t, err)

	index := func(digest string) []byte {
		idx := repo.NewIndexFile()
		// A relative URL, as `helm repo index` writes it.
		require.NoError(t, idx.MustAdd(ch.Metadata, filepath.Base(archive), "", digest))
		out, err := yaml.Marshal(idx)
		require.NoError(t, err)
		return out
	}
	files := map[string][]byte{
		"/good/index.yaml":            index(digest),
		"/good/greeter-0.1.0.tgz":     data,
		"/bad/index.yaml":             index(strings.Repeat("0", 64)),
		"/bad/greeter-0.1.0.tgz":      data,
		"/nodigest/index.yaml":        index(""),
		"/nodigest/greeter-0.1.0.tgz": data,
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(body)
	}))
	// The untrusted-CA case makes the server log a failed handshake.
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	caFile := filepath.Join(dir, "ca.pem")
	require.NoError(t, os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600))
	return srv, caFile
}

func TestLoadChartFromRepository(t *testing.T) {
	t.Parallel()
	srv, caFile := chartRepository(t)
	tests := []struct {
		name    string
		src     deployer.ChartSource
		reason  contract.Reason
		message string
	}{
		{name: "verified against the index digest", src: deployer.ChartSource{Repository: srv.URL + "/good", Name: "greeter", Version: "0.1.0", CAFile: caFile}},
		{name: "trailing slash", src: deployer.ChartSource{Repository: srv.URL + "/good/", Name: "greeter", Version: "0.1.0", CAFile: caFile}},
		{name: "index without digest", src: deployer.ChartSource{Repository: srv.URL + "/nodigest", Name: "greeter", Version: "0.1.0", CAFile: caFile}},
		{
			name:   "digest mismatch",
			src:    deployer.ChartSource{Repository: srv.URL + "/bad", Name: "greeter", Version: "0.1.0", CAFile: caFile},
			reason: contract.ReasonDigestMismatch, message: "the index says 0000",
		},
		{
			name:   "chart not in index",
			src:    deployer.ChartSource{Repository: srv.URL + "/good", Name: "nope", Version: "0.1.0", CAFile: caFile},
			reason: contract.ReasonChartNotFound, message: `the index has no chart "nope"`,
		},
		{
			name:   "no index at all",
			src:    deployer.ChartSource{Repository: srv.URL + "/missing", Name: "greeter", Version: "0.1.0", CAFile: caFile},
			reason: contract.ReasonChartNotFound, message: "has no index.yaml",
		},
		{
			name:   "version not in index",
			src:    deployer.ChartSource{Repository: srv.URL + "/good", Name: "greeter", Version: "9.9.9", CAFile: caFile},
			reason: contract.ReasonVersionNotFound, message: "chart greeter version 9.9.9 not in " + srv.URL + "/good",
		},
		{
			name:   "server CA not trusted without --ca-file",
			src:    deployer.ChartSource{Repository: srv.URL + "/good", Name: "greeter", Version: "0.1.0"},
			reason: contract.ReasonFailed, message: "certificate",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ch, err := deployer.LoadChart(context.Background(), tt.src)
			if tt.reason == "" {
				require.NoError(t, err)
				assert.Equal(t, "greeter", ch.Name())
				assert.Equal(t, "0.1.0", ch.Metadata.Version)
				assert.NotEmpty(t, ch.Templates)
				return
			}
			require.Error(t, err)
			assert.Equal(t, tt.reason, deployer.Classify(err), err.Error())
			assert.Contains(t, deployer.TerminationMessage(err), tt.message)
		})
	}
}

func TestLoadChartFromOCI(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")

	rc, err := registry.NewClient(registry.ClientOptPlainHTTP(), registry.ClientOptWriter(io.Discard))
	require.NoError(t, err)
	data, err := os.ReadFile(packageChart(t, "greeter", t.TempDir()))
	require.NoError(t, err)
	_, err = rc.Push(data, host+"/charts/greeter:0.1.0")
	require.NoError(t, err)

	// The same registry over TLS with a private CA.
	tlsSrv := httptest.NewUnstartedServer(ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0))))
	tlsSrv.Config.ErrorLog = log.New(io.Discard, "", 0)
	tlsSrv.StartTLS()
	t.Cleanup(tlsSrv.Close)
	tlsHost := strings.TrimPrefix(tlsSrv.URL, "https://")
	trusting, err := registry.NewClient(registry.ClientOptHTTPClient(tlsSrv.Client()), registry.ClientOptWriter(io.Discard))
	require.NoError(t, err)
	_, err = trusting.Push(data, tlsHost+"/charts/greeter:0.1.0")
	require.NoError(t, err)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tlsSrv.Certificate().Raw}), 0o600))

	repository := "oci://" + host + "/charts"
	tests := []struct {
		name    string
		src     deployer.ChartSource
		reason  contract.Reason
		message string
	}{
		{name: "pulled", src: deployer.ChartSource{Repository: repository, Name: "greeter", Version: "0.1.0", PlainHTTP: true}},
		{name: "pulled over TLS with a CA file", src: deployer.ChartSource{Repository: "oci://" + tlsHost + "/charts", Name: "greeter", Version: "0.1.0", CAFile: caFile}},
		{
			name:   "TLS registry not trusted without a CA file",
			src:    deployer.ChartSource{Repository: "oci://" + tlsHost + "/charts", Name: "greeter", Version: "0.1.0"},
			reason: contract.ReasonFailed, message: "certificate",
		},
		{
			name:   "chart not in registry",
			src:    deployer.ChartSource{Repository: repository, Name: "nope", Version: "0.1.0", PlainHTTP: true},
			reason: contract.ReasonChartNotFound, message: "oci://" + host + "/charts/nope",
		},
		{
			name:   "version not in registry",
			src:    deployer.ChartSource{Repository: repository, Name: "greeter", Version: "0.2.0", PlainHTTP: true},
			reason: contract.ReasonVersionNotFound, message: "chart greeter version 0.2.0 not in " + repository,
		},
		{
			name:   "TLS is the default",
			src:    deployer.ChartSource{Repository: repository, Name: "greeter", Version: "0.1.0"},
			reason: contract.ReasonFailed, message: "http",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ch, err := deployer.LoadChart(context.Background(), tt.src)
			if tt.reason == "" {
				require.NoError(t, err)
				assert.Equal(t, "greeter", ch.Name())
				assert.Equal(t, "0.1.0", ch.Metadata.Version)
				assert.Equal(t, "petri.dev/example-app", ch.Values["image"].(map[string]any)["repository"])
				return
			}
			require.Error(t, err)
			assert.Equal(t, tt.reason, deployer.Classify(err), err.Error())
			assert.Contains(t, deployer.TerminationMessage(err), tt.message)
		})
	}
}

func TestLoadChartFromPath(t *testing.T) {
	t.Parallel()
	archive := packageChart(t, "strict", t.TempDir())
	tests := []struct {
		name   string
		src    deployer.ChartSource
		reason contract.Reason
	}{
		{name: "directory of charts", src: deployer.ChartSource{Repository: charts, Name: "greeter", Version: "0.1.0"}},
		{name: "chart directory", src: deployer.ChartSource{Repository: filepath.Join(charts, "greeter"), Name: "greeter", Version: "0.1.0"}},
		{name: "archive", src: deployer.ChartSource{Repository: archive, Name: "strict", Version: "0.1.0"}},
		{name: "vendored dependency", src: deployer.ChartSource{Repository: charts, Name: "stack", Version: "0.1.0"}},
		{name: "wrong version", src: deployer.ChartSource{Repository: charts, Name: "greeter", Version: "0.2.0"}, reason: contract.ReasonVersionNotFound},
		{name: "wrong version in archive", src: deployer.ChartSource{Repository: archive, Name: "strict", Version: "1.0.0"}, reason: contract.ReasonVersionNotFound},
		{name: "no such chart in directory", src: deployer.ChartSource{Repository: charts, Name: "nope", Version: "0.1.0"}, reason: contract.ReasonChartNotFound},
		{name: "archive of another chart", src: deployer.ChartSource{Repository: archive, Name: "greeter", Version: "0.1.0"}, reason: contract.ReasonChartNotFound},
		{name: "no such path", src: deployer.ChartSource{Repository: "/nonexistent/charts", Name: "greeter", Version: "0.1.0"}, reason: contract.ReasonChartNotFound},
		{name: "relative path", src: deployer.ChartSource{Repository: "examples/charts", Name: "greeter", Version: "0.1.0"}, reason: contract.ReasonInvalidArguments},
		{name: "no version", src: deployer.ChartSource{Repository: charts, Name: "greeter"}, reason: contract.ReasonInvalidArguments},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ch, err := deployer.LoadChart(context.Background(), tt.src)
			if tt.reason == "" {
				require.NoError(t, err)
				assert.Equal(t, tt.src.Name, ch.Name())
				return
			}
			require.Error(t, err)
			assert.Equal(t, tt.reason, deployer.Classify(err), err.Error())
		})
	}
}
