package plugin

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// A container's last log line reaches lastError; printed by get, its
// terminal escapes (an OSC 52 clipboard write, a screen clear) and
// bidirectional overrides must not reach the user's terminal.
func TestGetPrintsNoTerminalEscapes(t *testing.T) {
	v := Environment{
		Name: "shop-pr-1-abcdef", Phase: "Failed\x1b[2J",
		Message: "deploy failed \u202egnp.exe",
		Components: []Component{{
			Name: "web", Chart: "greeter", Version: "0.1.0", Phase: "Failed",
			Job:       &Job{Name: "shop-pr-1-web-deploy", Pod: "p\x1b]0;title\x07", PodPhase: "Failed"},
			LastError: "ContainerCrashed: last line: \x1b]52;c;ZWNobyBwd25lZA==\x07 \u009b31m [Approve](https://evil)",
		}},
	}
	var out bytes.Buffer
	printTree(&out, v, time.Now())
	text := out.String()
	for _, r := range text {
		if r == '\n' {
			continue
		}
		assert.False(t, r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == '\u202e', "control or override %U in the output:\n%q", r, text)
	}
	assert.Contains(t, text, "ContainerCrashed: last line: ]52;c;ZWNobyBwd25lZA==")
	assert.Contains(t, text, "shop-pr-1-abcdef  Failed[2J")
}
