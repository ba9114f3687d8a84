package stack

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The local node plays an image by its name: tags and digests are not part
// of it, and a registry port is.
func TestImageName(t *testing.T) {
	for in, want := range map[string]string{
		"ghcr.io/petri-dev/petri-deployer:v0.1.0":  "ghcr.io/petri-dev/petri-deployer",
		"petri.dev/example-app":                    "petri.dev/example-app",
		"localhost:5000/petri/sync:1@sha256:abcd":  "localhost:5000/petri/sync",
		"localhost:5000/petri/sync@sha256:abcd":    "localhost:5000/petri/sync",
		"registry.example.com:443/tools/db:15.2-1": "registry.example.com:443/tools/db",
	} {
		assert.Equal(t, want, imageName(in), in)
	}
}

// "localhost" listens on loopback only; another host is kept as given.
func TestIngressListensOnLoopbackForLocalhost(t *testing.T) {
	assert.Equal(t, "127.0.0.1:8480", ingressListenAddress("localhost:8480"))
	assert.Equal(t, "127.0.0.1:0", ingressListenAddress(":0"))
	assert.Equal(t, "0.0.0.0:8480", ingressListenAddress("0.0.0.0:8480"))
}

// Every line of the report carries the time since the start; a failed step
// names itself in the error it returns and in the report.
func TestReportLines(t *testing.T) {
	var out bytes.Buffer
	r := NewReport(&out)
	r.Begin("Control plane").Done("https://127.0.0.1:6443")
	err := r.Begin("Install").Fail(errors.New("refused"))
	require.EqualError(t, err, "Install: refused")
	r.Detail("line one\nline two\n")
	lines := regexp.MustCompile(`\n`).Split(out.String(), -1)
	assert.Regexp(t, `^\[ *\d+\.\ds\]     \.\. Control plane$`, lines[0])
	assert.Regexp(t, `^\[ *\d+\.\ds\]     ok Control plane: https://127\.0\.0\.1:6443 \(\d+\.\ds\)$`, lines[1])
	assert.Regexp(t, `^\[ *\d+\.\ds\]     FAILED Install after \d+\.\ds: refused$`, lines[3])
	assert.Equal(t, "            line one", lines[4])
	assert.Equal(t, "            line two", lines[5])

	var nilReport *Report
	nilReport.Event("nothing happens") // a nil Report prints nothing and does not panic
}

// poll returns as soon as the check is done, reports what is missing when
// the time is up, and stops at once when interrupted.
func TestPoll(t *testing.T) {
	calls := 0
	require.NoError(t, poll(context.Background(), time.Minute, func() (bool, error) {
		calls++
		return calls == 3, nil
	}, nil))
	assert.Equal(t, 3, calls)

	err := poll(context.Background(), 250*time.Millisecond, func() (bool, error) { return false, nil }, func() string { return "pod web is Pending" })
	assert.EqualError(t, err, "not done after 250ms: pod web is Pending")

	boom := errors.New("boom")
	assert.ErrorIs(t, poll(context.Background(), time.Minute, func() (bool, error) { return false, boom }, nil), boom)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.EqualError(t, poll(ctx, time.Minute, func() (bool, error) { return false, nil }, nil), "interrupted")
}
