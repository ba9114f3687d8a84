package gitlab

import (
	"crypto/sha256"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The token check compares inputs of one fixed length whatever the lengths
// of the token and the secret: subtle.ConstantTimeCompare returns at once
// on inputs of different lengths, so comparing the raw values would tell
// the secret's length by the time taken.
func TestValidTokenComparesInputsOfOneLength(t *testing.T) {
	type compared struct{ x, y int }
	var calls []compared
	compare := constantTimeCompare
	constantTimeCompare = func(x, y []byte) int {
		calls = append(calls, compared{len(x), len(y)})
		return compare(x, y)
	}
	t.Cleanup(func() { constantTimeCompare = compare })

	const secret, long = "s3cret-hook-token", "a-webhook-secret-token-longer-than-any-digest-of-sha256"
	for _, tt := range []struct {
		name, secret, token string
		valid               bool
	}{
		{"the secret", secret, secret, true},
		{"shorter", secret, secret[:5], false},
		{"longer", secret, secret + strings.Repeat("x", 100), false},
		{"equal length, wrong", secret, strings.ToUpper(secret), false},
		{"one byte off", secret, secret[:len(secret)-1] + "N", false},
		{"empty", secret, "", false},
		{"a long secret", long, long, true},
		{"shorter than a long secret", long, secret, false},
		{"a one-byte secret", "k", "k", true},
		{"longer than a one-byte secret", "k", secret, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			calls = nil
			assert.Equal(t, tt.valid, ValidToken([]byte(tt.secret), tt.token))
			if assert.Len(t, calls, 1, "one comparison") {
				assert.Equal(t, compared{sha256.Size, sha256.Size}, calls[0], "both inputs %d bytes, for a token of %d and a secret of %d", sha256.Size, len(tt.token), len(tt.secret))
			}
		})
	}
}
