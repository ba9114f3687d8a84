// Feedback: the commit status per application and the one comment on each
// pull request, driven by the feedback queue that environment changes and
// reconciles fill.

package syncer

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/sync/provider"
	"github.com/petri-dev/petri/sync/render"
)

func (s *Syncer) envChanged(o any) {
	if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	e, ok := o.(*petriv1.EphemeralEnvironment)
	if !ok || e.Spec.Source == nil {
		return
	}
	repo := strings.ToLower(e.Annotations[render.AnnotationRepository])
	n, _ := strconv.Atoi(e.Labels[render.LabelPullRequest])
	if repo == "" || n == 0 {
		return
	}
	s.feedback.Add(prKey{repo, n})
}

func (s *Syncer) processFeedback(ctx context.Context) bool {
	key, quit := s.feedback.Get()
	if quit {
		return false
	}
	defer s.feedback.Done(key)
	fctx, cancel := context.WithTimeout(ctx, s.opts.ReconcileTimeout)
	err := s.sendFeedback(fctx, key)
	cancel()
	var rle *provider.RateLimitError
	switch {
	case err == nil:
		s.feedback.Forget(key)
	case errors.As(err, &rle):
		s.feedback.Forget(key)
		s.feedback.AddAfter(key, time.Until(rle.Until)+time.Second)
	default:
		s.log.Error(err, "Feedback on pull request failed; retrying", "repository", key.Repo, "pullRequest", key.Number)
		s.feedback.AddRateLimited(key)
	}
	return true
}

// sendFeedback posts the commit status of each application and the one
// comment of the pull request, when they differ from what was posted.
func (s *Syncer) sendFeedback(ctx context.Context, key prKey) error {
	var envs petriv1.EphemeralEnvironmentList
	if err := s.cache.List(ctx, &envs, client.InNamespace(s.opts.Namespace), client.MatchingLabels{render.LabelPullRequest: strconv.Itoa(key.Number)}); err != nil {
		return err
	}
	s.mu.Lock()
	states := map[string]render.PRState{}
	closed := false
	if rs := s.repos[key.Repo]; rs != nil {
		for app, st := range rs.prs[key.Number] {
			states[app] = *st
		}
		closed = rs.closed[key.Number]
	}
	s.mu.Unlock()
	envFound := false
	for i := range envs.Items {
		e := &envs.Items[i]
		if !render.Owned(e.Labels) || !strings.EqualFold(e.Annotations[render.AnnotationRepository], key.Repo) {
			continue
		}
		envFound = true
		app := e.Labels[render.LabelApplication]
		st, ok := states[app]
		if !ok {
			st = render.PRState{Application: app, Repository: key.Repo, Number: key.Number, URL: e.Annotations[render.AnnotationURL]}
			if e.Spec.Source != nil {
				st.HeadSHA = e.Spec.Source.SHA
			}
		}
		st.Env = e
		st.Deleted = ""
		if st.URL == "" {
			st.URL = e.Annotations[render.AnnotationURL]
		}
		states[app] = st
	}
	if len(states) == 0 {
		return nil
	}
	var list []render.PRState
	var errs []error
	for _, app := range slices.Sorted(maps.Keys(states)) {
		st := states[app]
		list = append(list, st)
		cs, ok := render.CommitStatus(st)
		if !ok || st.HeadSHA == "" {
			continue
		}
		sk := statusKey{key.Repo, st.HeadSHA, cs.Context}
		s.mu.Lock()
		last, posted := s.statuses[sk]
		s.mu.Unlock()
		if posted && last == cs {
			continue
		}
		if err := s.opts.Provider.SetCommitStatus(ctx, key.Repo, st.HeadSHA, cs); err != nil {
			errs = append(errs, err)
			continue
		}
		s.mu.Lock()
		s.statuses[sk] = cs
		s.mu.Unlock()
	}
	worth := false
	for _, st := range list {
		if st.Env != nil || st.Waiting != "" || st.Error != "" || st.Deleted != "" {
			worth = true
		}
	}
	if worth {
		if err := s.opts.Provider.UpsertComment(ctx, key.Repo, key.Number, render.CommentMarker, render.Comment(list, render.State{})); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 && closed && !envFound {
		// The closed pull request's last word is posted and its
		// environments are gone: nothing more will be said about it.
		s.forgetPullRequest(key)
	}
	return errors.Join(errs...)
}
