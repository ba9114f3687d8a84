// Command petri-postgres-tools is the provision and deprovision step of the
// PostgreSQL shared workload (examples/postgres/config-repo). Petri runs it
// as a Job with the environment's binding and the instance key
// ADMIN_PASSWORD in its environment (examples/postgres/pgbinding).
//
//	petri-postgres-tools provision     create the environment's role (LOGIN,
//	                                   with its binding's PGPASSWORD) and its
//	                                   database, owned by the role and closed
//	                                   to every other role; idempotent
//	petri-postgres-tools deprovision   end the database's open connections and
//	                                   drop it (DROP DATABASE ... WITH (FORCE)),
//	                                   then drop the role; idempotent
//
// Both retry until the server answers (--timeout). A failure's one-line
// reason goes to --termination-log, which Petri shows on the environment;
// no password is ever written there or to the log.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/petri-dev/petri/examples/postgres/pgbinding"
)

func main() {
	fs := flag.NewFlagSet("petri-postgres-tools", flag.ExitOnError)
	termLog := fs.String("termination-log", "/dev/termination-log", "file that receives the failure message")
	timeout := fs.Duration("timeout", 2*time.Minute, "how long to wait for the server")
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: petri-postgres-tools provision|deprovision [--timeout=2m] [--termination-log=PATH]")
		os.Exit(2)
	}
	cmd := os.Args[1]
	_ = fs.Parse(os.Args[2:])
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	msg, err := run(ctx, cmd)
	if err != nil {
		fmt.Fprintln(os.Stderr, "petri-postgres-tools:", err)
		_ = os.WriteFile(*termLog, []byte(err.Error()), 0o644)
		os.Exit(1)
	}
	fmt.Println(msg)
}

func run(ctx context.Context, cmd string) (string, error) {
	b, err := pgbinding.FromEnv(os.Getenv)
	if err != nil {
		return "", err
	}
	cfg, err := b.AdminConfig()
	if err != nil {
		return "", err
	}
	conn, err := connect(ctx, cfg)
	if err != nil {
		return "", fmt.Errorf("%s: connect to %s:%s as %s: %w", cmd, b.Host, b.Port, pgbinding.AdminUser, err)
	}
	defer conn.Close(context.Background())
	switch cmd {
	case "provision":
		if err := Provision(ctx, conn, b); err != nil {
			return "", fmt.Errorf("provision database %s: %w", b.Database, err)
		}
		return fmt.Sprintf("database %s and role %s are ready on %s:%s", b.Database, b.Role, b.Host, b.Port), nil
	case "deprovision":
		if err := Deprovision(ctx, conn, b); err != nil {
			return "", fmt.Errorf("deprovision database %s: %w", b.Database, err)
		}
		return fmt.Sprintf("database %s and role %s are dropped from %s:%s", b.Database, b.Role, b.Host, b.Port), nil
	default:
		return "", fmt.Errorf("unknown command %q: want provision or deprovision", cmd)
	}
}

// connect retries until the server accepts the connection or ctx ends: a
// server that starts (or restarts) is waited for, a refused password is not.
func connect(ctx context.Context, cfg *pgx.ConnConfig) (*pgx.Conn, error) {
	for {
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err == nil {
			return conn, nil
		}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "28P01" { // invalid_password
			return nil, errors.New("the server refused the superuser's password (ADMIN_PASSWORD)")
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("server not reachable in time: %w", err)
		case <-time.After(time.Second):
		}
	}
}

// Provision creates the role and the database, or brings them back to what
// they must be.
func Provision(ctx context.Context, conn *pgx.Conn, b pgbinding.Binding) error {
	role, db := pgbinding.Quote(b.Role), pgbinding.Quote(b.Database)
	// A password literal cannot be a query parameter in DDL; Petri
	// generates it URL-safe (no quote), and a quote is doubled anyway.
	password := "'" + strings.ReplaceAll(b.Password, "'", "''") + "'"
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)", b.Role).Scan(&exists); err != nil {
		return err
	}
	verb := "CREATE"
	if exists {
		verb = "ALTER"
	}
	if _, err := conn.Exec(ctx, fmt.Sprintf("%s ROLE %s LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD %s", verb, role, password)); err != nil {
		return fmt.Errorf("%s role %s: %w", verb, b.Role, redact(err))
	}
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", b.Database).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		if _, err := conn.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s OWNER %s", db, role)); err != nil {
			return fmt.Errorf("create database: %w", err)
		}
	}
	for _, q := range []string{
		fmt.Sprintf("ALTER DATABASE %s OWNER TO %s", db, role),
		// Other environments' roles cannot even connect.
		fmt.Sprintf("REVOKE ALL ON DATABASE %s FROM PUBLIC", db),
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

// Deprovision ends the database's open connections, drops it and then the
// role. Both may be gone already.
func Deprovision(ctx context.Context, conn *pgx.Conn, b pgbinding.Binding) error {
	if _, err := conn.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", pgbinding.Quote(b.Database))); err != nil {
		return fmt.Errorf("drop database: %w", err)
	}
	if _, err := conn.Exec(ctx, fmt.Sprintf("DROP ROLE IF EXISTS %s", pgbinding.Quote(b.Role))); err != nil {
		return fmt.Errorf("drop role: %w", err)
	}
	return nil
}

// redact keeps the server's error code and message, never the statement
// (which holds the password).
func redact(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return fmt.Errorf("%s (SQLSTATE %s)", pgErr.Message, pgErr.Code)
	}
	return errors.New("the statement failed")
}
