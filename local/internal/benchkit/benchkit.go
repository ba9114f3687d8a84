// Package benchkit is what make bench (local/bench) and make bench-peers
// (local/peers) measure with alike: the latency summary their tables
// print, the CPU time and memory of a process read from /proc, the Petri
// installation both apply to the local control plane, and the small
// helpers of a run (its directory, its progress lines, its workers), so
// that a figure of one means what the same figure of the other does.
package benchkit

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// Logger writes progress lines to w, each after the time of day; it
// discards them when w is nil.
func Logger(w io.Writer) func(format string, args ...any) {
	if w == nil {
		w = io.Discard
	}
	return func(format string, args ...any) {
		fmt.Fprintf(w, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
}

// WorkDir is dir, or a new temporary directory named after pattern when
// dir is empty, so that a run keeps what it was told to keep; done removes
// the temporary directory and leaves a given one alone.
func WorkDir(dir, pattern string) (_ string, done func(), err error) {
	if dir != "" {
		return dir, func() {}, nil
	}
	d, err := os.MkdirTemp("", pattern)
	if err != nil {
		return "", nil, err
	}
	return d, func() { os.RemoveAll(d) }, nil
}

// LoadAverage is the machine's 1, 5 and 15 minute load averages
// (/proc/loadavg), "?" when unreadable: figures taken on a busy machine
// say so.
func LoadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// ForEach runs fn for every item with at most workers at once and returns
// the first error (or ctx's), so that many environments or pull requests
// are started together without one goroutine each.
func ForEach[T any](ctx context.Context, items []T, workers int, fn func(T) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		next  int
	)
	for range min(workers, len(items)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				if next >= len(items) || first != nil || ctx.Err() != nil {
					mu.Unlock()
					return
				}
				it := items[next]
				next++
				mu.Unlock()
				if err := fn(it); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}
