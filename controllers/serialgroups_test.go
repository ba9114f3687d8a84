package controllers_test

import (
	"testing"
	"time"
)

// The tests that change the operator itself (restart it, or run it with
// periodic verification) run before the parallel tests, whose counts of
// passes, writes and Jobs a restart or a verify Job would disturb. Within
// each group they run side by side.

// TestOperatorRestarts runs the tests that restart the operator, together:
// each says what survives a restart, so each holds through the others'
// restarts as well as its own.
func TestOperatorRestarts(t *testing.T) {
	runTogether(t, map[string]func(*testing.T){
		"RestartMidGraphCreatesNoDuplicateJobs":                 restartMidGraphCreatesNoDuplicateJobs,
		"NamespaceLockSurvivesCollisionsRestartsAndSpecChanges": namespaceLockSurvivesCollisionsRestartsAndSpecChanges,
		"RedeployAnnotationRunsTheGraphAgainOncePerValue":       redeployAnnotationRunsTheGraphAgainOncePerValue,
		"RestartKeepsPlacedEnvironmentsReady":                   restartKeepsPlacedEnvironmentsReady,
		"BindingCredentialsSurviveARestart":                     bindingCredentialsSurviveARestart,
	})
}

// TestPeriodicVerification runs the tests of periodic verify Jobs,
// together, with the operator verifying every second.
func TestPeriodicVerification(t *testing.T) {
	withVerifyInterval(t, time.Second)
	runTogether(t, map[string]func(*testing.T){
		"AtRestKeepsOneVerifyJobAndOneValuesSecret":           atRestKeepsOneVerifyJobAndOneValuesSecret,
		"DeletedReleaseIsFoundByVerificationAndDeployedAgain": deletedReleaseIsFoundByVerificationAndDeployedAgain,
		"LostSharedReleaseIsDeployedAgain":                    lostSharedReleaseIsDeployedAgain,
	})
}

// runTogether runs each test as a parallel subtest of t; t ends when all
// of them have.
func runTogether(t *testing.T, tests map[string]func(*testing.T)) {
	for name, test := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t)
		})
	}
}
