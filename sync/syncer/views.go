// Views: what the read API shows of environments and applications.

package syncer

import (
	"context"
	"maps"
	"slices"
	"sort"
	"strconv"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/internal/redact"
	"github.com/petri-dev/petri/sync/render"
)

// Environment is the read API's view of one environment.
type Environment struct {
	Name        string `json:"name"`
	Application string `json:"application"`
	Repository  string `json:"repository"`
	PullRequest int    `json:"pullRequest"`
	Branch      string `json:"branch,omitempty"`
	SHA         string `json:"sha,omitempty"`
	URL         string `json:"url,omitempty"`
	PRURL       string `json:"pullRequestURL,omitempty"`
	Namespace   string `json:"namespace,omitempty"`
	// Cluster is the WorkloadCluster the environment runs in, or
	// render.ClusterManagement, or render.ClusterPending before the
	// operator placed it.
	Cluster    string            `json:"cluster"`
	Phase      string            `json:"phase"`
	Detail     string            `json:"detail,omitempty"`
	Waiting    string            `json:"waiting,omitempty"`
	Error      string            `json:"error,omitempty"`
	Components []ComponentState  `json:"components"`
	Labels     map[string]string `json:"labels,omitempty"`
	Created    time.Time         `json:"created"`
}

// ComponentState is one component in the read API.
type ComponentState struct {
	Name      string `json:"name"`
	Chart     string `json:"chart"`
	Version   string `json:"version"`
	Phase     string `json:"phase"`
	LastError string `json:"lastError,omitempty"`
}

// Environments lists the environments sync wrote, from the cache.
func (s *Syncer) Environments(ctx context.Context) ([]Environment, error) {
	var envs petriv1.EphemeralEnvironmentList
	if err := s.cache.List(ctx, &envs, client.InNamespace(s.opts.Namespace)); err != nil {
		return nil, err
	}
	out := make([]Environment, 0, len(envs.Items))
	for i := range envs.Items {
		e := &envs.Items[i]
		if !render.Owned(e.Labels) {
			continue
		}
		phase, detail := render.EnvState(e)
		v := Environment{
			Name: e.Name, Application: e.Labels[render.LabelApplication], Repository: e.Annotations[render.AnnotationRepository],
			URL: e.Annotations[render.AnnotationURL], Namespace: e.Status.TargetNamespace, Cluster: render.Cluster(e), Phase: phase, Detail: redact.String(detail),
			Created: e.CreationTimestamp.Time,
		}
		v.PullRequest, _ = strconv.Atoi(e.Labels[render.LabelPullRequest])
		if src := e.Spec.Source; src != nil {
			v.Branch, v.SHA, v.PRURL = src.Branch, src.SHA, src.URL
		}
		status := map[string]petriv1.ComponentStatus{}
		for _, c := range e.Status.Components {
			status[c.Name] = c
		}
		for _, c := range e.Spec.Components {
			p := string(status[c.Name].Phase)
			if p == "" {
				p = string(petriv1.ComponentPending)
			}
			v.Components = append(v.Components, ComponentState{Name: c.Name, Chart: c.Chart.Name, Version: c.Chart.Version, Phase: p, LastError: redact.String(status[c.Name].LastError)})
		}
		s.mu.Lock()
		rs := s.repos[render.RepositoryKey(e.Annotations)]
		s.mu.Unlock()
		if rs != nil {
			rs.mu.Lock()
			if st := rs.prs[v.PullRequest][v.Application]; st != nil {
				v.Waiting, v.Error = redact.String(st.Waiting), redact.String(st.Error)
			}
			rs.mu.Unlock()
		}
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Application is the read API's view of one application or broken file.
type Application struct {
	Name          string    `json:"name"`
	File          string    `json:"file"`
	Repository    string    `json:"repository,omitempty"`
	State         string    `json:"state"`
	Errors        []string  `json:"errors,omitempty"`
	LastReconcile time.Time `json:"lastReconcile,omitzero"`
	LastError     string    `json:"lastError,omitempty"`
	KeptUnknown   []string  `json:"keptUnknown,omitempty"`
}

// Applications reports every application of the current config revision and
// every broken file, whose environments are left as they were.
func (s *Syncer) Applications() (revision string, apps []Application) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cfg == nil {
		return "", nil
	}
	for _, a := range s.cfg.Applications {
		v := Application{Name: a.Name, File: a.File, Repository: a.Repository, State: "Active"}
		if st := s.appStatus[a.Name]; st != nil {
			v.LastReconcile, v.LastError, v.KeptUnknown = st.LastReconcile, redact.String(st.LastError), st.Kept
			if st.LastError != "" {
				v.State = "Degraded"
			}
		}
		apps = append(apps, v)
	}
	byFile := map[string][]string{}
	for _, e := range s.cfg.Errors {
		byFile[e.File] = append(byFile[e.File], redact.String(e.Error()))
	}
	for _, f := range slices.Sorted(maps.Keys(byFile)) {
		apps = append(apps, Application{Name: s.cfg.BrokenFiles[f], File: f, State: "ConfigError", Errors: byFile[f]})
	}
	return s.cfg.Revision, apps
}
