package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

func TestProvisionDeprovisionAndTheApplicationPage(t *testing.T) {
	st := httptest.NewServer(newStore("admin-secret").handler())
	defer st.Close()
	app := httptest.NewServer(appHandler(appConfig{Message: "PR #7", Commit: "3f9c2e1", StoreURL: st.URL, Database: "env_ab12", Client: st.Client()}))
	defer app.Close()
	ctx := context.Background()

	code, body := get(t, app.URL+"/env-7/any/path")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "PR #7\ncommit: 3f9c2e1\ndatabase: env_ab12 (not provisioned)\n", body)

	_, err := provision(ctx, st.Client(), true, st.URL, "env_ab12", "wrong")
	require.ErrorContains(t, err, "HTTP 401", "the admin password is checked")
	msg, err := provision(ctx, st.Client(), true, st.URL, "env_ab12", "admin-secret")
	require.NoError(t, err)
	assert.Equal(t, "database env_ab12 created on "+st.URL, msg)
	_, err = provision(ctx, st.Client(), true, st.URL, "env_ab12", "admin-secret")
	require.NoError(t, err, "provisioning twice is harmless")
	_, body = get(t, app.URL+"/")
	assert.Contains(t, body, "database: env_ab12 (ready)")

	_, err = provision(ctx, st.Client(), false, st.URL, "env_ab12", "admin-secret")
	require.NoError(t, err)
	_, body = get(t, app.URL+"/")
	assert.Contains(t, body, "database: env_ab12 (not provisioned)")

	_, err = provision(ctx, st.Client(), true, st.URL, "bad-name!", "admin-secret")
	require.ErrorContains(t, err, "HTTP 400")
}

func TestProvisionWaitsForTheStore(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	url := "http://" + l.Addr().String()
	require.NoError(t, l.Close())

	// Nothing listens yet: provision gives up at its deadline, naming why.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = provision(ctx, http.DefaultClient, true, url, "db", "pw")
	require.ErrorContains(t, err, "store not reachable")

	_, err = provision(context.Background(), http.DefaultClient, true, "", "db", "pw")
	require.ErrorContains(t, err, "STORE_URL is empty")
}

// get prints the page a URL answers and fails on any other status; READY=false
// makes /healthz answer 503 while pages are still served.
func TestGetAndUnready(t *testing.T) {
	app := httptest.NewServer(appHandler(appConfig{Message: "hi", Commit: "abc1234", Unready: true}))
	defer app.Close()
	var out strings.Builder
	require.NoError(t, fetch(context.Background(), &out, []string{app.URL + "/x"}))
	assert.Equal(t, "hi\ncommit: abc1234\n", out.String())
	err := fetch(context.Background(), io.Discard, []string{app.URL + "/healthz"})
	require.ErrorContains(t, err, "503")
	require.ErrorContains(t, fetch(context.Background(), io.Discard, nil), "one URL")
}
