package syncer

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestDue(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	patience := time.Minute
	tests := []struct {
		name           string
		settled, first bool
		stale, pressed time.Time
		send           bool
		wait           time.Duration
	}{
		{name: "settled: at once", settled: true, send: true},
		{name: "the first status of a commit: at once", first: true, send: true},
		{name: "on its way: waits", stale: now, wait: time.Minute},
		{name: "on its way, stale for a while: waits the rest", stale: now.Add(-40 * time.Second), wait: 20 * time.Second},
		{name: "on its way past the patience: written", stale: now.Add(-time.Minute), send: true},
		{name: "settled while the forge refuses: at once", settled: true, pressed: now.Add(time.Minute), send: true},
		{name: "the first status while the forge refuses: after the settled ones", first: true, pressed: now.Add(30 * time.Second), wait: 30 * time.Second},
		{name: "past the patience while the forge refuses: after the settled ones", stale: now.Add(-time.Hour), pressed: now.Add(5 * time.Second), wait: 5 * time.Second},
		{name: "the refusal is over", stale: now.Add(-time.Hour), pressed: now.Add(-time.Second), send: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			send, wait := due(tt.settled, tt.first, tt.stale, now, patience, tt.pressed)
			assert.Equal(t, tt.send, send)
			assert.Equal(t, tt.wait, wait)
		})
	}
}
