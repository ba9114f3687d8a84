package shared

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

func TestSharedWorkloadEventsThatWakeItsEnvironments(t *testing.T) {
	sw := func(mutate func(*petriv1.SharedWorkload)) *petriv1.SharedWorkload {
		s := &petriv1.SharedWorkload{ObjectMeta: metav1.ObjectMeta{Name: "db", Generation: 1}}
		s.Status.BoundEnvironments = 3
		s.Status.Phase = petriv1.EnvironmentReady
		if mutate != nil {
			mutate(s)
		}
		return s
	}
	base := sw(nil)
	for name, tt := range map[string]struct {
		new  *petriv1.SharedWorkload
		want bool
	}{
		"another environment bound": {sw(func(s *petriv1.SharedWorkload) { s.Status.BoundEnvironments = 4 }), false},
		"nothing changed":           {sw(nil), false},
		"its spec changed":          {sw(func(s *petriv1.SharedWorkload) { s.Generation = 2 }), true},
		"it is being deleted": {sw(func(s *petriv1.SharedWorkload) {
			now := metav1.NewTime(time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC))
			s.DeletionTimestamp = &now
		}), true},
		"it is no longer ready":      {sw(func(s *petriv1.SharedWorkload) { s.Status.Phase = petriv1.EnvironmentDeploying }), true},
		"its conditions changed too": {sw(func(s *petriv1.SharedWorkload) { s.Status.BoundEnvironments = 4; s.Status.ObservedGeneration = 1 }), true},
		"its release was verified": {sw(func(s *petriv1.SharedWorkload) {
			s.Status.Verification = &petriv1.VerificationStatus{Job: "db-release-verify-g1-0a1b2c3d", Trigger: "Periodic", Result: "Verified: db=1"}
		}), false},
		"it was deployed again": {sw(func(s *petriv1.SharedWorkload) { s.Status.Recoveries = 1 }), true},
	} {
		assert.Equal(t, tt.want, Changed.Update(event.UpdateEvent{ObjectOld: base, ObjectNew: tt.new}), name)
	}
	assert.True(t, Changed.Create(event.CreateEvent{Object: base}))
	assert.True(t, Changed.Delete(event.DeleteEvent{Object: base}))
}
