package github

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/petri-dev/petri/sync/provider"
)

// GitHub's documented secondary rate limits, per identity, which the
// provider keeps under: content-generating requests (POST, PATCH, PUT,
// DELETE) per minute and per hour, and requests at once (GitHub allows
// 100; the provider sends fewer).
const (
	writesPerMinute = 80
	writesPerHour   = 500
	maxInFlight     = 50
)

// windowMargin widens each window the provider counts its writes in: a
// write's time is taken before it is sent, and it reaches GitHub a little
// later, so GitHub's window never holds more than the provider's did.
const windowMargin = time.Second

// secondaryWait is how long GitHub is left alone after a secondary limit
// that announced no Retry-After: GitHub's documentation asks for at least
// a minute.
const secondaryWait = time.Minute

// limitTransport keeps the provider (one identity) within GitHub's
// secondary rate limits and holds it at them:
//
//   - no more than maxInFlight requests at once;
//   - writes one at a time, as GitHub's documentation asks of many of
//     them, and no more than writesPerMinute in any minute and
//     writesPerHour in any hour: a write beyond them is refused before it
//     is sent, with a *provider.RateLimitError that ends when the window
//     has room again;
//   - after GitHub answers 403 or 429 for a secondary limit, no request
//     at all (reads too) until its Retry-After has passed: each is refused
//     with a *provider.RateLimitError ending then, and sync sends the
//     refused write again after it (its feedback is queued for then).
//
// Refused requests cost nothing at GitHub.
type limitTransport struct {
	next  http.RoundTripper
	clock clock.PassiveClock
	slots chan struct{}
	// writing serialises the writes.
	writing sync.Mutex

	mu sync.Mutex
	// writes are the times of the writes sent within the last hour (and
	// margin), oldest first.
	writes []time.Time
	// until is when the last secondary limit GitHub announced ends.
	until time.Time
}

func newLimitTransport(next http.RoundTripper, clk clock.PassiveClock) *limitTransport {
	return &limitTransport{next: next, clock: clk, slots: make(chan struct{}, maxInFlight)}
}

// errHeld is the cause of a request refused while GitHub's secondary
// rate limit lasts.
var errHeld = errors.New("not calling GitHub before the Retry-After of its secondary rate limit")

// errBudget is the cause of a write refused because it would go beyond
// GitHub's writes per minute or per hour.
var errBudget = errors.New("not writing to GitHub beyond its secondary rate limit of content-generating requests")

func contentGenerating(method string) bool {
	switch method {
	case http.MethodPost, http.MethodPatch, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}

func (t *limitTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	select {
	case t.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-t.slots }()
	write := contentGenerating(req.Method)
	if write {
		t.writing.Lock()
		defer t.writing.Unlock()
	}
	sent, err := t.admit(write)
	if err != nil {
		closeBody(req)
		return nil, err
	}
	resp, err := t.next.RoundTrip(req)
	if err != nil || (resp.StatusCode != http.StatusForbidden && resp.StatusCode != http.StatusTooManyRequests) {
		return resp, err
	}
	wait, limited := secondaryLimit(resp)
	if !limited {
		return resp, nil
	}
	_ = resp.Body.Close()
	until := t.hold(wait, sent)
	return nil, &provider.RateLimitError{Until: until, Err: fmt.Errorf("GitHub answered %d for a secondary rate limit, Retry-After %s", resp.StatusCode, wait)}
}

// admit refuses a request while a secondary limit lasts, and a write
// beyond the windows; it records an admitted write (sent, its time).
func (t *limitTransport) admit(write bool) (time.Time, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.clock.Now()
	if now.Before(t.until) {
		return time.Time{}, &provider.RateLimitError{Until: t.until, Err: errHeld}
	}
	if !write {
		return time.Time{}, nil
	}
	hour, minute := time.Hour+windowMargin, time.Minute+windowMargin
	for len(t.writes) > 0 && !t.writes[0].After(now.Add(-hour)) {
		t.writes = t.writes[1:]
	}
	var until time.Time
	if n := len(t.writes); n >= writesPerHour {
		until = t.writes[n-writesPerHour].Add(hour)
	}
	if n := len(t.writes); inWindow(t.writes, now, minute) >= writesPerMinute {
		if u := t.writes[n-writesPerMinute].Add(minute); u.After(until) {
			until = u
		}
	}
	if !until.IsZero() {
		return time.Time{}, &provider.RateLimitError{Until: until, Err: errBudget}
	}
	t.writes = append(t.writes, now)
	return now, nil
}

// writable is the error a write sent now would be refused with, nil when
// it would be sent: the reads a write needs first (sync's comment looked
// for, the commit's statuses) are not made for a write that could not be
// sent after them, and a refused write that is sent again later costs no
// read each time.
func (t *limitTransport) writable() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.clock.Now()
	if now.Before(t.until) {
		return &provider.RateLimitError{Until: t.until, Err: errHeld}
	}
	hour, minute := time.Hour+windowMargin, time.Minute+windowMargin
	n := len(t.writes)
	var until time.Time
	if inWindow(t.writes, now, hour) >= writesPerHour {
		until = t.writes[n-writesPerHour].Add(hour)
	}
	if inWindow(t.writes, now, minute) >= writesPerMinute {
		if u := t.writes[n-writesPerMinute].Add(minute); u.After(until) {
			until = u
		}
	}
	if !until.IsZero() {
		return &provider.RateLimitError{Until: until, Err: errBudget}
	}
	return nil
}

// hold refuses every request until wait from now, and forgets the write
// sent at sent (not zero) that GitHub refused: it is not in GitHub's
// windows.
func (t *limitTransport) hold(wait time.Duration, sent time.Time) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	until := t.clock.Now().Add(wait)
	if until.After(t.until) {
		t.until = until
	}
	if !sent.IsZero() {
		for i := len(t.writes) - 1; i >= 0; i-- {
			if t.writes[i].Equal(sent) {
				t.writes = append(t.writes[:i], t.writes[i+1:]...)
				break
			}
		}
	}
	return t.until
}

// inWindow counts the times of ts (oldest first) within d before now.
func inWindow(ts []time.Time, now time.Time, d time.Duration) int {
	n := 0
	for i := len(ts) - 1; i >= 0 && ts[i].After(now.Add(-d)); i-- {
		n++
	}
	return n
}

// secondaryLimit tells whether a 403 or 429 is GitHub's refusal for a
// secondary rate limit (a primary one says X-RateLimit-Remaining: 0 and is
// go-github's to read), and how long it asks to wait: its Retry-After,
// else secondaryWait. It leaves the body readable.
func secondaryLimit(resp *http.Response) (time.Duration, bool) {
	if resp.Header.Get("X-RateLimit-Remaining") == "0" {
		return 0, false
	}
	wait := secondaryWait
	s, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if err == nil && s >= 0 {
		wait = time.Duration(s) * time.Second
	}
	if resp.StatusCode == http.StatusTooManyRequests || err == nil {
		return wait, true
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return wait, strings.Contains(strings.ToLower(string(body)), "secondary rate limit")
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}
