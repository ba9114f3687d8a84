package summary

import (
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// StampTransitions dates a pass's conditions by the operator's clock: one
// that is new or whose status changed moved now; one whose status did not
// keeps the time it last moved, also when the pass removed and set it again
// (Stalled of a failed generation), so an unchanged status needs no write.
func StampTransitions(before, after []metav1.Condition, now metav1.Time) {
	for i := range after {
		c := &after[i]
		if old := apimeta.FindStatusCondition(before, c.Type); old != nil && old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
		} else {
			c.LastTransitionTime = now
		}
	}
}
