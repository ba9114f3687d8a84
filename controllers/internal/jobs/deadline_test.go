package jobs

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestOneLineDropsControlCharacters(t *testing.T) {
	got := OneLine("ContainerCrashed: last line: \x1b]52;c;Zm9v\x07 \u202eexe.txt\u009b2J\nsecond line")
	assert.Equal(t, "ContainerCrashed: last line: ]52;c;Zm9v exe.txt2J", got)
}
