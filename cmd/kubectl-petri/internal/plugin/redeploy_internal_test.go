package plugin

import (
	"testing"

	"github.com/stretchr/testify/assert"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

// redeploy --wait (and wake --wait) end on a final outcome of the current
// generation. Degraded is one: deployed, but a workload stopped running,
// and nothing is deployed for it, so a wait for anything else would last
// until its timeout.
func TestOutcomeFinal(t *testing.T) {
	for _, tc := range []struct {
		phase    petriv1.EnvironmentPhase
		observed int64
		want     bool
	}{
		{petriv1.EnvironmentReady, 3, true},
		{petriv1.EnvironmentDegraded, 3, true},
		{petriv1.EnvironmentFailed, 3, true},
		{petriv1.EnvironmentStalled, 3, true},
		{petriv1.EnvironmentDeploying, 3, false},
		{petriv1.EnvironmentSleeping, 3, false},
		{petriv1.EnvironmentDeleting, 3, false},
		{petriv1.EnvironmentDegraded, 2, false},
		{petriv1.EnvironmentReady, 2, false},
	} {
		e := &petriv1.EphemeralEnvironment{}
		e.Generation, e.Status.ObservedGeneration, e.Status.Phase = 3, tc.observed, tc.phase
		assert.Equal(t, tc.want, outcomeFinal(e), "%s, generation 3 observed %d", tc.phase, tc.observed)
	}
}
