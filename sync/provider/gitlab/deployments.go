// The reporter's deployments, as GitLab Environments and Deployments: a
// deployment of the head commit to the environment (which GitLab creates
// with its first deployment), its status, the environment's URL as its
// external URL, and the environment stopped when its last deployment goes
// inactive.

package gitlab

import (
	"context"
	"fmt"
	"strings"

	gl "gitlab.com/gitlab-org/api/client-go"

	"github.com/petri-dev/petri/sync/provider"
)

// Deployment states sync posts (GitHub's names) and GitLab's.
const (
	deployInProgress = "in_progress"
	deploySuccess    = "success"
	deployFailure    = "failure"
	deployError      = "error"
	deployInactive   = "inactive"
)

// deployments is the reporter's deployments. A deployment's ref is the
// head ref of its commit's open merge request, as the merge requests were
// last listed.
type deployments struct {
	*api
	mrs *mergeRequests
}

// FindDeployment returns the newest deployment of sha to environment that
// sync's own identity (the token's user) created; 0 when there is none. A
// deployment someone else made to that environment (by hand, another
// tool) is theirs: sync never drives, deactivates or adopts it. GitLab
// lists deployments by environment, not by commit: they are read newest
// first until one of sha by sync's user is found.
func (dp *deployments) FindDeployment(ctx context.Context, repository, sha, environment string) (int64, error) {
	pid, err := project(repository)
	if err != nil {
		return 0, err
	}
	self, err := dp.Self(ctx)
	if err != nil {
		return 0, err
	}
	opts := &gl.ListProjectDeploymentsOptions{Environment: gl.Ptr(environment), OrderBy: gl.Ptr("id"), Sort: gl.Ptr("desc"),
		ListOptions: gl.ListOptions{PerPage: pageSize}}
	for {
		if err := dp.before(); err != nil {
			return 0, err
		}
		ds, resp, err := dp.client.Deployments.ListProjectDeployments(pid, opts, gl.WithContext(ctx))
		if err := dp.after(resp, err); err != nil {
			return 0, fmt.Errorf("list deployments of %s to %s: %w", repository, environment, err)
		}
		for _, d := range ds {
			if d.SHA == sha && d.User != nil && strings.EqualFold(d.User.Username, self) {
				return d.ID, nil
			}
		}
		if resp.NextPage == 0 || len(ds) == 0 {
			return 0, nil
		}
		opts.Page = resp.NextPage
	}
}

// CreateDeployment creates a running deployment of a commit to an
// environment, GitLab creating the environment with its first one. Its ref
// is the merge request's source branch (refs/merge-requests/<iid>/head for
// one from a fork) when the commit is the head of an open merge request
// last listed, else the commit itself. GitLab's deployments carry no
// description.
func (dp *deployments) CreateDeployment(ctx context.Context, repository string, d provider.Deployment) (int64, error) {
	pid, err := project(repository)
	if err != nil {
		return 0, err
	}
	if err := dp.before(); err != nil {
		return 0, err
	}
	dep, resp, err := dp.client.Deployments.CreateProjectDeployment(pid, &gl.CreateProjectDeploymentOptions{
		Environment: gl.Ptr(d.Environment), Ref: gl.Ptr(dp.mrs.refOf(repository, d.SHA)), SHA: gl.Ptr(d.SHA),
		Tag: gl.Ptr(false), Status: gl.Ptr(gl.DeploymentStatusRunning),
	}, gl.WithContext(ctx))
	if err := dp.after(resp, err); err != nil {
		return 0, fmt.Errorf("create deployment of %s to %s: %w", repository, d.Environment, err)
	}
	return dep.ID, nil
}

// SetDeploymentStatus brings a deployment to a state: in_progress is
// running, success success (and the environment's external URL becomes
// st.EnvironmentURL), failure and error failed. A deployment GitLab
// finished does not go back to running. inactive, where GitHub marks a
// deployment inactive, cancels the deployment if it is not finished and
// stops its environment when it is the environment's newest deployment
// (one superseded by a newer commit leaves the environment to the newer
// one). A status GitLab already has is not posted again.
func (dp *deployments) SetDeploymentStatus(ctx context.Context, repository string, id int64, st provider.DeploymentStatus) error {
	pid, err := project(repository)
	if err != nil {
		return err
	}
	if err := dp.before(); err != nil {
		return err
	}
	d, resp, err := dp.client.Deployments.GetProjectDeployment(pid, id, gl.WithContext(ctx))
	if err := dp.after(resp, err); err != nil {
		return fmt.Errorf("read deployment %d of %s: %w", id, repository, err)
	}
	var want gl.DeploymentStatusValue
	switch st.State {
	case deployInactive:
		if err := dp.deactivate(ctx, pid, d); err != nil {
			return fmt.Errorf("deactivate deployment %d of %s: %w", id, repository, err)
		}
		return nil
	case deployInProgress:
		want = gl.DeploymentStatusRunning
	case deploySuccess:
		want = gl.DeploymentStatusSuccess
	case deployFailure, deployError:
		want = gl.DeploymentStatusFailed
	default:
		return fmt.Errorf("deployment %d of %s: no GitLab status for %q", id, repository, st.State)
	}
	if d.Status != string(want) && (want != gl.DeploymentStatusRunning || !finished(d.Status)) {
		if err := dp.setDeployment(ctx, pid, id, want); err != nil {
			return fmt.Errorf("set status %s of deployment %d on %s: %w", want, id, repository, err)
		}
	}
	if want == gl.DeploymentStatusSuccess && st.EnvironmentURL != "" && d.Environment != nil && d.Environment.ExternalURL != st.EnvironmentURL {
		if err := dp.before(); err != nil {
			return err
		}
		_, resp, err := dp.client.Environments.EditEnvironment(pid, d.Environment.ID,
			&gl.EditEnvironmentOptions{ExternalURL: gl.Ptr(st.EnvironmentURL)}, gl.WithContext(ctx))
		if err := dp.after(resp, err); err != nil {
			return fmt.Errorf("set the url of environment %s of %s: %w", d.Environment.Name, repository, err)
		}
	}
	return nil
}

// finished tells whether a deployment's status is final.
func finished(status string) bool {
	switch status {
	case "success", "failed", "canceled", "skipped":
		return true
	}
	return false
}

func (dp *deployments) setDeployment(ctx context.Context, pid string, id int64, status gl.DeploymentStatusValue) error {
	if err := dp.before(); err != nil {
		return err
	}
	_, resp, err := dp.client.Deployments.UpdateProjectDeployment(pid, id,
		&gl.UpdateProjectDeploymentOptions{Status: gl.Ptr(status)}, gl.WithContext(ctx))
	return dp.after(resp, err)
}

// deactivate cancels a deployment not yet finished and stops its
// environment if it is the environment's newest deployment and the
// environment is not stopped yet.
func (dp *deployments) deactivate(ctx context.Context, pid string, d *gl.Deployment) error {
	if !finished(d.Status) {
		if err := dp.setDeployment(ctx, pid, d.ID, gl.DeploymentStatusCanceled); err != nil {
			return err
		}
	}
	if d.Environment == nil {
		return nil
	}
	if err := dp.before(); err != nil {
		return err
	}
	newest, resp, err := dp.client.Deployments.ListProjectDeployments(pid, &gl.ListProjectDeploymentsOptions{
		Environment: gl.Ptr(d.Environment.Name), OrderBy: gl.Ptr("id"), Sort: gl.Ptr("desc"),
		ListOptions: gl.ListOptions{PerPage: 1}}, gl.WithContext(ctx))
	if err := dp.after(resp, err); err != nil {
		return err
	}
	if len(newest) > 0 && newest[0].ID != d.ID {
		return nil
	}
	if err := dp.before(); err != nil {
		return err
	}
	env, resp, err := dp.client.Environments.GetEnvironment(pid, d.Environment.ID, gl.WithContext(ctx))
	if err := dp.after(resp, err); err != nil {
		return err
	}
	if env.State == "stopped" || env.State == "stopping" {
		return nil
	}
	if err := dp.before(); err != nil {
		return err
	}
	_, resp, err = dp.client.Environments.StopEnvironment(pid, env.ID, &gl.StopEnvironmentOptions{}, gl.WithContext(ctx))
	return dp.after(resp, err)
}
