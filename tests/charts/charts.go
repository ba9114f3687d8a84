// Package charts serves Petri's example charts the ways a cluster reaches
// charts: an https chart repository (index.yaml with digests) and an OCI
// registry, both in-process, for tests and the local run.
package charts

import (
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/provenance"
	"helm.sh/helm/v3/pkg/registry"
	"helm.sh/helm/v3/pkg/repo"
	"sigs.k8s.io/yaml"
)

// Package packages the chart directory src into dir and returns the
// archive's path, as `helm package` would.
func Package(src, dir string) (string, error) {
	ch, err := loader.Load(src)
	if err != nil {
		return "", fmt.Errorf("load chart %s: %w", src, err)
	}
	return chartutil.Save(ch, dir)
}

// Repository is an https chart repository.
type Repository struct {
	// URL is the repository's base URL (https://127.0.0.1:port).
	URL string
	// CA is the PEM certificate clients must trust.
	CA  []byte
	srv *httptest.Server
}

// Close stops the server.
func (r *Repository) Close() { r.srv.Close() }

// ServeRepository packages every chart directory under chartsDir and serves
// them with an index.yaml carrying their digests.
func ServeRepository(chartsDir, workDir string) (*Repository, error) {
	entries, err := os.ReadDir(chartsDir)
	if err != nil {
		return nil, err
	}
	idx := repo.NewIndexFile()
	files := map[string][]byte{}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		archive, err := Package(filepath.Join(chartsDir, e.Name()), workDir)
		if err != nil {
			return nil, err
		}
		digest, err := provenance.DigestFile(archive)
		if err != nil {
			return nil, err
		}
		ch, err := loader.LoadFile(archive)
		if err != nil {
			return nil, err
		}
		if err := idx.MustAdd(ch.Metadata, filepath.Base(archive), "", digest); err != nil {
			return nil, err
		}
		if files["/"+filepath.Base(archive)], err = os.ReadFile(archive); err != nil {
			return nil, err
		}
	}
	idx.SortEntries()
	index, err := yaml.Marshal(idx)
	if err != nil {
		return nil, err
	}
	files["/index.yaml"] = index
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(body)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	return &Repository{URL: srv.URL, CA: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), srv: srv}, nil
}

// Registry is a plain-HTTP OCI registry holding the example charts under
// <Host>/charts/<name>:<version>.
type Registry struct {
	// Host is host:port of the registry.
	Host string
	srv  *httptest.Server
}

// Repository is the oci:// reference charts are pulled from.
func (r *Registry) Repository() string { return "oci://" + r.Host + "/charts" }

// Close stops the registry.
func (r *Registry) Close() { r.srv.Close() }

// ServeRegistry starts a registry and pushes every chart under chartsDir.
func ServeRegistry(chartsDir, workDir string) (*Registry, error) {
	srv := httptest.NewServer(ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0))))
	reg := &Registry{Host: strings.TrimPrefix(srv.URL, "http://"), srv: srv}
	client, err := registry.NewClient(registry.ClientOptPlainHTTP(), registry.ClientOptWriter(io.Discard))
	if err != nil {
		srv.Close()
		return nil, err
	}
	entries, err := os.ReadDir(chartsDir)
	if err != nil {
		srv.Close()
		return nil, err
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		archive, err := Package(filepath.Join(chartsDir, e.Name()), workDir)
		if err != nil {
			srv.Close()
			return nil, err
		}
		ch, err := loader.LoadFile(archive)
		if err != nil {
			srv.Close()
			return nil, err
		}
		data, err := os.ReadFile(archive)
		if err != nil {
			srv.Close()
			return nil, err
		}
		if _, err := client.Push(data, fmt.Sprintf("%s/charts/%s:%s", reg.Host, ch.Metadata.Name, ch.Metadata.Version)); err != nil {
			srv.Close()
			return nil, fmt.Errorf("push %s: %w", e.Name(), err)
		}
	}
	return reg, nil
}
