package chaos

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// The invariants judged from the history of Petri's Jobs and their pods the
// recorder keeps: NoHelmOverlap and NoDuplicateJob.

// helmOverlaps finds pairs of Helm operations on one release whose pods ran
// at the same time. Times have the API's 1-second resolution; an interval
// counts as overlapping only when one starts strictly before the other ends,
// so truncation can hide an overlap shorter than a second but never invents
// one. A pod deleted before it reported its end ends when its deletion was
// seen; a pod still running has not ended.
func (r *recorder) helmOverlaps(now time.Time) []Violation {
	r.mu.Lock()
	defer r.mu.Unlock()
	byRelease := map[string][]*podRecord{}
	for _, p := range r.pods {
		if p.start.IsZero() {
			continue
		}
		byRelease[p.release] = append(byRelease[p.release], p)
	}
	end := func(p *podRecord) time.Time {
		switch {
		case !p.end.IsZero():
			return p.end.Truncate(time.Second)
		case !p.deleted.IsZero():
			return p.deleted.Truncate(time.Second)
		}
		return now.Add(time.Hour)
	}
	envOf := map[string]string{}
	for _, e := range r.envs {
		for _, t := range e.targets {
			envOf[t] = e.name
		}
	}
	var out []Violation
	for rel, ps := range byRelease {
		ns, _, _ := strings.Cut(rel, "/")
		sort.Slice(ps, func(i, j int) bool { return ps[i].start.Before(ps[j].start) })
		for i := range ps {
			for j := i + 1; j < len(ps); j++ {
				a, b := ps[i], ps[j]
				if !b.start.Truncate(time.Second).Before(end(a)) {
					continue
				}
				if !a.start.Truncate(time.Second).Before(end(b)) {
					continue
				}
				out = append(out, Violation{Invariant: NoHelmOverlap, Key: "overlap/" + string(a.uid) + "/" + string(b.uid), Env: envOf[ns],
					Detail: fmt.Sprintf("release %s: %s (pod %s, %s-%s) and %s (pod %s, %s-%s) ran at once",
						rel, a.action, a.name, clock(a.start), clockEnd(a, now), b.action, b.name, clock(b.start), clockEnd(b, now))})
			}
		}
	}
	return out
}

func clock(t time.Time) string { return t.Local().Format("15:04:05") }

func clockEnd(p *podRecord, now time.Time) string {
	switch {
	case !p.end.IsZero():
		return clock(p.end)
	case !p.deleted.IsZero():
		return clock(p.deleted) + " (deleted)"
	}
	_ = now
	return "running"
}

// workActions are the Jobs that do a piece of work once per generation;
// verify Jobs, in contrast, run once per period.
var workActions = map[string]bool{"deploy": true, "undeploy": true, "bind": true, "provision": true, "deprovision": true}

// duplicateJobs finds work that got a second Job. A later Job for the same
// (owner, component, action, generation) is a duplicate unless the previous
// one had failed before it was created (a retry), or a fault removed one of
// the owner's Jobs or what it deployed in between (work done again).
func (r *recorder) duplicateJobs() []Violation {
	r.mu.Lock()
	defer r.mu.Unlock()
	byKey := map[string][]*jobRecord{}
	for _, j := range r.jobs {
		if !workActions[j.action] || j.owner == "" {
			continue
		}
		byKey[j.key] = append(byKey[j.key], j)
	}
	var out []Violation
	for _, js := range byKey {
		sort.Slice(js, func(i, j int) bool {
			if js[i].created.Equal(js[j].created) {
				return js[i].uid < js[j].uid
			}
			return js[i].created.Before(js[j].created)
		})
		for i := 1; i < len(js); i++ {
			prev, cur := js[i-1], js[i]
			if !prev.failed.IsZero() && !prev.failed.Truncate(time.Second).After(cur.created) {
				continue
			}
			if r.excused(cur.owner, prev.created.Truncate(time.Second), cur.created.Add(time.Second)) {
				continue
			}
			state := "still running"
			if !prev.succeeded.IsZero() && !prev.succeeded.After(cur.created) {
				state = "had succeeded"
			}
			out = append(out, Violation{Invariant: NoDuplicateJob, Key: "dup/" + string(cur.uid), Env: cur.environmentNameTag,
				Detail: fmt.Sprintf("environment %s: %s of %s at generation %s got Job %s (created %s) while Job %s (created %s) %s",
					cur.environmentNameTag, cur.action, cur.component, cur.generation, cur.name, clock(cur.created), prev.name, clock(prev.created), state)})
		}
	}
	return out
}

func (r *recorder) excused(owner types.UID, from, to time.Time) bool {
	for _, t := range r.excuses[owner] {
		if !t.Before(from) && !t.After(to) {
			return true
		}
	}
	return false
}
