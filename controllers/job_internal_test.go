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
