package syncer

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/sync/config"
	"github.com/petri-dev/petri/sync/provider"
	"github.com/petri-dev/petri/sync/render"
)

var planNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func readyEnv(sha string) *petriv1.EphemeralEnvironment {
	e := &petriv1.EphemeralEnvironment{ObjectMeta: metav1.ObjectMeta{Name: "shop-pr-1", Generation: 1,
		CreationTimestamp: metav1.NewTime(planNow.Add(-48 * time.Hour))}}
	e.Spec.Source = &petriv1.Source{SHA: sha}
	e.Status.ObservedGeneration = 1
	e.Status.Conditions = []metav1.Condition{{Type: petriv1.ConditionReady, Status: metav1.ConditionTrue, ObservedGeneration: 1}}
	return e
}

// advance moves a pull request's lifecycle state on to now; each case is
// what the pass stores before its plan.
func TestAdvanceMovesTheLifecycleOn(t *testing.T) {
	app := &config.Application{Name: "shop", TTL: &config.Duration{Duration: time.Hour}}
	pr := provider.PullRequest{Number: 1, State: "open", HeadSHA: "new"}
	ready := func(sha string, at time.Time) render.State {
		return render.State{ActiveSHA: "new", Apps: map[string]*render.AppState{"shop": {ReadySHA: sha, ReadyAt: at}}}
	}
	cases := []struct {
		name        string
		st, saved   render.State
		pr          provider.PullRequest
		env         *petriv1.EphemeralEnvironment
		wantPersist bool
		wantExpired []string
		check       func(t *testing.T, st render.State)
	}{
		{name: "a push is activity", st: render.State{ActiveSHA: "old"}, pr: pr, check: func(t *testing.T, st render.State) {
			assert.Equal(t, "new", st.ActiveSHA)
			assert.Equal(t, planNow, st.ActiveAt)
		}},
		{name: "the first Ready of the head starts the ttl", st: render.State{ActiveSHA: "new"}, pr: pr, env: readyEnv("new"), check: func(t *testing.T, st render.State) {
			assert.Equal(t, "new", st.Apps["shop"].ReadySHA)
			assert.Equal(t, planNow, st.Apps["shop"].ReadyAt)
		}},
		{name: "a ttl that is up expires, to be stored", st: ready("new", planNow.Add(-2*time.Hour)), pr: pr, env: readyEnv("new"),
			wantPersist: true, wantExpired: []string{"shop"}, check: func(t *testing.T, st render.State) {
				assert.Equal(t, "new", st.Apps["shop"].ExpiredSHA)
			}},
		{name: "the keep label suspends expiry", st: ready("new", planNow.Add(-2*time.Hour)),
			pr: provider.PullRequest{Number: 1, State: "open", HeadSHA: "new", Labels: []string{config.DefaultKeepLabel}}, env: readyEnv("new"),
			check: func(t *testing.T, st render.State) { assert.Empty(t, st.Apps["shop"].ExpiredSHA) }},
		{name: "an expiry not stored yet is stored again",
			st: render.State{ActiveSHA: "new", Apps: map[string]*render.AppState{"shop": {ReadySHA: "new", ReadyAt: planNow.Add(-2 * time.Hour), ExpiredSHA: "new"}}},
			pr: pr, env: readyEnv("new"), wantPersist: true},
		{name: "a new head brings an expired environment back",
			st: render.State{ActiveSHA: "old", Apps: map[string]*render.AppState{"shop": {ReadySHA: "old", ExpiredSHA: "old"}}}, pr: pr,
			check: func(t *testing.T, st render.State) { assert.Empty(t, st.Apps["shop"].ExpiredSHA) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			envs := map[string]*petriv1.EphemeralEnvironment{}
			if c.env != nil {
				envs["shop"] = c.env
			}
			before := c.st.Clone()
			st, persist, expired := advance(c.st, c.saved, []*config.Application{app}, c.pr, envs, planNow)
			assert.Equal(t, c.wantPersist, persist)
			assert.Equal(t, c.wantExpired, expired)
			assert.Equal(t, before, c.st, "the state passed in is not changed")
			if c.check != nil {
				c.check(t, st)
			}
		})
	}
}

// The plan puts an environment idle for its sleepAfter to sleep, and asks
// to look again when a later expiry, warning or sleep is due.
func TestDecideChoosesIdleEnvironmentsAndTheNextLook(t *testing.T) {
	app := &config.Application{Name: "shop", TTL: &config.Duration{Duration: 4 * time.Hour}, SleepAfter: &config.Duration{Duration: time.Hour}}
	pr := provider.PullRequest{Number: 1, State: "open", HeadSHA: "new"}
	o := &observation{repo: "acme/shop", apps: []*config.Application{app}, open: []provider.PullRequest{pr},
		openBy: map[int]provider.PullRequest{1: pr}, closed: map[int]provider.PullRequest{}, unknown: map[int]bool{},
		envs: map[string]map[int]*petriv1.EphemeralEnvironment{"shop": {1: readyEnv("new")}}}
	st := func(active time.Time) map[int]render.State {
		return map[int]render.State{1: {ActiveSHA: "new", ActiveAt: active, Apps: map[string]*render.AppState{"shop": {ReadySHA: "new", ReadyAt: planNow.Add(-time.Hour)}}}}
	}

	p := decide(o, nil, st(planNow.Add(-2*time.Hour)), planNow)
	if assert.Len(t, p.sleep, 1, "idle for two hours, sleepAfter one") {
		assert.Equal(t, "shop-pr-1", p.sleep[0].env.Name)
	}
	assert.Contains(t, p.again, planNow.Add(3*time.Hour), "looked at again when it expires")
	assert.Equal(t, planNow.Add(3*time.Hour-render.WarnBefore(4*time.Hour)), p.warn[1], "its warning is posted when due")

	p = decide(o, nil, st(planNow.Add(-10*time.Minute)), planNow)
	assert.Empty(t, p.sleep, "active ten minutes ago")
	assert.Contains(t, p.again, planNow.Add(50*time.Minute), "looked at again when it may sleep")

	o.unknown[1] = true
	p = decide(o, nil, st(planNow.Add(-2*time.Hour)), planNow)
	assert.Empty(t, p.sleep, "nothing is done to a pull request whose state is unknown")
	if assert.Len(t, p.apps, 1) {
		assert.Empty(t, p.apps[0].Apply, "nor is it written")
	}
}
