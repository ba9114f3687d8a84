package contract

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEncodeDecode(t *testing.T) {
	tests := map[string]Result{
		"deployed":  {Action: ActionDeploy, Outcome: OutcomeSucceeded, Revision: 4, Message: "Deployed: revision 4"},
		"final":     {Action: ActionDeploy, Outcome: OutcomeFailed, Reason: ReasonValuesInvalid, Message: "ValuesInvalid: <x> & \"y\""},
		"retryable": {Action: ActionUndeploy, Outcome: OutcomeFailed, Reason: ReasonTimeout, Retryable: true, Message: "Timeout: not ready"},
		"drifted":   {Action: ActionVerify, Outcome: OutcomeDrifted, Reason: ReasonReleaseMissing, Drifted: []string{"web", "api"}, Message: "ReleaseMissing: web; RevisionMismatch: api 3 != 4"},
		"verified":  {Action: ActionVerify, Outcome: OutcomeSucceeded, Message: "Verified: web=1"},
	}
	for name, r := range tests {
		t.Run(name, func(t *testing.T) {
			enc := Encode(r)
			assert.NotContains(t, enc, "\n")
			got, ok := Decode(enc)
			require.True(t, ok, enc)
			assert.Equal(t, r, got)
		})
	}
}

func TestDecodeRejectsWhatIsNotAResult(t *testing.T) {
	for _, msg := range []string{
		"",
		"VersionNotFound: chart web version 9.9.9",
		"Deployed: revision 4",
		`{"time":"2026-01-01T00:00:00Z","level":"ERROR","msg":"Failed"}`,
		`{"action":"deploy","outcome":"Maybe"}`,
		`{"action":"deploy","outcome":"Failed"} {"action":"deploy","outcome":"Succeeded"}`,
		`{"action":"deploy","outcome":"Fail`,
	} {
		_, ok := Decode(msg)
		assert.False(t, ok, msg)
	}
}

func TestDecodeClosesTheReasons(t *testing.T) {
	for _, known := range []Reason{ReasonImagePullFailed, ReasonContainerCrashed, ReasonUnschedulable} {
		r, ok := Decode(Encode(Result{Action: ActionDeploy, Outcome: OutcomeFailed, Reason: known}))
		require.True(t, ok)
		assert.Equal(t, known, r.Reason, "a reason of the set is kept")
	}
	r, ok := Decode(`{"action":"deploy","outcome":"Failed","reason":"SomethingNew","retryable":true,"future":1}`)
	require.True(t, ok)
	assert.Equal(t, ReasonFailed, r.Reason, "a reason outside the set")
	assert.True(t, r.Retryable)
	r, ok = Decode(`{"action":"deploy","outcome":"Failed"}`)
	require.True(t, ok)
	assert.Equal(t, ReasonFailed, r.Reason, "a failure always has a reason")
}

// The termination message is cut by the kubelet at 4096 bytes; the result
// stays whole JSON within that, however long its message or drift list.
func TestEncodeStaysWithinTheTerminationMessageLimit(t *testing.T) {
	var drifted []string
	for i := range 400 {
		drifted = append(drifted, strings.Repeat("c", 20)+string(rune('a'+i%26)))
	}
	for name, r := range map[string]Result{
		"long message":        {Action: ActionDeploy, Outcome: OutcomeFailed, Reason: ReasonFailed, Message: strings.Repeat("é\"", 3000)},
		"long drift":          {Action: ActionVerify, Outcome: OutcomeDrifted, Reason: ReasonReleaseMissing, Drifted: drifted, Message: "ReleaseMissing: many"},
		"long message, drift": {Action: ActionVerify, Outcome: OutcomeDrifted, Reason: ReasonReleaseMissing, Drifted: drifted, Message: strings.Repeat("<", 5000)},
	} {
		t.Run(name, func(t *testing.T) {
			enc := Encode(r)
			assert.LessOrEqual(t, len(enc), MaxBytes)
			got, ok := Decode(enc)
			require.True(t, ok, "still a result")
			assert.Equal(t, r.Outcome, got.Outcome)
			assert.Equal(t, r.Reason, got.Reason)
			assert.NotEmpty(t, got.Message+strings.Join(got.Drifted, ""))
		})
	}
}

func TestReasons(t *testing.T) {
	final := []Reason{ReasonInvalidArguments, ReasonValuesInvalid, ReasonKubeVersionIncompatible, ReasonRequiredValueMissing, ReasonRenderFailed,
		ReasonImagePullFailed, ReasonContainerCrashed}
	for _, r := range final {
		assert.True(t, r.Final(), r)
		assert.False(t, r.Retryable(), r)
	}
	for _, r := range []Reason{ReasonChartNotFound, ReasonVersionNotFound} {
		assert.False(t, r.Final(), "the Job retries it with another pod: %s", r)
		assert.False(t, r.Retryable(), "the operator starts no new Job for it: %s", r)
	}
	for _, r := range []Reason{ReasonKubernetesRefused, ReasonTimeout, ReasonUnschedulable, ReasonDigestMismatch, ReasonFailed} {
		assert.False(t, r.Final(), r)
		assert.True(t, r.Retryable(), r)
	}
}

func TestTruncate(t *testing.T) {
	assert.Equal(t, "abc", Truncate("abc", 3))
	assert.Equal(t, "a...", Truncate("abcdef", 4))
	assert.Equal(t, "...", Truncate("ééé", 4), "never half a rune")
}
