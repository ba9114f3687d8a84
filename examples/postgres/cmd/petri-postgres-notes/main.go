// Command petri-postgres-notes is the example application of the
// PostgreSQL shared workload: it keeps notes in its environment's own
// database, which it reaches through its binding (examples/postgres/pgbinding).
//
//	GET  .../           the commit and the database it uses, with the note count
//	POST .../notes      stores the request body as a note; answers its id
//	GET  .../notes      every note, one "id<TAB>text" line each
//	GET  /healthz       ready once the database answers
//
// Paths are matched by their end, so an ingress may route any prefix to it.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/petri-dev/petri/examples/postgres/pgbinding"
)

func main() {
	listen := flag.String("listen", ":8080", "address to serve on")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *listen); err != nil {
		fmt.Fprintln(os.Stderr, "petri-postgres-notes:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, listen string) error {
	b, err := pgbinding.FromEnv(os.Getenv)
	if err != nil {
		return err
	}
	cfg, err := b.Config()
	if err != nil {
		return err
	}
	pcfg, err := pgxpool.ParseConfig("")
	if err != nil {
		return err
	}
	pcfg.ConnConfig = cfg
	pcfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("database %s: %w", b.Database, err)
	}
	defer pool.Close()
	a := &app{pool: pool, database: b.Database, commit: os.Getenv("COMMIT")}
	srv := &http.Server{Addr: listen, Handler: a, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	fmt.Printf("serving on %s, notes in database %s on %s:%s as %s\n", listen, b.Database, b.Host, b.Port, b.Role)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(shutdown)
}

type app struct {
	pool     *pgxpool.Pool
	database string
	commit   string
}

const schema = `CREATE TABLE IF NOT EXISTS notes (id bigserial PRIMARY KEY, text text NOT NULL, created timestamptz NOT NULL DEFAULT now())`

func (a *app) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	switch {
	case r.URL.Path == "/healthz":
		if err := a.pool.Ping(ctx); err != nil {
			http.Error(w, "database "+a.database+": "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	case strings.HasSuffix(r.URL.Path, "/notes") && r.Method == http.MethodPost:
		body, err := io.ReadAll(io.LimitReader(r.Body, 4096))
		if err != nil || len(body) == 0 {
			http.Error(w, "a note is the request body (at most 4 KiB)", http.StatusBadRequest)
			return
		}
		var id int64
		err = a.withSchema(ctx, func() error {
			return a.pool.QueryRow(ctx, "INSERT INTO notes (text) VALUES ($1) RETURNING id", string(body)).Scan(&id)
		})
		if err != nil {
			http.Error(w, "store the note: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintln(w, id)
	case strings.HasSuffix(r.URL.Path, "/notes"):
		var out strings.Builder
		err := a.withSchema(ctx, func() error {
			rows, err := a.pool.Query(ctx, "SELECT id, text FROM notes ORDER BY id")
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var id int64
				var text string
				if err := rows.Scan(&id, &text); err != nil {
					return err
				}
				fmt.Fprintf(&out, "%d\t%s\n", id, text)
			}
			return rows.Err()
		})
		if err != nil {
			http.Error(w, "read the notes: "+err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprint(w, out.String())
	default:
		fmt.Fprintf(w, "Notes from Petri\ncommit: %s\n", a.commit)
		var n int64
		err := a.withSchema(ctx, func() error { return a.pool.QueryRow(ctx, "SELECT count(*) FROM notes").Scan(&n) })
		if err != nil {
			fmt.Fprintf(w, "database: %s (%s)\n", a.database, err)
			return
		}
		fmt.Fprintf(w, "database: %s (ready)\nnotes: %d\n", a.database, n)
	}
}

// withSchema runs f once the table exists.
func (a *app) withSchema(ctx context.Context, f func() error) error {
	if _, err := a.pool.Exec(ctx, schema); err != nil {
		return fmt.Errorf("create table notes: %w", err)
	}
	if err := f(); err != nil {
		return err
	}
	return nil
}
