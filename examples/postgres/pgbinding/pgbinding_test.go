package pgbinding_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/petri-dev/petri/examples/postgres/pgbinding"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func binding() map[string]string {
	return map[string]string{
		"PGHOST": "postgres.petri-shared.svc", "PGPORT": "5432", "PGDATABASE": "env_0a1b2c3d", "PGUSER": "env_0a1b2c3d",
		"PGPASSWORD": "role-password",
	}
}

func TestFromEnv(t *testing.T) {
	b, err := pgbinding.FromEnv(env(binding()))
	require.NoError(t, err)
	assert.Equal(t, "env_0a1b2c3d", b.Database)

	for _, tc := range []struct {
		name   string
		change func(map[string]string)
		want   string
	}{
		{"missing keys", func(m map[string]string) { delete(m, "PGHOST"); delete(m, "PGPASSWORD") }, "binding lacks PGHOST, PGPASSWORD"},
		{"quote in a name", func(m map[string]string) { m["PGDATABASE"] = `env"; DROP` }, "PGDATABASE"},
		{"superuser", func(m map[string]string) { m["PGUSER"] = "postgres" }, "must not be the superuser"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := binding()
			tc.change(m)
			_, err := pgbinding.FromEnv(env(m))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.NotContains(t, err.Error(), "role-password", "no secret in the error")
		})
	}
}

// The application connects with the binding's own password; only a step
// that has the instance key connects as the superuser.
func TestCredentials(t *testing.T) {
	b, err := pgbinding.FromEnv(env(binding()))
	require.NoError(t, err)
	cfg, err := b.Config()
	require.NoError(t, err)
	assert.Equal(t, "env_0a1b2c3d", cfg.User)
	assert.Equal(t, "role-password", cfg.Password)
	_, err = b.AdminConfig()
	require.Error(t, err, "an environment has no superuser password")

	m := binding()
	m["ADMIN_PASSWORD"] = "admin-secret"
	b, err = pgbinding.FromEnv(env(m))
	require.NoError(t, err)
	cfg, err = b.AdminConfig()
	require.NoError(t, err)
	assert.Equal(t, pgbinding.AdminUser, cfg.User)
	assert.Equal(t, "admin-secret", cfg.Password)
}

// A Service name is dialled through the proxy with CONNECT, unresolved;
// other hosts are dialled directly.
func TestRouteTunnelsServiceNamesThroughTheProxy(t *testing.T) {
	upstream, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer upstream.Close()
	go func() {
		for {
			c, err := upstream.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, "hello from upstream\n")
			_ = c.Close()
		}
	}()
	proxyL, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer proxyL.Close()
	targets := make(chan string, 4)
	go func() {
		for {
			c, err := proxyL.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				targets <- req.Method + " " + req.Host
				u, err := net.Dial("tcp", upstream.Addr().String())
				if err != nil {
					return
				}
				defer u.Close()
				_, _ = io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
				_, _ = io.Copy(c, u)
			}()
		}
	}()
	proxyURL := &url.URL{Scheme: "http", Host: proxyL.Addr().String()}
	cfg := &pgconn.Config{LookupFunc: func(context.Context, string) ([]string, error) {
		return nil, &net.DNSError{Err: "no such host", IsNotFound: true}
	}}
	pgbinding.Route(cfg, func(*http.Request) (*url.URL, error) { return proxyURL, nil })

	addrs, err := cfg.LookupFunc(context.Background(), "postgres.petri-shared.svc")
	require.NoError(t, err)
	assert.Equal(t, []string{"postgres.petri-shared.svc"}, addrs, "the proxy resolves Service names")
	conn, err := cfg.DialFunc(context.Background(), "tcp", "postgres.petri-shared.svc:5432")
	require.NoError(t, err)
	line, err := bufio.NewReader(conn).ReadString('\n')
	require.NoError(t, err)
	_ = conn.Close()
	assert.Equal(t, "hello from upstream\n", line)
	assert.Equal(t, "CONNECT postgres.petri-shared.svc:5432", <-targets)

	_, err = cfg.LookupFunc(context.Background(), "db.example.com")
	assert.Error(t, err, "other hosts are resolved as usual")
	conn, err = cfg.DialFunc(context.Background(), "tcp", upstream.Addr().String())
	require.NoError(t, err)
	line, _ = bufio.NewReader(conn).ReadString('\n')
	_ = conn.Close()
	assert.Equal(t, "hello from upstream\n", line)
	assert.Empty(t, targets, "an address is dialled directly")
	assert.False(t, strings.Contains(line, "CONNECT"))
}
