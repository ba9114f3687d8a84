// Package api is sync's HTTP surface: the webhook endpoints (GitHub's and
// one per other forge), a read API of environments and applications (and
// one action on them: wake), health and readiness probes, and Prometheus
// metrics.
package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/petri-dev/petri/sync/metrics"
	"github.com/petri-dev/petri/sync/syncer"
)

// Source is what the read API shows; *syncer.Syncer implements it.
type Source interface {
	Environments(ctx context.Context) ([]syncer.Environment, error)
	Applications() (revision string, apps []syncer.Application)
	Ready() error
	// Wake asks an environment to wake and returns the time of the
	// request.
	Wake(ctx context.Context, name string) (time.Time, error)
}

// Paths of the endpoints.
const (
	WebhookPath      = "/webhooks/github"
	ForgeWebhookPath = "/webhooks/{forge}"
	EnvironmentsPath = "/api/v1/environments"
	ApplicationsPath = "/api/v1/applications"
)

// Handler builds the mux.
func Handler(src Source, webhook http.Handler, m *metrics.Metrics) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST "+WebhookPath, webhook)
	// Every other forge's deliveries at a path of their own:
	// /webhooks/gitea, /webhooks/forgejo, /webhooks/gitlab.
	mux.Handle("POST "+ForgeWebhookPath, webhook)
	mux.HandleFunc("GET "+EnvironmentsPath, func(w http.ResponseWriter, r *http.Request) {
		envs, err := src.Environments(r.Context())
		if err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"items": envs})
	})
	mux.HandleFunc("GET "+EnvironmentsPath+"/{name}", func(w http.ResponseWriter, r *http.Request) {
		envs, err := src.Environments(r.Context())
		if err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
			return
		}
		for _, e := range envs {
			if e.Name == r.PathValue("name") {
				writeJSON(w, http.StatusOK, e)
				return
			}
		}
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no environment " + r.PathValue("name")})
	})
	// Wake is the one thing the API does rather than shows: it sets the
	// environment's petri.dev/wake-requested, as /petri wake does. It can
	// only wake what sync wrote, nothing else.
	mux.HandleFunc("POST "+EnvironmentsPath+"/{name}/wake", func(w http.ResponseWriter, r *http.Request) {
		at, err := src.Wake(r.Context(), r.PathValue("name"))
		switch {
		case errors.Is(err, syncer.ErrUnknownEnvironment):
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "no environment " + r.PathValue("name")})
		case errors.Is(err, syncer.ErrEnvironmentDeleting):
			writeJSON(w, http.StatusConflict, map[string]string{"error": err.Error()})
		case err != nil:
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
		default:
			writeJSON(w, http.StatusAccepted, map[string]any{"name": r.PathValue("name"), "wakeRequested": at})
		}
	})
	mux.HandleFunc("GET "+ApplicationsPath, func(w http.ResponseWriter, r *http.Request) {
		rev, apps := src.Applications()
		writeJSON(w, http.StatusOK, map[string]any{"revision": rev, "items": apps})
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := src.Ready(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	return mux
}

// Server wraps the handler with sensible timeouts.
func Server(addr string, h http.Handler) *http.Server {
	return &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
