package controllers

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/petri-dev/petri/api/contract"
)

// A Job's termination message reaches conditions, Events and pull
// requests: whoever wrote it (a deployer of another version, a step's
// container), credentials in it are not carried on.
func TestJobMessageCarriesNoCredentials(t *testing.T) {
	const planted = "PLANTED-op-62c0"
	detail := "GET https://ci:" + planted + "@charts.example/index.yaml?token=" + planted + ": Authorization: Bearer " + planted
	var typed jobState
	typed.setMessage(contract.Encode(contract.Result{Action: "deploy", Outcome: contract.OutcomeFailed, Reason: contract.ReasonFailed, Message: "Failed: " + detail}))
	assert.True(t, typed.typed)
	assert.NotContains(t, typed.message, planted)
	assert.NotContains(t, typed.result.Message, planted)
	assert.Contains(t, typed.message, "charts.example")

	var step jobState
	step.setMessage("provision failed: " + detail)
	assert.NotContains(t, step.message, planted)
	assert.Contains(t, step.message, "provision failed")
}

// A Job's message is copied into lastError, the comment and kubectl petri
// get: the terminal escapes and bidirectional overrides a pull request's
// code may have written into it are dropped on the way in.
func TestOneLineDropsControlCharacters(t *testing.T) {
	got := oneLine("ContainerCrashed: last line: \x1b]52;c;Zm9v\x07 \u202eexe.txt\u009b2J\nsecond line")
	assert.Equal(t, "ContainerCrashed: last line: ]52;c;Zm9v exe.txt2J", got)
}
