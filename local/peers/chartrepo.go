package peers

import (
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/repo"
)

// chartRepo is a Helm chart repository over HTTPS (index.yaml and the
// packaged charts) that both systems read the chart from, with a
// certificate of its own that both are given to trust (Petri's
// --chart-ca-secret, Argo CD's TLS certificates by host name).
type chartRepo struct {
	URL string
	// CA is the PEM certificate to trust.
	CA       []byte
	srv      *httptest.Server
	requests atomic.Int64
}

// serveChartRepo packages the chart directories into dir, indexes them and
// serves dir over HTTPS on a loopback port under /charts.
func serveChartRepo(dir string, charts ...string) (*chartRepo, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	for _, c := range charts {
		ch, err := loader.LoadDir(c)
		if err != nil {
			return nil, fmt.Errorf("load chart %s: %w", c, err)
		}
		if _, err := chartutil.Save(ch, dir); err != nil {
			return nil, fmt.Errorf("package chart %s: %w", c, err)
		}
	}
	r := &chartRepo{}
	files := http.StripPrefix("/charts", http.FileServer(http.Dir(dir)))
	r.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.requests.Add(1)
		files.ServeHTTP(w, req)
	}))
	r.srv.StartTLS()
	r.URL = r.srv.URL + "/charts"
	r.CA = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: r.srv.Certificate().Raw})
	idx, err := repo.IndexDirectory(dir, r.URL)
	if err != nil {
		r.srv.Close()
		return nil, fmt.Errorf("index charts: %w", err)
	}
	idx.SortEntries()
	if err := idx.WriteFile(filepath.Join(dir, "index.yaml"), 0o644); err != nil {
		r.srv.Close()
		return nil, err
	}
	return r, nil
}

func (r *chartRepo) close() { r.srv.Close() }
