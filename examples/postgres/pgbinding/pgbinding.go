// Package pgbinding reads an environment's binding to the shared PostgreSQL
// server (the keys of its binding Secret, as environment variables) and
// connects with it. The provision and deprovision steps, the example
// application and the tests all use it, so they agree on names and
// credentials.
//
// The binding holds the server's address and the environment's database and
// role names (PGHOST, PGPORT, PGDATABASE, PGUSER: rendered from the
// SharedWorkload's spec.binding) and the instance keys Petri generated once
// (ADMIN_PASSWORD, ROLE_KEY). The role's password is derived from ROLE_KEY
// and the role name: generated, different for every environment, the same
// for provision, the application and deprovision, and never stored.
package pgbinding

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// AdminUser and AdminDatabase are the server's superuser and maintenance
// database, which the server wrapper creates with ADMIN_PASSWORD.
const (
	AdminUser     = "postgres"
	AdminDatabase = "postgres"
)

// Binding is one environment's view of the shared server.
type Binding struct {
	// Host and Port reach the server (a cluster Service name).
	Host, Port string
	// Database and Role are the environment's own.
	Database, Role string
	// AdminPassword is the superuser's password (an instance key).
	AdminPassword string
	// RoleKey is the instance key the role passwords are derived from.
	RoleKey string
}

// name is what Database and Role must look like: plain lower-case
// identifiers, so they are the same quoted or not.
var name = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// FromEnv reads a binding from environment variables (getenv is os.Getenv).
func FromEnv(getenv func(string) string) (Binding, error) {
	b := Binding{
		Host:          getenv("PGHOST"),
		Port:          getenv("PGPORT"),
		Database:      getenv("PGDATABASE"),
		Role:          getenv("PGUSER"),
		AdminPassword: getenv("ADMIN_PASSWORD"),
		RoleKey:       getenv("ROLE_KEY"),
	}
	if b.Port == "" {
		b.Port = "5432"
	}
	var missing []string
	for k, v := range map[string]string{"PGHOST": b.Host, "PGDATABASE": b.Database, "PGUSER": b.Role, "ROLE_KEY": b.RoleKey} {
		if v == "" {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return b, fmt.Errorf("binding lacks %s (is the binding Secret in the environment?)", strings.Join(missing, ", "))
	}
	for k, v := range map[string]string{"PGDATABASE": b.Database, "PGUSER": b.Role} {
		if !name.MatchString(v) {
			return b, fmt.Errorf("binding %s %q is not a plain identifier ([a-z_][a-z0-9_]*, at most 63 characters)", k, v)
		}
	}
	if b.Role == AdminUser {
		return b, fmt.Errorf("binding PGUSER must not be the superuser %s", AdminUser)
	}
	return b, nil
}

// Password is the role's password: HMAC-SHA256 of the role name keyed with
// ROLE_KEY, 32 URL-safe characters.
func (b Binding) Password() string {
	return Password(b.RoleKey, b.Role)
}

// Password derives a role's password from the instance key.
func Password(roleKey, role string) string {
	m := hmac.New(sha256.New, []byte(roleKey))
	m.Write([]byte("petri-postgres-role:" + role))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))[:32]
}

// Config connects as the environment's role to its database.
func (b Binding) Config() (*pgx.ConnConfig, error) {
	return b.config(b.Role, b.Password(), b.Database)
}

// AdminConfig connects as the superuser to the maintenance database.
func (b Binding) AdminConfig() (*pgx.ConnConfig, error) {
	if b.AdminPassword == "" {
		return nil, errors.New("binding lacks ADMIN_PASSWORD")
	}
	return b.config(AdminUser, b.AdminPassword, AdminDatabase)
}

func (b Binding) config(user, password, database string) (*pgx.ConnConfig, error) {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword(user, password),
		Host:     net.JoinHostPort(b.Host, b.Port),
		Path:     "/" + database,
		RawQuery: "connect_timeout=10",
	}
	cfg, err := pgx.ParseConfig(u.String())
	if err != nil {
		// The URL holds the password: never return the parser's message.
		return nil, fmt.Errorf("connection settings for %s@%s/%s are invalid", user, u.Host, database)
	}
	Route(&cfg.Config, http.ProxyFromEnvironment)
	return cfg, nil
}

// serviceHost reports whether host is a cluster Service name
// (NAME.NAMESPACE.svc[.cluster.local]).
func serviceHost(host string) bool {
	h := strings.TrimSuffix(strings.TrimSuffix(host, "."), ".cluster.local")
	return strings.HasSuffix(h, ".svc") && strings.Count(h, ".") == 2
}

// Route makes cfg reach a cluster Service name through an HTTP proxy
// (CONNECT) when proxy names one for it, as the local node's service proxy
// does; otherwise it dials directly. In a cluster, where the Service name
// resolves and NO_PROXY covers .svc, nothing changes.
func Route(cfg *pgconn.Config, proxy func(*http.Request) (*url.URL, error)) {
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 5 * time.Minute}
	via := func(addr string) *url.URL {
		host, _, err := net.SplitHostPort(addr)
		if err != nil || !serviceHost(host) {
			return nil
		}
		u, err := proxy(&http.Request{URL: &url.URL{Scheme: "http", Host: addr}})
		if err != nil || u == nil {
			return nil
		}
		return u
	}
	lookup := cfg.LookupFunc
	cfg.LookupFunc = func(ctx context.Context, host string) ([]string, error) {
		if via(net.JoinHostPort(host, "5432")) != nil {
			return []string{host}, nil // the proxy resolves it
		}
		return lookup(ctx, host)
	}
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if u := via(addr); u != nil && network == "tcp" {
			return connect(ctx, dialer, u.Host, addr)
		}
		return dialer.DialContext(ctx, network, addr)
	}
}

// connect opens a tunnel to addr through the HTTP proxy at proxyAddr.
func connect(ctx context.Context, d *net.Dialer, proxyAddr, addr string) (net.Conn, error) {
	conn, err := d.DialContext(ctx, "tcp", proxyAddr)
	if err != nil {
		return nil, fmt.Errorf("dial proxy %s: %w", proxyAddr, err)
	}
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	if _, err := fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", addr, addr); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("proxy %s: %w", proxyAddr, err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("proxy %s: %w", proxyAddr, err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_ = conn.Close()
		return nil, fmt.Errorf("proxy %s refused CONNECT %s: %s", proxyAddr, addr, resp.Status)
	}
	_ = conn.SetDeadline(time.Time{})
	if br.Buffered() > 0 {
		return &bufferedConn{Conn: conn, r: br}, nil
	}
	return conn, nil
}

// bufferedConn reads what the proxy's reader buffered first.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// Quote quotes an identifier FromEnv accepted.
func Quote(ident string) string {
	return pgx.Identifier{ident}.Sanitize()
}
