// Who added a label: GitLab's resource label events of a merge request
// (provider.LabelHistory).

package gitlab

import (
	"context"
	"fmt"

	gl "gitlab.com/gitlab-org/api/client-go"
)

// LabelAdder reads the merge request's resource label events, oldest
// first, and returns the username of the last that added the label.
func (p *Provider) LabelAdder(ctx context.Context, repository string, number int, label string) (string, error) {
	pid, err := project(repository)
	if err != nil {
		return "", err
	}
	opts := &gl.ListLabelEventsOptions{ListOptions: gl.ListOptions{PerPage: pageSize}}
	adder := ""
	for {
		if err := p.before(); err != nil {
			return "", err
		}
		events, resp, err := p.client.ResourceLabelEvents.ListMergeRequestsLabelEvents(pid, int64(number), opts, gl.WithContext(ctx))
		if err := p.after(resp, err); err != nil {
			return "", fmt.Errorf("label events of %s!%d: %w", repository, number, err)
		}
		for _, e := range events {
			if e.Action == "add" && e.Label.Name == label {
				adder = e.User.Username
			}
		}
		if resp.NextPage == 0 || len(events) == 0 {
			return adder, nil
		}
		opts.Page = resp.NextPage
	}
}
