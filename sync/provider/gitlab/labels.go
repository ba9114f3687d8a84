// Who added a label: GitLab's resource label events of a merge request
// (provider.LabelHistory).

package gitlab

import (
	"context"
	"fmt"

	gl "gitlab.com/gitlab-org/api/client-go"
)

// labels is the label history of merge requests (provider.LabelHistory).
type labels struct{ *api }

// LabelAdders reads the merge request's resource label events, oldest
// first, and returns the username of the last that added each label.
func (l *labels) LabelAdders(ctx context.Context, repository string, number int) (map[string]string, error) {
	pid, err := project(repository)
	if err != nil {
		return nil, err
	}
	opts := &gl.ListLabelEventsOptions{ListOptions: gl.ListOptions{PerPage: pageSize}}
	adders := map[string]string{}
	for {
		if err := l.before(); err != nil {
			return nil, err
		}
		events, resp, err := l.client.ResourceLabelEvents.ListMergeRequestsLabelEvents(pid, int64(number), opts, gl.WithContext(ctx))
		if err := l.after(resp, err); err != nil {
			return nil, fmt.Errorf("label events of %s!%d: %w", repository, number, err)
		}
		for _, e := range events {
			if e.Action == "add" && e.Label.Name != "" {
				adders[e.Label.Name] = e.User.Username
			}
		}
		if resp.NextPage == 0 || len(events) == 0 {
			return adders, nil
		}
		opts.Page = resp.NextPage
	}
}
