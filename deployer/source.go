package deployer

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/Masterminds/semver/v3"
	"github.com/go-logr/logr"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
)

// SourceKind tells the three places a component's chart can come from apart;
// the operator passes one --chart-repository string and the deployer picks
// the loader from its form.
type SourceKind string

const (
	// SourceRepository is a classic Helm chart repository (index.yaml).
	SourceRepository SourceKind = "repository"
	// SourceOCI is an OCI registry (oci://host/path; the chart is
	// host/path/NAME:VERSION).
	SourceOCI SourceKind = "oci"
	// SourcePath is a chart directory or archive inside the deployer's image
	// or a mounted volume.
	SourcePath SourceKind = "path"
)

// ChartSource says where one component's chart is. Version is always exact:
// environments must be reproducible, so ranges are resolved by the operator,
// never here.
type ChartSource struct {
	// Repository is https://... (or http://...), oci://host/path, or an
	// absolute path.
	Repository string
	// Name is the chart's name.
	Name string
	// Version is the chart's exact version.
	Version string
	// CAFile is a PEM bundle trusted in addition to the system roots, for
	// repositories and registries with a private CA.
	CAFile string
	// PlainHTTP lets an oci:// registry be reached without TLS (local and
	// in-cluster registries).
	PlainHTTP bool
}

// String names the chart for messages; it never contains credentials.
func (s ChartSource) String() string {
	return fmt.Sprintf("%s %s from %s", s.Name, s.Version, redactURL(s.Repository))
}

// Kind classifies Repository by its form, so that one flag carries all three
// kinds and the operator need not know which loader runs.
func (s ChartSource) Kind() (SourceKind, error) {
	switch {
	case strings.HasPrefix(s.Repository, "https://"), strings.HasPrefix(s.Repository, "http://"):
		return SourceRepository, nil
	case strings.HasPrefix(s.Repository, "oci://"):
		return SourceOCI, nil
	case filepath.IsAbs(s.Repository):
		return SourcePath, nil
	default:
		return "", fmt.Errorf("%w: chart repository %q is neither https://, oci:// nor an absolute path", ErrInvalidArguments, redactURL(s.Repository))
	}
}

// maxDownloadBytes bounds an index or chart download; a real chart is far
// smaller, and a runaway response must not exhaust the Job's memory.
const maxDownloadBytes = 64 << 20

// downloadTimeout bounds one HTTP request to a repository or registry.
const downloadTimeout = 2 * time.Minute

// LoadChart fetches and loads the chart, verifying what its source lets us
// verify: the index digest for repositories, the content digests for OCI
// (done by the registry client), and the name and version for every kind.
func LoadChart(ctx context.Context, src ChartSource) (*chart.Chart, error) {
	if src.Name == "" || src.Version == "" {
		return nil, fmt.Errorf("%w: chart name and version are required", ErrInvalidArguments)
	}
	kind, err := src.Kind()
	if err != nil {
		return nil, err
	}
	log := logr.FromContextOrDiscard(ctx)
	log.Info("Loading chart", "kind", kind, "chart", src.Name, "version", src.Version, "repository", redactURL(src.Repository))

	var ch *chart.Chart
	switch kind {
	case SourcePath:
		ch, err = loadFromPath(src)
	default:
		var client *http.Client
		if client, err = newHTTPClient(src.CAFile); err != nil {
			return nil, err
		}
		if kind == SourceOCI {
			ch, err = loadFromRegistry(client, src)
		} else {
			ch, err = loadFromRepository(ctx, client, src)
		}
	}
	if err != nil {
		return nil, err
	}
	if err := checkChart(ch, src); err != nil {
		return nil, err
	}
	log.Info("Loaded chart", "chart", ch.Name(), "version", ch.Metadata.Version, "dependencies", len(ch.Dependencies()))
	return ch, nil
}

// checkChart makes sure the archive or directory holds what was asked for
// and that vendored dependencies are present, since the deployer never
// downloads dependencies.
func checkChart(ch *chart.Chart, src ChartSource) error {
	if ch.Metadata == nil {
		return fmt.Errorf("chart %s has no metadata", src)
	}
	if ch.Name() != src.Name {
		return fmt.Errorf("%w: %s holds chart %q, not %q", ErrChartNotFound, redactURL(src.Repository), ch.Name(), src.Name)
	}
	if !sameVersion(ch.Metadata.Version, src.Version) {
		return fmt.Errorf("%w: chart %s version %s not in %s (it holds version %s)", ErrVersionNotFound, src.Name, src.Version, redactURL(src.Repository), ch.Metadata.Version)
	}
	if err := action.CheckDependencies(ch, ch.Metadata.Dependencies); err != nil {
		return fmt.Errorf("chart %s: dependencies must be vendored in charts/: %w", src, err)
	}
	return nil
}

// sameVersion compares exactly, then as semantic versions so that "v1.2.0"
// and "1.2.0" (both accepted by Helm) name the same chart.
func sameVersion(have, want string) bool {
	if have == want {
		return true
	}
	h, err1 := semver.NewVersion(have)
	w, err2 := semver.NewVersion(want)
	return err1 == nil && err2 == nil && h.Equal(w) && h.Metadata() == w.Metadata()
}

// newHTTPClient trusts the system roots plus caFile.
func newHTTPClient(caFile string) (*http.Client, error) {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("%w: read CA file: %w", ErrInvalidArguments, err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: CA file %s holds no PEM certificate", ErrInvalidArguments, caFile)
		}
		transport.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &http.Client{Transport: transport, Timeout: downloadTimeout}, nil
}

// loadFromPath loads a chart baked into the image: PATH/NAME when PATH is a
// directory of charts, else PATH itself (a chart directory or archive).
func loadFromPath(src ChartSource) (*chart.Chart, error) {
	path := src.Repository
	info, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s: no such file or directory", ErrChartNotFound, path)
	}
	if err != nil {
		return nil, fmt.Errorf("load chart %s: %w", src, err)
	}
	if info.IsDir() {
		if sub, err := os.Stat(filepath.Join(path, src.Name)); err == nil && sub.IsDir() {
			path = filepath.Join(path, src.Name)
		}
		if _, err := os.Stat(filepath.Join(path, "Chart.yaml")); errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s is not a chart directory and has no %s/ chart", ErrChartNotFound, src.Repository, src.Name)
		}
	}
	ch, err := loader.Load(path)
	if err != nil {
		return nil, fmt.Errorf("load chart from %s: %w", path, err)
	}
	return ch, nil
}
