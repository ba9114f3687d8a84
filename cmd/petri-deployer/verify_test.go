package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/petri-dev/petri/api/contract"
)

// verify as a Job runs it: the releases as their deploys left them are
// Succeeded, exit 0; a release moved or missing is Drifted, named as data,
// exit 3 (one pod: running it again reads the same).
func TestBinaryVerifyReportsTypedResults(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	res := runDeployer(t, env.Kubeconfig, "deploy", "--release", "web", "--namespace", ns,
		"--chart-repository", charts, "--chart-name", "greeter", "--chart-version", "0.1.0",
		"--values", valuesFile(t, "replicas: 0\n"))
	require.Equal(t, 0, res.code, "stdout:\n%s\nstderr:\n%s", res.stdout, res.stderr)
	require.Equal(t, 1, res.decoded(t).Revision)

	tests := []struct {
		name   string
		expect []string
		code   int
		want   contract.Result
	}{
		{
			name: "verified", expect: []string{"web=1"}, code: 0,
			want: contract.Result{Action: contract.ActionVerify, Outcome: contract.OutcomeSucceeded, Message: "Verified: web=1"},
		},
		{
			name: "moved and missing", expect: []string{"web=2", "api"}, code: exitFinal,
			want: contract.Result{Action: contract.ActionVerify, Outcome: contract.OutcomeDrifted, Reason: contract.ReasonRevisionMismatch,
				Drifted: []string{"web", "api"}, Message: "RevisionMismatch: web 1 != 2; ReleaseMissing: api"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := []string{"verify", "--namespace", ns}
			for _, e := range tt.expect {
				args = append(args, "--expect", e)
			}
			res := runDeployer(t, env.Kubeconfig, args...)
			assert.Equal(t, tt.code, res.code, "stdout:\n%s\nstderr:\n%s", res.stdout, res.stderr)
			assert.Equal(t, tt.want, res.decoded(t))
		})
	}
}
