package jobwatch

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/petri-dev/petri/api/contract"
)

func TestJobMessageCarriesNoCredentials(t *testing.T) {
	const planted = "PLANTED-op-62c0"
	detail := "GET https://ci:" + planted + "@charts.example/index.yaml?token=" + planted + ": Authorization: Bearer " + planted
	var typed State
	typed.SetMessage(contract.Encode(contract.Result{Action: "deploy", Outcome: contract.OutcomeFailed, Reason: contract.ReasonFailed, Message: "Failed: " + detail}))
	assert.True(t, typed.Typed)
	assert.NotContains(t, typed.Message, planted)
	assert.NotContains(t, typed.Result.Message, planted)
	assert.Contains(t, typed.Message, "charts.example")

	var step State
	step.SetMessage("provision failed: " + detail)
	assert.NotContains(t, step.Message, planted)
	assert.Contains(t, step.Message, "provision failed")
}
