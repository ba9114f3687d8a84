// Package ui is sync's web page: every environment sync wrote, with its
// phase, pull request, URL, age and expiry, its components and bindings and
// the tail of each Job's log, and the shared workloads. It is read-only and
// shows no secret.
//
// The page is rendered on the server (html/template) and kept current by
// server-sent events: sync's informer cache wakes one renderer, which
// coalesces bursts of changes and sends the same new HTML to every open
// page, so a hundred open pages cost one rendering per change and no
// requests at all while nothing changes. Log tails are read through the API
// server (pods/log) only when a reader opens one. HTML, CSS and JavaScript
// are embedded in the binary.
package ui

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/duration"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static
var staticFiles embed.FS

// Paths the page uses, relative to where it is served, so that it works
// behind a path prefix (kubectl proxy, an ingress path).
const (
	// EventsPath streams the environments section as server-sent events.
	EventsPath = "/ui/events"
	// LogPath serves the tail of one Job's log: /ui/log/ENV/JOB.
	LogPath = "/ui/log/"
	// StaticPath serves the stylesheet and the script.
	StaticPath = "/ui/static/"
)

// Cache is what the page reads: sync's informer cache of the management
// namespace (*syncer.Syncer's Cache).
type Cache interface {
	client.Reader
	GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error)
	WaitForCacheSync(ctx context.Context) bool
}

// Options configure the page.
type Options struct {
	// Cache holds the EphemeralEnvironments and SharedWorkloads of
	// Namespace.
	Cache     Cache
	Namespace string
	// Pods reads the pods of Jobs and their logs in Namespace; nil shows
	// no log tails.
	Pods corev1client.PodsGetter
	Log  logr.Logger
	// TailLines is how many lines of a Job's log the page shows; 40 when
	// zero.
	TailLines int64
	// Coalesce is how long the renderer waits after a change for more
	// before it sends the page; 50ms when zero.
	Coalesce time.Duration
	// MaxStreams bounds the open event streams; 256 when zero.
	MaxStreams int
	// MaxStreamsPerClient bounds the open event streams from one address,
	// so that one client cannot take them all; 8 when zero.
	MaxStreamsPerClient int
	// StreamWriteTimeout bounds one write to an event stream, so that a
	// client that stops reading frees its stream; 30s when zero.
	StreamWriteTimeout time.Duration
	// ClientAddressHeader names the header in which the proxy in front of
	// sync (an Ingress) passes the client's address, such as
	// X-Forwarded-For; its last address counts. Empty: the connection's
	// address counts (behind a proxy, every client is the proxy).
	ClientAddressHeader string
	// LogReuse is how long a running pod's log tail is served again
	// before it is read anew, so that many viewers of one Job cost one
	// read; 5s when zero.
	LogReuse time.Duration
	// Clock is the page's clock; the real one when nil.
	Clock clock.PassiveClock
}

// UI serves the page.
type UI struct {
	opts  Options
	tmpl  *template.Template
	mux   *http.ServeMux
	hub   *hub
	logs  *logReader
	wake  chan struct{}
	ready chan struct{}
}

// New builds the page; Run keeps it current.
func New(opts Options) (*UI, error) {
	if opts.Cache == nil || opts.Namespace == "" {
		return nil, errors.New("ui: a cache and a namespace are required")
	}
	if opts.TailLines == 0 {
		opts.TailLines = 40
	}
	if opts.Coalesce == 0 {
		opts.Coalesce = 50 * time.Millisecond
	}
	if opts.MaxStreams == 0 {
		opts.MaxStreams = 256
	}
	if opts.MaxStreams < 0 || opts.MaxStreamsPerClient < 0 {
		return nil, errors.New("ui: the bounds of the open streams must not be negative")
	}
	if opts.MaxStreamsPerClient == 0 {
		opts.MaxStreamsPerClient = 8
	}
	if opts.StreamWriteTimeout == 0 {
		opts.StreamWriteTimeout = 30 * time.Second
	}
	if opts.LogReuse == 0 {
		opts.LogReuse = 5 * time.Second
	}
	u := &UI{opts: opts, mux: http.NewServeMux(), hub: newHub(opts.MaxStreams, opts.MaxStreamsPerClient), wake: make(chan struct{}, 1), ready: make(chan struct{})}
	tmpl, err := template.New("page").Funcs(template.FuncMap{
		"age":     u.age,
		"until":   u.until,
		"rfc3339": func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
		"lower":   strings.ToLower,
		"asset":   assetPath,
	}).ParseFS(templateFiles, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("ui templates: %w", err)
	}
	u.tmpl = tmpl
	if opts.Pods != nil {
		u.logs = newLogReader(opts.Pods, opts.Namespace, opts.TailLines, opts.LogReuse, u.now)
	}
	static, err := fs.Sub(staticFiles, "static")
	if err != nil {
		return nil, err
	}
	u.mux.HandleFunc("GET /{$}", u.servePage)
	u.mux.HandleFunc("GET "+EventsPath, u.serveEvents)
	u.mux.HandleFunc("GET "+LogPath+"{env}/{job}", u.serveLog)
	u.mux.Handle("GET "+StaticPath, http.StripPrefix(StaticPath, cacheable(http.FileServerFS(static))))
	return u, nil
}

// Register routes the page's paths on mux: the page at / and everything
// else under /ui/.
func (u *UI) Register(mux *http.ServeMux) {
	mux.Handle("GET /{$}", u)
	mux.Handle("GET /ui/", u)
}

// ServeHTTP serves the page, its events, log tails and static files, with
// headers that keep the page from being framed or running foreign code.
func (u *UI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	u.mux.ServeHTTP(w, r)
}

// Run watches the cache and sends the page to every open stream after each
// change, until ctx ends.
func (u *UI) Run(ctx context.Context) error {
	for _, obj := range []client.Object{&petriv1.EphemeralEnvironment{}, &petriv1.SharedWorkload{}, &petriv1.PullRequestState{}} {
		inf, err := u.opts.Cache.GetInformer(ctx, obj)
		if err != nil {
			return fmt.Errorf("ui: watch %T: %w", obj, err)
		}
		if _, err := inf.AddEventHandler(changeHandler{u.changed}); err != nil {
			return fmt.Errorf("ui: watch %T: %w", obj, err)
		}
	}
	// The informers start with the cache; an empty namespace sends no
	// event, so render once it is synced.
	if !u.opts.Cache.WaitForCacheSync(ctx) {
		return nil
	}
	close(u.ready)
	u.changed()
	timer := time.NewTimer(0)
	<-timer.C
	for {
		select {
		case <-ctx.Done():
			u.hub.close()
			return nil
		case <-u.wake:
		}
		// Let a burst of changes (a reconcile writes several) settle into
		// one rendering.
		timer.Reset(u.opts.Coalesce)
		select {
		case <-ctx.Done():
			u.hub.close()
			return nil
		case <-timer.C:
		}
		var buf bytes.Buffer
		if err := u.tmpl.ExecuteTemplate(&buf, "environments", u.read(ctx)); err != nil {
			u.opts.Log.Error(err, "Render the environments")
			continue
		}
		u.hub.publish(buf.Bytes())
	}
}

// EndStreams ends every open event stream, and every one opened after it
// once it has sent the current rendering: a stopping replica's server
// waits for its connections to end, and a stream never does by itself.
// The pages reconnect (after the retry each stream sets) to a replica
// that is not stopping.
func (u *UI) EndStreams() { u.hub.close() }

// changed asks the renderer for a new page; a request already waiting
// covers this one too.
func (u *UI) changed() {
	select {
	case u.wake <- struct{}{}:
	default:
	}
}

func (u *UI) servePage(w http.ResponseWriter, r *http.Request) {
	var buf bytes.Buffer
	if err := u.tmpl.ExecuteTemplate(&buf, "page", u.read(r.Context())); err != nil {
		u.opts.Log.Error(err, "Render the page")
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(buf.Bytes())
}

func (u *UI) now() time.Time {
	if u.opts.Clock != nil {
		return u.opts.Clock.Now()
	}
	return clock.RealClock{}.Now()
}

// age is how long ago t was, as kubectl prints ages.
func (u *UI) age(t time.Time) string { return duration.HumanDuration(u.now().Sub(t)) }

// until is how long until t, or "expired".
func (u *UI) until(t time.Time) string {
	d := t.Sub(u.now())
	if d <= 0 {
		return "expired"
	}
	return "in " + duration.HumanDuration(d)
}

// assetVersion changes with the static files, so a browser never keeps an
// old script or stylesheet for a new page.
var assetVersion = func() string {
	h := sha256.New()
	_ = fs.WalkDir(staticFiles, "static", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			data, _ := staticFiles.ReadFile(path)
			h.Write([]byte(path))
			h.Write(data)
		}
		return nil
	})
	return hex.EncodeToString(h.Sum(nil))[:12]
}()

// assetPath is a static file's path relative to the page.
func assetPath(name string) string {
	return strings.TrimPrefix(StaticPath, "/") + name + "?v=" + assetVersion
}

// cacheable lets browsers keep the static files for an hour.
func cacheable(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		h.ServeHTTP(w, r)
	})
}

// changeHandler calls f on every add, update and delete.
type changeHandler struct{ f func() }

func (c changeHandler) OnAdd(any, bool)   { c.f() }
func (c changeHandler) OnUpdate(any, any) { c.f() }
func (c changeHandler) OnDelete(any)      { c.f() }
