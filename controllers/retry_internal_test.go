package controllers

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/petri-dev/petri/api/contract"
	"github.com/petri-dev/petri/controllers/internal/jobwatch"
)

// A failed deploy Job is retried with a new Job unless its result says no
// new Job of the same spec can succeed; a Job that left no result (it ran
// out of pods or time, or its message is not a result) may.
func TestRetryableFailures(t *testing.T) {
	deployerReasons := []contract.Reason{
		contract.ReasonKubernetesRefused, contract.ReasonTimeout, contract.ReasonFailed, contract.ReasonDigestMismatch,
		contract.ReasonChartNotFound, contract.ReasonVersionNotFound, contract.ReasonValuesInvalid, contract.ReasonRenderFailed,
		contract.ReasonRequiredValueMissing, contract.ReasonKubeVersionIncompatible, contract.ReasonInvalidArguments,
	}
	tests := map[string]bool{
		"KubernetesRefused: services \"web\" is forbidden: exceeded quota":  true,
		"Timeout: install web: not ready within 5m0s":                       true,
		"Failed: repository https://charts.example.com answered 500":        true,
		"BackoffLimitExceeded: Job has reached the specified backoff limit": true,
		"DigestMismatch: web-1.0.0.tgz":                                     true,
		"":                                                                  true,
		"ChartNotFound: web is not in https://charts.example.com":           false,
		"VersionNotFound: web 9.9.9":                                        false,
		"ValuesInvalid: values don't meet the specifications":               false,
		"RenderFailed: template: web/templates/x.yaml":                      false,
		"RequiredValueMissing: host is required":                            false,
		"KubeVersionIncompatible: chart requires kubeVersion: <1.20":        false,
		"InvalidArguments: --release required":                              false,
	}
	for msg, want := range tests {
		// What the deployer writes for a failure with this reason; a
		// message that names no reason of the set stands for a Job that
		// left no result (its deadline, its backoff limit).
		reason, detail, _ := strings.Cut(msg, ": ")
		termination := msg
		if r := contract.Reason(reason); slices.Contains(deployerReasons, r) {
			termination = contract.Encode(contract.Result{Action: contract.ActionDeploy, Outcome: contract.OutcomeFailed, Reason: r, Retryable: r.Retryable(), Message: msg})
		}
		var st jobwatch.State
		st.SetMessage(termination)
		assert.Equal(t, want, st.Retryable(), msg)
		assert.Equal(t, msg, st.Message, "the message for people is the result's, %s", detail)
	}
}

// The revision of a deploy and the releases a verification found drifted
// are read from the result's fields, never from its message.
func TestVerificationResults(t *testing.T) {
	var st jobwatch.State
	st.SetMessage(contract.Encode(contract.Result{Action: contract.ActionDeploy, Outcome: contract.OutcomeSucceeded, Revision: 4, Message: "Deployed: revision 4"}))
	assert.True(t, st.Typed)
	assert.Equal(t, 4, st.Result.Revision)
	assert.Equal(t, "Deployed: revision 4", st.Message)

	for _, msg := range []string{"", "Deployed", "Deployed: revision 4"} {
		st = jobwatch.State{}
		st.SetMessage(msg)
		assert.False(t, st.Typed, "prose is no result: %q", msg)
		assert.Zero(t, st.Result.Revision)
		assert.Equal(t, msg, st.Message)
	}

	st = jobwatch.State{}
	st.SetMessage(contract.Encode(contract.Result{Action: contract.ActionVerify, Outcome: contract.OutcomeDrifted, Reason: contract.ReasonReleaseMissing,
		Drifted: []string{"web", "api"}, Message: "ReleaseMissing: web; RevisionMismatch: api 3 != 4"}))
	assert.Equal(t, []string{"web", "api"}, st.Result.Drifted)
	assert.Equal(t, "ReleaseMissing: web; RevisionMismatch: api 3 != 4", st.Message)

	st = jobwatch.State{}
	st.SetMessage(contract.Encode(contract.Result{Action: contract.ActionVerify, Outcome: contract.OutcomeFailed, Reason: contract.ReasonKubernetesRefused, Retryable: true, Message: "KubernetesRefused: secrets is forbidden"}))
	assert.Empty(t, st.Result.Drifted)
	assert.Equal(t, contract.OutcomeFailed, st.Result.Outcome)
}
