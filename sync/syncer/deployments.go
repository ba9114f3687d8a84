// Deployments: with deployments: true, each environment is a GitHub
// deployment of its head commit to the environment petri/<app>-pr-<n>,
// whose statuses follow the environment (in_progress while it deploys,
// success with its URL, failure with the failing component, inactive when
// it is torn down or expired), so the pull request shows "View
// deployment". The deployment's id and its last status are kept in the
// pull request's state, so a restart neither creates a second deployment
// nor repeats a status.

package syncer

import (
	"context"
	"fmt"
	"strings"

	"github.com/petri-dev/petri/sync/config"
	"github.com/petri-dev/petri/sync/provider"
	"github.com/petri-dev/petri/sync/render"
)

// Deployment states sync posts.
const (
	deploymentInProgress = "in_progress"
	deploymentSuccess    = "success"
	deploymentFailure    = "failure"
	deploymentInactive   = "inactive"
)

// DeploymentEnvironment is the GitHub environment of an application's
// environment on a pull request.
func DeploymentEnvironment(app string, number int) string {
	return fmt.Sprintf("petri/%s-pr-%d", app, number)
}

// deployment brings the GitHub deployment of one application's environment
// in line with it. The caller holds the pull request's lock.
func (s *Syncer) deployment(ctx context.Context, key prKey, st render.PRState, life *prLife) error {
	s.mu.Lock()
	var app *config.Application
	if s.cfg != nil {
		app = s.cfg.Application(st.Application)
	}
	s.mu.Unlock()
	if app == nil || !app.Deployments || app.RepositoryKey() != key.Repo {
		return nil
	}
	envName := DeploymentEnvironment(app.Name, key.Number)
	have := render.AppState{}
	if a := life.current().Apps[app.Name]; a != nil {
		have = *a
	}

	// What the deployment should say now.
	var want provider.DeploymentStatus
	sha := ""
	switch {
	case st.Env == nil || st.Env.DeletionTimestamp != nil:
		if have.Deployment == 0 || have.DeploymentState == deploymentInactive {
			return nil
		}
		reason := "Environment deleted"
		if st.Deleted != "" {
			reason += ": " + st.Deleted
		}
		if st.Expired() || (st.Env == nil && st.ExpiredSHA != "") {
			reason = fmt.Sprintf("Environment expired (ttl %s)", render.FormatDuration(st.TTL))
		}
		want, sha = provider.DeploymentStatus{State: deploymentInactive, Description: reason}, have.DeploymentSHA
	case st.Env.Spec.Source == nil || st.Env.Spec.Source.SHA != st.HeadSHA || st.HeadSHA == "":
		// The head commit is not written yet (an artifact gate, a cap):
		// the deployment of the commit it has stays as it is.
		return nil
	default:
		sha = st.HeadSHA
		phase, detail := render.EnvState(st.Env)
		switch phase {
		case "Ready":
			want = provider.DeploymentStatus{State: deploymentSuccess, Description: "Environment ready", EnvironmentURL: st.URL}
		case "Failed":
			want = provider.DeploymentStatus{State: deploymentFailure, Description: "Deploy failed: " + detail}
		case render.PhaseSleeping:
			// Asleep, not gone: the deployment keeps what it said.
			if have.DeploymentSHA == sha && have.DeploymentState != "" {
				return nil
			}
			want = provider.DeploymentStatus{State: deploymentSuccess, Description: "Environment asleep", EnvironmentURL: st.URL}
		default:
			want = provider.DeploymentStatus{State: deploymentInProgress, Description: capitalise(detail)}
		}
	}

	id := have.Deployment
	if have.DeploymentSHA != sha {
		// A new head commit is a new deployment; the one before is
		// inactive (GitHub does not do that for transient environments).
		found, err := s.reporterOf(key.Repo).FindDeployment(ctx, pathOf(key.Repo), sha, envName)
		if err != nil {
			return err
		}
		if found == 0 {
			if found, err = s.reporterOf(key.Repo).CreateDeployment(ctx, pathOf(key.Repo), provider.Deployment{SHA: sha, Environment: envName,
				Description: fmt.Sprintf("Preview environment of %s for pull request #%d", app.Name, key.Number)}); err != nil {
				return err
			}
		}
		if have.Deployment != 0 && have.DeploymentState != deploymentInactive {
			if err := s.reporterOf(key.Repo).SetDeploymentStatus(ctx, pathOf(key.Repo), have.Deployment, provider.DeploymentStatus{
				State: deploymentInactive, Description: "Superseded by commit " + shortSHA(sha)}); err != nil {
				return err
			}
		}
		id = found
		life.change(func(st *render.State) {
			a := st.App(app.Name)
			a.Deployment, a.DeploymentSHA, a.DeploymentState = id, sha, ""
		})
		have.DeploymentState = ""
	}
	if have.DeploymentState == want.State {
		return nil
	}
	if err := s.reporterOf(key.Repo).SetDeploymentStatus(ctx, pathOf(key.Repo), id, want); err != nil {
		return err
	}
	life.change(func(st *render.State) { st.App(app.Name).DeploymentState = want.State })
	return nil
}

func capitalise(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
