package render_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/sync/render"
)

func TestParseCommand(t *testing.T) {
	tests := []struct {
		body     string
		verb     string
		duration time.Duration
		err      string
	}{
		{body: "/petri redeploy", verb: "redeploy"},
		{body: "Thanks!\n  /petri sleep  \nbye", verb: "sleep"},
		{body: "/petri WAKE", verb: "wake"},
		{body: "/petri keep", verb: "keep"},
		{body: "/petri extend 24h", verb: "extend", duration: 24 * time.Hour},
		{body: "/petri extend 3d", verb: "extend", duration: 72 * time.Hour},
		{body: "/petri extend 1h30m", verb: "extend", duration: 90 * time.Minute},
		{body: "/petri extend", verb: "extend", err: "needs one duration"},
		{body: "/petri extend soon", verb: "extend", err: `"soon" is not a duration`},
		{body: "/petri extend -2h", verb: "extend", err: "must be more than nothing"},
		{body: "/petri extend 1000d", verb: "extend", err: "at most 90 days"},
		{body: "/petri sleep now", verb: "sleep", err: "takes no argument"},
		{body: "/petri destroy", verb: "destroy", err: `unknown command "destroy"`},
		{body: "/petri", err: "no command given"},
	}
	for _, tt := range tests {
		t.Run(tt.body, func(t *testing.T) {
			assert.True(t, render.HasCommand(tt.body))
			c, err := render.ParseCommand(tt.body)
			if tt.err != "" {
				assert.ErrorContains(t, err, tt.err)
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, tt.verb, c.Verb)
			assert.Equal(t, tt.duration, c.Duration)
		})
	}
	for _, body := range []string{"", "looks good", "/petrify everything", "see `/petri wake`", "x /petri sleep"} {
		assert.False(t, render.HasCommand(body), body)
		_, err := render.ParseCommand(body)
		assert.ErrorIs(t, err, render.ErrNoCommand, body)
	}
	// What a person wrote cannot format or hide anything in sync's comment.
	c, err := render.ParseCommand("/petri <!-- `x` | **y** -->")
	assert.Error(t, err)
	for _, bad := range []string{"<", ">", "`", "|", "*"} {
		assert.NotContains(t, c.Text, bad)
	}
	assert.Contains(t, err.Error(), `unknown command "!--"`, "the quoted word is cleaned too")
}

func TestStateMarkerRoundTrip(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	st := render.State{LastCommand: 42, ActiveSHA: "abc", ActiveAt: now, Kept: true}
	st.App("shop").ExpiredSHA = "abc"
	st.App("shop").ExpiredAt = now
	st.App("shop").Deployment = 7
	st.Note("a note with --> and <!-- inside")
	body := render.Comment([]render.PRState{{Application: "shop", ExpiredSHA: "abc", ExpiredAt: now, TTL: time.Hour, KeepLabel: "petri/keep"}}, st)
	lines := strings.Split(strings.TrimSpace(body), "\n")
	marker := lines[len(lines)-1]
	assert.True(t, strings.HasPrefix(marker, "<!-- petri:state {"), marker)
	assert.Equal(t, 1, strings.Count(marker, "-->"), "nothing inside the state closes its marker")
	got, ok := render.ParseState(body)
	require.True(t, ok)
	assert.Equal(t, st, got)

	// The last marker wins: a state quoted earlier in the body is not read.
	fake := render.State{LastCommand: 99999}
	got, ok = render.ParseState(fake.Marker() + "\n" + body)
	require.True(t, ok)
	assert.Equal(t, int64(42), got.LastCommand)

	_, ok = render.ParseState("<!-- petri-sync -->\nno state")
	assert.False(t, ok)
	_, ok = render.ParseState("<!-- petri:state {broken -->")
	assert.False(t, ok)

	for range 2 * render.MaxNotes {
		st.Note("n")
	}
	assert.Len(t, st.Notes, render.MaxNotes, "notes are bounded")
}

func TestExpiry(t *testing.T) {
	ready := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	a := &render.AppState{ReadySHA: "abc", ReadyAt: ready}
	assert.Equal(t, ready.Add(3*time.Hour), a.ExpiresAt(3*time.Hour, "abc"))
	assert.True(t, a.ExpiresAt(3*time.Hour, "def").IsZero(), "a new head commit restarts the clock at its Ready")
	assert.True(t, a.ExpiresAt(0, "abc").IsZero(), "no ttl, no expiry")
	assert.True(t, (*render.AppState)(nil).ExpiresAt(time.Hour, "abc").IsZero())

	// Extending adds to the expiry, or to now when it has passed.
	a.Extend(3*time.Hour, "abc", time.Hour, ready.Add(time.Hour))
	assert.Equal(t, ready.Add(4*time.Hour), a.ExpiresAt(3*time.Hour, "abc"))
	a.Extend(3*time.Hour, "abc", time.Hour, ready.Add(10*time.Hour))
	assert.Equal(t, ready.Add(11*time.Hour), a.ExpiresAt(3*time.Hour, "abc"))
	// An extension outlives a push when it is later than the new clock.
	a.ReadySHA, a.ReadyAt = "def", ready.Add(time.Hour)
	assert.Equal(t, ready.Add(11*time.Hour), a.ExpiresAt(3*time.Hour, "def"))

	a.ExpiredSHA, a.ExpiredAt = "def", ready
	a.Revive()
	assert.Empty(t, a.ExpiredSHA)
	assert.True(t, a.ExpiresAt(3*time.Hour, "def").IsZero(), "a revived environment's clock starts at its next Ready")

	assert.Equal(t, 15*time.Minute, render.WarnBefore(time.Hour))
	assert.Equal(t, time.Hour, render.WarnBefore(72*time.Hour))
}

func TestLifecycleInCommentAndStatus(t *testing.T) {
	ready := env(1, 1, petriv1.EnvironmentReady, metav1.ConditionTrue)
	expires := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	base := render.PRState{Application: "shop", HeadSHA: "0123456789", Env: ready, TTL: 72 * time.Hour, KeepLabel: "petri/keep", ExpiresAt: expires}

	body := render.Comment([]render.PRState{base}, render.State{})
	assert.Contains(t, body, "- Expires: 2026-01-02 03:04:05 UTC (ttl 72h from the first deploy of its commit)")
	assert.NotContains(t, body, ":warning:")

	warn := base
	warn.ExpiryWarning = true
	body = render.Comment([]render.PRState{warn}, render.State{})
	assert.Contains(t, body, ":warning: **This environment expires at 2026-01-02 03:04:05 UTC.** To keep it, comment `/petri extend 24h` or `/petri keep`, or add the label `petri/keep`.")

	kept := warn
	kept.KeptBy = "the label `petri/keep`"
	body = render.Comment([]render.PRState{kept}, render.State{})
	assert.Contains(t, body, "- Expiry: suspended by the label `petri/keep`")
	assert.NotContains(t, body, ":warning:", "a kept environment is not warned about")

	notReady := base
	notReady.ExpiresAt = time.Time{}
	notReady.SleepAfter = 2 * time.Hour
	body = render.Comment([]render.PRState{notReady}, render.State{})
	assert.Contains(t, body, "- Expires: 72h after its commit is first ready")
	assert.Contains(t, body, "- Sleeps after 2h without a push or a command")

	expired := render.PRState{Application: "shop", HeadSHA: "0123456789", TTL: 72 * time.Hour, KeepLabel: "petri/keep", ExpiredSHA: "0123456789", ExpiredAt: expires}
	body = render.Comment([]render.PRState{expired}, render.State{Notes: []string{"`/petri keep` from @alice: accepted"}})
	assert.Contains(t, body, ":hourglass_flowing_sand: **Expired** at 2026-01-02 03:04:05 UTC: the environment of commit `0123456` was deleted 72h after it was deployed.")
	assert.Contains(t, body, "To bring it back, push a commit or comment `/petri wake`")
	assert.Contains(t, body, "#### Commands\n- `/petri keep` from @alice: accepted\n")
	st, ok := render.CommitStatus(expired)
	require.True(t, ok)
	assert.Equal(t, "success", st.State, "an expiry is no failure of the commit")
	assert.Equal(t, "Environment expired (ttl 72h); push or comment /petri wake to bring it back", st.Description)
	assert.Empty(t, st.TargetURL)

	asleep := env(1, 1, petriv1.EnvironmentSleeping, metav1.ConditionFalse)
	sleeping := render.PRState{Application: "shop", HeadSHA: "0123456789", Env: asleep, URL: "https://x"}
	phase, _ := render.EnvState(asleep)
	assert.Equal(t, "Sleeping", phase)
	body = render.Comment([]render.PRState{sleeping}, render.State{})
	assert.Contains(t, body, ":zzz: **Sleeping**: asleep: comment /petri wake or push a commit to wake it")
	st, ok = render.CommitStatus(sleeping)
	require.True(t, ok)
	assert.Equal(t, "success", st.State)
	assert.Contains(t, st.Description, "asleep")
	asleep.Status.Sleep = &petriv1.SleepStatus{Asleep: true, Since: &metav1.Time{Time: expires}}
	_, detail := render.EnvState(asleep)
	assert.Equal(t, "asleep since 2026-01-02 03:04:05 UTC: comment /petri wake or push a commit to wake it", detail)
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{72 * time.Hour: "72h", 90 * time.Minute: "1h30m", 6 * time.Second: "6s", 2 * time.Minute: "2m", time.Hour + time.Second: "1h0m1s"} {
		assert.Equal(t, want, render.FormatDuration(d))
	}
}
