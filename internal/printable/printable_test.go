package printable_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/petri-dev/petri/internal/printable"
)

func TestString(t *testing.T) {
	for _, c := range []struct{ name, in, want string }{
		{"plain text is kept", "pod app-1: exit code 1: listen tcp :8080: address in use", "pod app-1: exit code 1: listen tcp :8080: address in use"},
		{"non-ASCII letters are kept", "Größe überschritten: 配置错误", "Größe überschritten: 配置错误"},
		{"OSC 52 clipboard write", "\x1b]52;c;ZWNobyBwd25lZA==\x07 done", "]52;c;ZWNobyBwd25lZA== done"},
		{"screen clear and colour", "\x1b[2J\x1b[31mred\x1b[0m", "[2J[31mred[0m"},
		{"C1 controls", "a\u009b31mb\u0085c", "a31mbc"},
		{"bidirectional override", "file\u202etxt.exe\u202c ok", "filetxt.exe ok"},
		{"bidirectional isolates", "\u2066admin\u2069 \u2067x\u2068", "admin x"},
		{"zero-width and BOM", "ap\u200bp\u200d\ufeffroved", "approved"},
		{"newlines and tabs become spaces", "a\tb\nc\rd", "a b c d"},
		{"line separators", "a\u2028b\u2029c", "abc"},
		{"invalid UTF-8", "a\xffb", "ab"},
		{"DEL and NUL", "a\x7fb\x00c", "abc"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := printable.String(c.in)
			assert.Equal(t, c.want, got)
			for _, r := range got {
				assert.False(t, r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0), "control %U left in %q", r, got)
			}
		})
	}
}
