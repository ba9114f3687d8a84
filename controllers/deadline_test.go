package controllers_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/petri-dev/petri/api/contract"
	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

// TestJobDeadlineCoversTheReleaseTimeout: a deploy that may wait 20
// minutes (release.wait, release.timeout) runs in a Job whose deadline is
// longer than that, not the operator's 15-minute default that would kill
// Helm midway and leave a pending release; a component with no timeout
// keeps the default.
func TestJobDeadlineCoversTheReleaseTimeout(t *testing.T) {
	ctx := context.Background()
	slow := greeter("slow")
	slow.Release = petriv1.ReleaseOptions{Wait: true, Timeout: &metav1.Duration{Duration: 20 * time.Minute}}
	e := newEnv("deadline", slow, greeter("quick"))
	require.NoError(t, env.Client.Create(ctx, e))
	t.Cleanup(func() { _ = env.Client.Delete(ctx, e) })
	e = waitFor(t, "deadline", "bound", bound)
	deadlines := map[string]int64{}
	require.Eventually(t, func() bool {
		for _, j := range stepJobs(t, e.UID, "deploy") {
			if j.Spec.ActiveDeadlineSeconds != nil {
				deadlines[j.Labels[contract.LabelComponent]] = *j.Spec.ActiveDeadlineSeconds
			}
		}
		return len(deadlines) == 2
	}, time.Minute, 50*time.Millisecond, "both deploy Jobs")
	assert.Equal(t, int64((25 * time.Minute).Seconds()), deadlines["slow"], "the release's 20 minutes and the margin")
	assert.Equal(t, int64((15 * time.Minute).Seconds()), deadlines["quick"], "the operator's default")
}
