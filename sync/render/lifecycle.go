package render

// The lifecycle of an environment on a pull request: the commands people
// write in comments, and the state sync keeps in a hidden marker of its own
// comment (when the ttl started, what expired, the last command handled),
// so that a restarted sync or a new leader carries on where the last one
// stopped.

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

// Annotations on an EphemeralEnvironment through which sync asks the
// operator to act (api/v1alpha1 documents what the operator does with
// them). sync writes each with server-side apply under a field manager of
// its own (FieldManager + "-" + the annotation's name after the slash), so
// it owns exactly the annotations it set and nothing a person set with
// kubectl.
const (
	// AnnotationSleepRequested is an RFC 3339 time: a request to sleep.
	AnnotationSleepRequested = petriv1.AnnotationSleepRequested
	// AnnotationWakeRequested is an RFC 3339 time: a request to wake.
	AnnotationWakeRequested = petriv1.AnnotationWakeRequested
	// AnnotationRedeploy is any new value: deploy every component again.
	AnnotationRedeploy = petriv1.AnnotationRedeploy
)

// PhaseSleeping is the status.phase of an environment the operator has put
// to sleep.
const PhaseSleeping = string(petriv1.EnvironmentSleeping)

// Command verbs.
const (
	CommandRedeploy = "redeploy"
	CommandSleep    = "sleep"
	CommandWake     = "wake"
	CommandKeep     = "keep"
	CommandExtend   = "extend"
)

// CommandHelp lists the commands for people.
const CommandHelp = "`/petri redeploy`, `/petri sleep`, `/petri wake`, `/petri keep`, `/petri extend <duration>`"

// maxExtend bounds one /petri extend; /petri keep is the way to keep an
// environment for good.
const maxExtend = 90 * 24 * time.Hour

// Command is one command read from a comment.
type Command struct {
	Verb string
	// Duration is the argument of extend.
	Duration time.Duration
	// Text is the command's line as written, shortened, for the comment.
	Text string
}

// commandLine returns the first line of a comment that starts with /petri
// (leading spaces allowed); false when there is none.
func commandLine(body string) (string, bool) {
	for line := range strings.SplitSeq(body, "\n") {
		line = strings.TrimSpace(line)
		rest, ok := strings.CutPrefix(line, "/petri")
		if ok && (rest == "" || rest[0] == ' ' || rest[0] == '\t') {
			return line, true
		}
	}
	return "", false
}

// HasCommand reports whether a comment carries a command: a line that
// starts with /petri.
func HasCommand(body string) bool {
	_, ok := commandLine(body)
	return ok
}

// ErrNoCommand is returned by ParseCommand for a comment without a /petri
// line.
var ErrNoCommand = errors.New("no /petri command")

// ParseCommand reads the first /petri line of a comment. An unknown verb or
// a bad argument is an error that says what is wrong, for the reply.
func ParseCommand(body string) (Command, error) {
	line, ok := commandLine(body)
	if !ok {
		return Command{}, ErrNoCommand
	}
	// The line goes into sync's comment (and so do the errors that quote
	// it): only plain characters, so that it can neither format nor hide
	// anything there.
	line = strings.Map(func(r rune) rune {
		if r < ' ' || strings.ContainsRune("<>`|\\*_[]", r) {
			return -1
		}
		return r
	}, line)
	text := line
	if r := []rune(text); len(r) > 60 {
		text = string(r[:59]) + "…"
	}
	fields := strings.Fields(line)[1:]
	cmd := Command{Text: text}
	if len(fields) == 0 {
		return cmd, fmt.Errorf("no command given; the commands are %s", CommandHelp)
	}
	cmd.Verb = strings.ToLower(fields[0])
	args := fields[1:]
	switch cmd.Verb {
	case CommandRedeploy, CommandSleep, CommandWake, CommandKeep:
		if len(args) > 0 {
			return cmd, fmt.Errorf("`/petri %s` takes no argument", cmd.Verb)
		}
	case CommandExtend:
		if len(args) != 1 {
			return cmd, errors.New("`/petri extend` needs one duration, such as `/petri extend 24h` or `/petri extend 3d`")
		}
		d, err := ParseDuration(args[0])
		if err != nil {
			return cmd, err
		}
		cmd.Duration = d
	default:
		return cmd, fmt.Errorf("unknown command %q; the commands are %s", cmd.Verb, CommandHelp)
	}
	return cmd, nil
}

// ParseDuration reads a positive duration of at most 90 days: Go's syntax
// (90m, 24h, 1h30m) or whole days (3d).
func ParseDuration(s string) (time.Duration, error) {
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil {
			return 0, fmt.Errorf("%q is not a duration such as 24h, 90m or 3d", s)
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, fmt.Errorf("%q is not a duration such as 24h, 90m or 3d", s)
		}
	}
	if d <= 0 || d > maxExtend {
		return 0, fmt.Errorf("%q must be more than nothing and at most 90 days; `/petri keep` keeps an environment for good", s)
	}
	return d, nil
}

// State is what sync remembers of one pull request across restarts and
// leaders, kept in the hidden marker of its comment.
type State struct {
	// LastCommand is the id of the newest command comment handled
	// (accepted or refused); no comment at or below it is acted on again.
	LastCommand int64 `json:"lastCommand,omitempty"`
	// Notes are the replies to the latest commands, oldest first.
	Notes []string `json:"notes,omitempty"`
	// ActiveSHA and ActiveAt are the last push (a head commit first seen)
	// or command: sleepAfter counts from ActiveAt.
	ActiveSHA string    `json:"activeSHA,omitempty"`
	ActiveAt  time.Time `json:"activeAt,omitzero"`
	// Kept: /petri keep suspended expiry.
	Kept bool `json:"kept,omitempty"`
	// MergeGroups are the commits of the merge groups waiting for the
	// status of an application in mergeQueue environment mode, newest
	// last, at most MaxMergeGroups.
	MergeGroups []string `json:"mergeGroups,omitempty"`
	// Apps holds what belongs to one application's environment.
	Apps map[string]*AppState `json:"apps,omitempty"`
}

// MaxMergeGroups bounds the merge groups remembered for a pull request: a
// pull request is in one merge group at a time, and a group whose
// destroyed event never came is forgotten once five newer ones were.
const MaxMergeGroups = 5

// AddMergeGroup remembers a merge group's commit, forgetting the oldest
// beyond MaxMergeGroups; false when it was remembered already.
func (s *State) AddMergeGroup(sha string) bool {
	if slices.Contains(s.MergeGroups, sha) {
		return false
	}
	s.MergeGroups = append(s.MergeGroups, sha)
	if len(s.MergeGroups) > MaxMergeGroups {
		s.MergeGroups = slices.Clone(s.MergeGroups[len(s.MergeGroups)-MaxMergeGroups:])
	}
	return true
}

// DropMergeGroup forgets a merge group; false when it was not remembered.
func (s *State) DropMergeGroup(sha string) bool {
	i := slices.Index(s.MergeGroups, sha)
	if i < 0 {
		return false
	}
	s.MergeGroups = slices.Delete(slices.Clone(s.MergeGroups), i, i+1)
	if len(s.MergeGroups) == 0 {
		s.MergeGroups = nil
	}
	return true
}

// AppState is the lifecycle of one application's environment.
type AppState struct {
	// ReadySHA is the head commit whose first Ready, at ReadyAt, started
	// the ttl.
	ReadySHA string    `json:"readySHA,omitempty"`
	ReadyAt  time.Time `json:"readyAt,omitzero"`
	// ExtendedUntil is the expiry /petri extend asked for.
	ExtendedUntil time.Time `json:"extendedUntil,omitzero"`
	// ExpiredSHA is the head commit at which the environment expired, at
	// ExpiredAt; it is not written again for that commit.
	ExpiredSHA string    `json:"expiredSHA,omitempty"`
	ExpiredAt  time.Time `json:"expiredAt,omitzero"`
	// Deployment is the GitHub deployment of DeploymentSHA and
	// DeploymentState the last status posted on it.
	Deployment      int64  `json:"deployment,omitempty"`
	DeploymentSHA   string `json:"deploymentSHA,omitempty"`
	DeploymentState string `json:"deploymentState,omitempty"`
}

// MaxNotes bounds the command replies kept in the comment.
const MaxNotes = 5

// App returns the state of an application, creating it.
func (s *State) App(name string) *AppState {
	if s.Apps == nil {
		s.Apps = map[string]*AppState{}
	}
	a := s.Apps[name]
	if a == nil {
		a = &AppState{}
		s.Apps[name] = a
	}
	return a
}

// Note adds a reply to a command, keeping the latest MaxNotes.
func (s *State) Note(text string) {
	s.Notes = append(s.Notes, text)
	if len(s.Notes) > MaxNotes {
		s.Notes = s.Notes[len(s.Notes)-MaxNotes:]
	}
}

// Clone copies a state deeply.
func (s State) Clone() State {
	out := s
	out.Notes = append([]string(nil), s.Notes...)
	out.MergeGroups = slices.Clone(s.MergeGroups)
	out.Apps = nil
	for k, v := range s.Apps {
		if out.Apps == nil {
			out.Apps = map[string]*AppState{}
		}
		c := *v
		out.Apps[k] = &c
	}
	return out
}

// stateOpen starts the marker; JSON escapes '<' and '>' in strings, so
// the marker's end cannot appear inside it.
const (
	stateOpen  = "<!-- petri:state "
	stateClose = " -->"
)

// Marker is the hidden line that carries the state in the comment.
func (s State) Marker() string {
	raw, err := json.Marshal(s)
	if err != nil {
		return ""
	}
	return stateOpen + string(raw) + stateClose
}

// ParseState reads the state from the body of sync's comment; false when
// there is no readable marker.
func ParseState(body string) (State, bool) {
	i := strings.LastIndex(body, stateOpen)
	if i < 0 {
		return State{}, false
	}
	rest := body[i+len(stateOpen):]
	j := strings.Index(rest, stateClose)
	if j < 0 {
		return State{}, false
	}
	var s State
	if err := json.Unmarshal([]byte(rest[:j]), &s); err != nil {
		return State{}, false
	}
	return s, true
}

// ExpiresAt is when an application's environment expires: ttl after it
// first became Ready for the head commit, or the extension when that is
// later. Zero when it does not expire (no ttl) or its clock has not started
// (the head commit was never Ready).
func (a *AppState) ExpiresAt(ttl time.Duration, head string) time.Time {
	if a == nil || ttl <= 0 || a.ReadySHA == "" || a.ReadySHA != head || a.ReadyAt.IsZero() {
		return time.Time{}
	}
	t := a.ReadyAt.Add(ttl)
	if a.ExtendedUntil.After(t) {
		t = a.ExtendedUntil
	}
	return t
}

// Extend moves the expiry d past the current one (or past now, when it is
// already past or has not started).
func (a *AppState) Extend(ttl time.Duration, head string, d time.Duration, now time.Time) {
	from := a.ExpiresAt(ttl, head)
	if from.Before(now) {
		from = now
	}
	a.ExtendedUntil = from.Add(d)
}

// Revive forgets an expiry: the environment is written again, and its ttl
// starts at its next Ready.
func (a *AppState) Revive() {
	a.ExpiredSHA, a.ExpiredAt = "", time.Time{}
	a.ReadySHA, a.ReadyAt = "", time.Time{}
}

// WarnBefore is how long before its expiry the comment warns: a quarter of
// the ttl, at most an hour.
func WarnBefore(ttl time.Duration) time.Duration {
	return min(ttl/4, time.Hour)
}

// FormatDuration is how durations appear in the comment: 72h, 1h30m, 90s,
// without Go's trailing zero units.
func FormatDuration(d time.Duration) string {
	out := d.String()
	if strings.HasSuffix(out, "m0s") {
		out = strings.TrimSuffix(out, "0s")
	}
	if strings.HasSuffix(out, "h0m") {
		out = strings.TrimSuffix(out, "0m")
	}
	return out
}

// FormatTime is how times appear in the comment: to the second, in UTC.
func FormatTime(t time.Time) string {
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}
