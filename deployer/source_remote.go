package deployer

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/registry"
	"helm.sh/helm/v3/pkg/repo"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry/remote/errcode"
	"sigs.k8s.io/yaml"

	"github.com/petri-dev/petri/internal/redact"
)

// errHTTPNotFound marks a 404 from a chart repository, which means a missing
// chart, not a broken repository.
var errHTTPNotFound = errors.New("not found")

// redactURL names a repository or an archive without the credentials of
// its URL.
func redactURL(s string) string { return redact.URL(s) }

// loadFromRepository resolves NAME at VERSION in the repository's index,
// downloads the archive and checks it against the index entry's digest when
// the index has one (Helm's own client does not, and a repository that
// serves a different archive under the same version must not be deployed).
func loadFromRepository(ctx context.Context, client *http.Client, src ChartSource) (*chart.Chart, error) {
	base := strings.TrimSuffix(src.Repository, "/")
	data, err := download(ctx, client, base+"/index.yaml")
	if errors.Is(err, errHTTPNotFound) {
		return nil, fmt.Errorf("%w: %s: the repository has no index.yaml", ErrChartNotFound, src)
	}
	if err != nil {
		return nil, fmt.Errorf("fetch index of %s: %w", redactURL(base), err)
	}
	var index repo.IndexFile
	if err := yaml.Unmarshal(data, &index); err != nil {
		return nil, fmt.Errorf("parse index of %s: %w", redactURL(base), err)
	}
	versions := index.Entries[src.Name]
	if len(versions) == 0 {
		return nil, fmt.Errorf("%w: %s: the index has no chart %q", ErrChartNotFound, src, src.Name)
	}
	var entry *repo.ChartVersion
	for _, v := range versions {
		if v != nil && v.Metadata != nil && sameVersion(v.Version, src.Version) {
			entry = v
			break
		}
	}
	if entry == nil {
		return nil, fmt.Errorf("%w: chart %s version %s not in %s", ErrVersionNotFound, src.Name, src.Version, redactURL(base))
	}
	if len(entry.URLs) == 0 {
		return nil, fmt.Errorf("index entry of %s lists no download URL", src)
	}
	archiveURL, err := repo.ResolveReferenceURL(base, entry.URLs[0])
	if err != nil {
		return nil, fmt.Errorf("resolve download URL of %s: %w", src, err)
	}
	archive, err := download(ctx, client, archiveURL)
	if errors.Is(err, errHTTPNotFound) {
		return nil, fmt.Errorf("%w: %s: the index lists %s but it is missing", ErrChartNotFound, src, redactURL(archiveURL))
	}
	if err != nil {
		return nil, fmt.Errorf("download %s: %w", src, err)
	}
	if want := strings.ToLower(strings.TrimPrefix(entry.Digest, "sha256:")); want != "" {
		sum := sha256.Sum256(archive)
		if got := hex.EncodeToString(sum[:]); got != want {
			return nil, fmt.Errorf("%w: %s: archive %s has sha256 %s, the index says %s", ErrDigestMismatch, src, redactURL(archiveURL), got, want)
		}
	}
	ch, err := loader.LoadArchive(bytes.NewReader(archive))
	if err != nil {
		return nil, fmt.Errorf("load archive of %s: %w", src, err)
	}
	return ch, nil
}

func download(ctx context.Context, client *http.Client, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return nil, errHTTPNotFound
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("GET %s: %s", redactURL(url), resp.Status)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxDownloadBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxDownloadBytes {
		return nil, fmt.Errorf("GET %s: response larger than %d bytes", redactURL(url), maxDownloadBytes)
	}
	return data, nil
}

// loadFromRegistry pulls host/path/NAME:VERSION. It lists the tags first so
// that a missing chart and a missing version are told apart; the registry
// client verifies every blob against its digest.
func loadFromRegistry(client *http.Client, src ChartSource) (*chart.Chart, error) {
	opts := []registry.ClientOption{registry.ClientOptHTTPClient(client), registry.ClientOptWriter(io.Discard)}
	if src.PlainHTTP {
		opts = append(opts, registry.ClientOptPlainHTTP())
	}
	rc, err := registry.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("registry client: %w", err)
	}
	ref := strings.TrimSuffix(strings.TrimPrefix(src.Repository, "oci://"), "/") + "/" + src.Name
	tags, err := rc.Tags(ref)
	if isRegistryNotFound(err) || (err == nil && len(tags) == 0) {
		return nil, fmt.Errorf("%w: oci://%s: no such repository in the registry", ErrChartNotFound, redactURL(ref))
	}
	if err != nil {
		return nil, fmt.Errorf("list tags of oci://%s: %w", redactURL(ref), err)
	}
	found := false
	for _, t := range tags {
		if sameVersion(t, src.Version) {
			found = true
			break
		}
	}
	if !found {
		return nil, fmt.Errorf("%w: chart %s version %s not in %s", ErrVersionNotFound, src.Name, src.Version, redactURL(src.Repository))
	}
	// OCI tags cannot hold "+"; Helm pushes build metadata as "_".
	result, err := rc.Pull(ref+":"+strings.ReplaceAll(src.Version, "+", "_"), registry.PullOptWithChart(true))
	if err != nil {
		return nil, fmt.Errorf("pull oci://%s:%s: %w", redactURL(ref), src.Version, err)
	}
	ch, err := loader.LoadArchive(bytes.NewReader(result.Chart.Data))
	if err != nil {
		return nil, fmt.Errorf("load archive of %s: %w", src, err)
	}
	return ch, nil
}

func isRegistryNotFound(err error) bool {
	if err == nil {
		return false
	}
	var resp *errcode.ErrorResponse
	return errors.Is(err, errdef.ErrNotFound) || (errors.As(err, &resp) && resp.StatusCode == http.StatusNotFound)
}
