// Command petri-example-app is the tiny application of Petri's examples and
// local demo. One binary plays three parts:
//
//	petri-example-app serve [--listen=:8080]
//	    the application: answers every path with its message, the commit it
//	    was deployed from and, when bound to the store, its database's state.
//	    Reads MESSAGE, COMMIT, and the binding keys STORE_URL, DATABASE.
//	petri-example-app store [--listen=:8080]
//	    a shared store (it plays a database server): databases are created and
//	    dropped over HTTP with the admin password from ADMIN_PASSWORD.
//	petri-example-app get URL
//	    a client: prints what URL answers (how a pod checks a Service by
//	    its cluster DNS name); fails unless it answers 200.
//	petri-example-app provision|deprovision [--termination-log=PATH] [--timeout=2m]
//	    the shared workload's provision and deprovision steps: create or drop
//	    the database DATABASE on the store at STORE_URL with ADMIN_PASSWORD,
//	    the keys of the binding Secret.
//
// Every part serves /healthz. The store keeps its databases in memory.
// Two settings make the application misbehave on purpose, for showing how
// a failing workload is reported: FAIL_ON_START makes serve print it and
// exit 1 at once (a container that crashes), READY=false makes /healthz
// answer 503 (a readiness probe that never passes).
package main

import (
	"context"
	"crypto/subtle"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	cmd := "serve"
	args := os.Args[1:]
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet("petri-example-app "+cmd, flag.ExitOnError)
	listen := fs.String("listen", ":8080", "serve, store: listen address")
	termLog := fs.String("termination-log", "/dev/termination-log", "provision, deprovision: file that receives the failure message")
	timeout := fs.Duration("timeout", 2*time.Minute, "provision, deprovision: how long to wait for the store")
	_ = fs.Parse(args)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch cmd {
	case "serve":
		if msg := os.Getenv("FAIL_ON_START"); msg != "" {
			err = errors.New(msg)
			break
		}
		err = listenAndServe(ctx, *listen, appHandler(appConfigFromEnv()))
	case "get":
		err = fetch(ctx, os.Stdout, fs.Args())
	case "store":
		password := os.Getenv("ADMIN_PASSWORD")
		if password == "" {
			err = errors.New("ADMIN_PASSWORD is empty")
			break
		}
		err = listenAndServe(ctx, *listen, newStore(password).handler())
	case "provision", "deprovision":
		ctx, cancel := context.WithTimeout(ctx, *timeout)
		defer cancel()
		var msg string
		msg, err = provision(ctx, http.DefaultClient, cmd == "provision", os.Getenv("STORE_URL"), os.Getenv("DATABASE"), os.Getenv("ADMIN_PASSWORD"))
		if err == nil {
			fmt.Println(msg)
		} else if werr := os.WriteFile(*termLog, []byte(err.Error()), 0o644); werr != nil {
			fmt.Fprintln(os.Stderr, "cannot write termination log:", werr)
		}
	default:
		err = fmt.Errorf("unknown command %q: want serve, store, get, provision or deprovision", cmd)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "petri-example-app:", err)
		os.Exit(1)
	}
}

// listenAndServe serves until ctx ends, then shuts down gracefully.
func listenAndServe(ctx context.Context, addr string, h http.Handler) error {
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	fmt.Println("listening on", addr)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(shutdown)
}

// appConfig is what the application shows.
type appConfig struct {
	Message, Commit string
	// StoreURL and Database come from the binding Secret when the
	// environment binds the shared store.
	StoreURL, Database string
	// Unready makes /healthz answer 503.
	Unready bool
	Client  *http.Client
}

func appConfigFromEnv() appConfig {
	return appConfig{
		Message: os.Getenv("MESSAGE"), Commit: os.Getenv("COMMIT"),
		StoreURL: os.Getenv("STORE_URL"), Database: os.Getenv("DATABASE"),
		Unready: os.Getenv("READY") == "false",
		Client:  &http.Client{Timeout: 5 * time.Second},
	}
}

// appHandler answers every path with plain text, so an ingress may route any
// prefix to it.
func appHandler(cfg appConfig) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if cfg.Unready {
			http.Error(w, "not ready (READY=false)", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "%s\n", orDefault(cfg.Message, "Hello from Petri"))
		fmt.Fprintf(w, "commit: %s\n", orDefault(cfg.Commit, "unknown"))
		if cfg.StoreURL != "" && cfg.Database != "" {
			fmt.Fprintf(w, "database: %s (%s)\n", cfg.Database, databaseState(r.Context(), cfg))
		}
	})
	return mux
}

// fetch prints what the one URL in args answers (the get command).
func fetch(ctx context.Context, out io.Writer, args []string) error {
	if len(args) != 1 {
		return errors.New("get takes one URL")
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, args[0], nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	_, _ = out.Write(body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s", args[0], resp.Status)
	}
	return nil
}

func databaseState(ctx context.Context, cfg appConfig) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(cfg.StoreURL, "/")+"/databases/"+cfg.Database, nil)
	if err != nil {
		return err.Error()
	}
	resp, err := cfg.Client.Do(req)
	if err != nil {
		return "store unreachable"
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return "ready"
	case http.StatusNotFound:
		return "not provisioned"
	}
	return resp.Status
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// store is the shared store: a set of named databases.
type store struct {
	password string
	mu       sync.Mutex
	dbs      map[string]time.Time
}

func newStore(password string) *store { return &store{password: password, dbs: map[string]time.Time{}} }

var databaseName = regexp.MustCompile(`^[a-zA-Z0-9_]{1,63}$`)

func (s *store) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /databases", func(w http.ResponseWriter, r *http.Request) {
		if !s.admin(w, r) {
			return
		}
		s.mu.Lock()
		names := make([]string, 0, len(s.dbs))
		for n := range s.dbs {
			names = append(names, n)
		}
		s.mu.Unlock()
		sort.Strings(names)
		for _, n := range names {
			fmt.Fprintln(w, n)
		}
	})
	// Reading one database's existence needs no password: the application
	// shows it.
	mux.HandleFunc("GET /databases/{name}", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		_, ok := s.dbs[r.PathValue("name")]
		s.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("PUT /databases/{name}", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		if !s.admin(w, r) || !validName(w, name) {
			return
		}
		s.mu.Lock()
		_, existed := s.dbs[name]
		if !existed {
			s.dbs[name] = time.Now()
		}
		s.mu.Unlock()
		if existed {
			fmt.Fprintln(w, "exists")
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintln(w, "created")
	})
	mux.HandleFunc("DELETE /databases/{name}", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		if !s.admin(w, r) || !validName(w, name) {
			return
		}
		s.mu.Lock()
		delete(s.dbs, name)
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	return mux
}

func (s *store) admin(w http.ResponseWriter, r *http.Request) bool {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || subtle.ConstantTimeCompare([]byte(token), []byte(s.password)) != 1 {
		http.Error(w, "wrong or missing admin password", http.StatusUnauthorized)
		return false
	}
	return true
}

func validName(w http.ResponseWriter, name string) bool {
	if !databaseName.MatchString(name) {
		http.Error(w, "database names are 1-63 letters, digits and underscores", http.StatusBadRequest)
		return false
	}
	return true
}

// provision creates (or, with create false, drops) one database, retrying
// while the store is not reachable yet. Both are idempotent, so a retried Job
// does no harm.
func provision(ctx context.Context, client *http.Client, create bool, storeURL, database, password string) (string, error) {
	switch {
	case storeURL == "":
		return "", errors.New("STORE_URL is empty: is the binding Secret in the environment?")
	case database == "":
		return "", errors.New("DATABASE is empty")
	case password == "":
		return "", errors.New("ADMIN_PASSWORD is empty")
	}
	method, verb := http.MethodPut, "created"
	if !create {
		method, verb = http.MethodDelete, "dropped"
	}
	url := strings.TrimSuffix(storeURL, "/") + "/databases/" + database
	var last error
	for {
		req, err := http.NewRequestWithContext(ctx, method, url, nil)
		if err != nil {
			return "", err
		}
		req.Header.Set("Authorization", "Bearer "+password)
		resp, err := client.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			_ = resp.Body.Close()
			switch {
			case resp.StatusCode < 300:
				return fmt.Sprintf("database %s %s on %s", database, verb, storeURL), nil
			case resp.StatusCode < 500:
				return "", fmt.Errorf("%s %s: HTTP %d: %s", method, url, resp.StatusCode, strings.TrimSpace(string(body)))
			}
			err = fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
		}
		last = err
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("%s %s: store not reachable: %w", method, url, last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}
