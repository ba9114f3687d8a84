package stack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// Report prints progress the way a person wants to watch it: every line
// starts with the time since the run began, steps say what they wait for and
// how long it took, and command output is indented beneath. A nil Report
// prints nothing.
type Report struct {
	w     io.Writer
	start time.Time
	mu    sync.Mutex
}

// NewReport writes to w; the clock starts now.
func NewReport(w io.Writer) *Report { return &Report{w: w, start: time.Now()} }

func (r *Report) printf(format string, args ...any) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(r.w, "[%6.1fs] ", time.Since(r.start).Seconds())
	fmt.Fprintf(r.w, format, args...)
	fmt.Fprintln(r.w)
}

// Section starts a part of the run.
func (r *Report) Section(format string, args ...any) {
	if r == nil {
		return
	}
	r.mu.Lock()
	fmt.Fprintln(r.w)
	r.mu.Unlock()
	r.printf("==> "+format, args...)
}

// Event reports something that happened.
func (r *Report) Event(format string, args ...any) { r.printf("    "+format, args...) }

// Detail prints a block (command output) indented, without timestamps.
func (r *Report) Detail(text string) {
	if r == nil || strings.TrimSpace(text) == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		fmt.Fprintln(r.w, "            "+line)
	}
}

// Step is one thing the run waits for.
type Step struct {
	r     *Report
	title string
	start time.Time
}

// Begin announces a step.
func (r *Report) Begin(title string) *Step {
	r.printf("    .. %s", title)
	return &Step{r: r, title: title, start: time.Now()}
}

// Done reports the step's success and its duration.
func (s *Step) Done(detail string) {
	if detail != "" {
		detail = ": " + detail
	}
	s.r.printf("    ok %s%s (%.1fs)", s.title, detail, time.Since(s.start).Seconds())
}

// Fail reports the step's failure and returns err, annotated with the step.
func (s *Step) Fail(err error) error {
	s.r.printf("    FAILED %s after %.1fs: %v", s.title, time.Since(s.start).Seconds(), err)
	return fmt.Errorf("%s: %w", s.title, err)
}

// Elapsed is the step's duration so far.
func (s *Step) Elapsed() time.Duration { return time.Since(s.start) }

// pollInterval is how often a wait looks again; the API server answers in
// well under a millisecond here.
const pollInterval = 100 * time.Millisecond

// poll calls check until it reports done, returns an error, or timeout
// passes; explain says what was still missing.
func poll(ctx context.Context, timeout time.Duration, check func() (bool, error), explain func() string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		done, err := check()
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.Canceled) {
				return errors.New("interrupted")
			}
			msg := fmt.Sprintf("not done after %s", timeout)
			if explain != nil {
				msg += ": " + explain()
			}
			return fmt.Errorf("%s", msg)
		case <-t.C:
		}
	}
}

// WriteSummary prints each step's outcome and the total.
func WriteSummary(w io.Writer, res *Result, err error) {
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Summary")
	var total time.Duration
	if res != nil {
		for _, st := range res.Steps {
			mark := "ok    "
			if st.Err != nil {
				mark = "FAILED"
			}
			fmt.Fprintf(w, "  %s %-32s %6.1fs\n", mark, st.Name, st.Duration.Seconds())
			total += st.Duration
		}
	}
	if err != nil {
		fmt.Fprintf(w, "  the demo did not reach its expected state: %v\n", err)
		return
	}
	fmt.Fprintf(w, "  every step reached its expected state (%.1fs for the pull request's life)\n", total.Seconds())
}
