package chaos

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDocText: docs/reliability.md's text around the last run's table is
// what WriteDoc writes, so a full run does not undo an edit of the page.
func TestDocText(t *testing.T) {
	data, err := os.ReadFile("../../docs/reliability.md")
	require.NoError(t, err)
	doc := string(data)
	assert.True(t, strings.HasPrefix(doc, docIntro), "docs/reliability.md starts with docIntro")
	var tail strings.Builder
	tail.WriteString(docInvariantsHead)
	for _, i := range Invariants() {
		fmt.Fprintf(&tail, "- **%s**: %s.\n", i.Column(), i.Description())
	}
	tail.WriteString(docScenarios)
	assert.True(t, strings.HasSuffix(doc, tail.String()), "docs/reliability.md ends with the invariants and docScenarios")
}
