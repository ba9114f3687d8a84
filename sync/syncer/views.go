// Views: what the read API shows of environments and applications.

package syncer

import (
	"context"
	"maps"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
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

// views answer the read API from sync's cache and memory; any replica
// serves them.
type views struct {
	cache     cache.Cache
	namespace string
	memory    *memory
	writer    *writer
	clock     clock.Clock
	log       logr.Logger
	// wakes is when the read API last wrote each environment's wake
	// request (by UID), for WakeEvery while the cache may not show it.
	wakes sync.Map
}

// environments lists the environments sync wrote, from the cache.
func (v *views) environments(ctx context.Context) ([]Environment, error) {
	var envs petriv1.EphemeralEnvironmentList
	if err := v.cache.List(ctx, &envs, client.InNamespace(v.namespace)); err != nil {
		return nil, err
	}
	out := make([]Environment, 0, len(envs.Items))
	for i := range envs.Items {
		e := &envs.Items[i]
		if !render.Owned(e.Labels) {
			continue
		}
		phase, detail := render.EnvState(e)
		ev := Environment{
			Name: e.Name, Application: e.Labels[render.LabelApplication], Repository: e.Annotations[render.AnnotationRepository],
			URL: e.Annotations[render.AnnotationURL], Namespace: e.Status.TargetNamespace, Cluster: render.Cluster(e), Phase: phase, Detail: redact.String(detail),
			Created: e.CreationTimestamp.Time,
		}
		ev.PullRequest, _ = strconv.Atoi(e.Labels[render.LabelPullRequest])
		if src := e.Spec.Source; src != nil {
			ev.Branch, ev.SHA, ev.PRURL = src.Branch, src.SHA, src.URL
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
			ev.Components = append(ev.Components, ComponentState{Name: c.Name, Chart: c.Chart.Name, Version: c.Chart.Version, Phase: p, LastError: redact.String(status[c.Name].LastError)})
		}
		if rs := v.memory.knownRepo(render.RepositoryKey(e.Annotations)); rs != nil {
			rs.mu.Lock()
			if st := rs.prs[ev.PullRequest][ev.Application]; st != nil {
				ev.Waiting, ev.Error = redact.String(st.Waiting), redact.String(st.Error)
			}
			rs.mu.Unlock()
		}
		out = append(out, ev)
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

// applications reports every application of the current config revision
// and every broken file, whose environments are left as they were.
func (m *memory) applications() (revision string, apps []Application) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cfg == nil {
		return "", nil
	}
	for _, a := range m.cfg.Applications {
		v := Application{Name: a.Name, File: a.File, Repository: a.Repository, State: "Active"}
		if st := m.appStatus[a.Name]; st != nil {
			v.LastReconcile, v.LastError, v.KeptUnknown = st.LastReconcile, redact.String(st.LastError), st.Kept
			if st.LastError != "" {
				v.State = "Degraded"
			}
		}
		apps = append(apps, v)
	}
	byFile := map[string][]string{}
	for _, e := range m.cfg.Errors {
		byFile[e.File] = append(byFile[e.File], redact.String(e.Error()))
	}
	for _, f := range slices.Sorted(maps.Keys(byFile)) {
		apps = append(apps, Application{Name: m.cfg.BrokenFiles[f], File: f, State: "ConfigError", Errors: byFile[f]})
	}
	return m.cfg.Revision, apps
}
