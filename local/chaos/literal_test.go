package chaos

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The hostile checks expect an author's text with a space between the
// braces of every template delimiter, and nothing else changed.
func TestAsValuesHold(t *testing.T) {
	for in, want := range map[string]string{
		"plain ${HOME} `id`":   "plain ${HOME} `id`",
		"{{ .Values }}":        "{ { .Values } }",
		"{{{x}}}":              "{ { {x} } }",
		"{ }{}":                "{ }{}",
		"\uFFFD{{\n- &a *a":    "\uFFFD{ {\n- &a *a",
		`{{ printf "%s" .V }}`: `{ { printf "%s" .V } }`,
	} {
		assert.Equal(t, want, AsValuesHold(in), "%q", in)
	}
}
