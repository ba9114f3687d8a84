package benchkit

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseCounts reads a comma-separated list of positive numbers (sizes of
// runs, as the benchmarks' flags take them); empty entries are skipped, so
// an empty list is none.
func ParseCounts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// FormatCounts writes counts as ParseCounts reads them, for a flag's
// default.
func FormatCounts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}
