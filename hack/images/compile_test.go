package images_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/petri-dev/petri/hack/images"
)

// recordingGo is a go command that writes its arguments and its CGO_ENABLED,
// GOOS and GOARCH, one per line, to the file log names, and fails.
func recordingGo(t *testing.T, log string) string {
	t.Helper()
	script := filepath.Join(t.TempDir(), "go")
	body := "#!/bin/sh\nfor a in \"$@\"; do echo \"$a\"; done > " + log + "\necho CGO_ENABLED=$CGO_ENABLED GOOS=$GOOS GOARCH=$GOARCH >> " + log + "\nexit 1\n"
	require.NoError(t, os.WriteFile(script, []byte(body), 0o755))
	return script
}

func recorded(t *testing.T, log string) []string {
	t.Helper()
	data, err := os.ReadFile(log)
	require.NoError(t, err)
	return strings.Split(strings.TrimSpace(string(data)), "\n")
}

// Compile runs the go build that Build runs, with the same flags and
// environment (so that Go's build cache serves Build afterwards) and no
// output: several packages are compiled and not linked, and one is linked
// to nowhere.
func TestCompileIsBuildWithoutItsOutput(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	buildLog, compileLog, oneLog := filepath.Join(dir, "build"), filepath.Join(dir, "compile"), filepath.Join(dir, "one")

	_, err := images.Build(ctx, images.Specs, images.Options{Go: recordingGo(t, buildLog)})
	require.Error(t, err)
	build := recorded(t, buildLog)
	i := slices.Index(build, "-o")
	require.GreaterOrEqual(t, i, 0, "Build writes its binaries somewhere: %q", build)
	withoutOutput := slices.Delete(slices.Clone(build), i, i+2)

	require.Error(t, images.Compile(ctx, images.Specs, images.Options{Go: recordingGo(t, compileLog)}))
	assert.Equal(t, withoutOutput, recorded(t, compileLog), "the same go build, less -o")
	assert.Contains(t, withoutOutput, "CGO_ENABLED=0 GOOS=linux GOARCH=amd64")

	one := images.Specs[:1]
	require.Error(t, images.Compile(ctx, one, images.Options{Go: recordingGo(t, oneLog)}))
	got := recorded(t, oneLog)
	j := slices.Index(got, "-o")
	require.GreaterOrEqual(t, j, 0, "one main package is linked: its binary goes nowhere")
	assert.Equal(t, os.DevNull, got[j+1])
	assert.Contains(t, got, one[0].Package)
}
