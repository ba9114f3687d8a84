// Package render holds sync's pure functions: the name, labels and spec of
// the EphemeralEnvironment for an application and a pull request, the
// decision which environments to write, keep or delete, and the feedback
// posted on the pull request. Nothing here talks to a server.
package render

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/sync/config"
	"github.com/petri-dev/petri/sync/provider"
)

// Labels and annotations sync puts on what it writes. An object is sync's
// only when it carries LabelManagedBy=ManagedBy and LabelApplication.
const (
	FieldManager         = "petri-sync"
	ManagedBy            = "petri-sync"
	LabelApplication     = "petri.dev/application"
	LabelPullRequest     = "petri.dev/pull-request"
	AnnotationRepository = "petri.dev/repository"
	// AnnotationForge names the forge of the repository when it is not
	// GitHub (config.RepositoryKey); GitHub's environments carry none.
	AnnotationForge = "petri.dev/forge"
	AnnotationURL   = "petri.dev/url"
	// SharedWorkloadOwner is the LabelApplication value of shared workloads.
	SharedWorkloadOwner = "shared-workloads"
)

// EnvironmentName is DNS-safe and at most 52 characters: the application,
// the pull request number and a hash of (repository, number, application)
// so that no two applications or repositories can collide. repository is
// the repository's key (config.RepositoryKey): a GitHub repository's
// owner/name, so GitHub's names are what they always were, and the forge
// and path of any other, however long and deeply nested the path.
func EnvironmentName(app, repository string, number int) string {
	sum := sha256.Sum256([]byte(strings.ToLower(repository) + "#" + strconv.Itoa(number) + "@" + app))
	suffix := fmt.Sprintf("-pr-%d-%s", number, hex.EncodeToString(sum[:])[:6])
	prefix := config.Slug(app)
	if len(prefix)+len(suffix) > 52 {
		prefix = strings.TrimRight(prefix[:52-len(suffix)], "-")
	}
	return prefix + suffix
}

// Data is the template data of a pull request.
func Data(app *config.Application, pr provider.PullRequest) config.Data {
	short := pr.HeadSHA
	if len(short) > 7 {
		short = short[:7]
	}
	return config.Data{
		Application: app.Name,
		Repository:  pr.Repository,
		Environment: EnvironmentName(app.Name, config.RepositoryKey(app.ForgeName(), pr.Repository), pr.Number),
		Number:      pr.Number,
		SHA:         pr.HeadSHA,
		ShortSHA:    short,
		Branch:      inert(pr.HeadBranch),
		BranchSlug:  config.Slug(pr.HeadBranch),
		BaseBranch:  inert(pr.BaseBranch),
		Title:       inert(pr.Title),
		Author:      inert(pr.Author),
		Labels:      inertAll(pr.Labels),
		URL:         pr.URL,
	}
}

// templateDelims are Go template's (and so Helm's) delimiters, each with
// the text that stands for it in what a pull request's author wrote.
var templateDelims = strings.NewReplacer("{{", "{ {", "}}", "} }")

// inert is text a pull request's author chose (its title, branches, labels,
// the author's name) made inert for templates: sync renders it once, but a
// chart that runs tpl over a value fed from it would evaluate it again, as
// the deployer's identity ({{ lookup "v1" "Secret" ... }} reads the
// namespace's Secrets, {{ fail ... }} carries them into the status).
// Without a pair of braces there is no action to evaluate.
func inert(s string) string {
	if !strings.Contains(s, "{{") && !strings.Contains(s, "}}") {
		return s
	}
	// "{{{" would become "{ {{"; replace until no pair is left.
	for strings.Contains(s, "{{") || strings.Contains(s, "}}") {
		s = templateDelims.Replace(s)
	}
	return s
}

func inertAll(labels []string) []string {
	if labels == nil {
		return nil
	}
	out := make([]string, len(labels))
	for i, l := range labels {
		out[i] = inert(l)
	}
	return out
}

// URL renders the address shown to reviewers; empty when the application
// has none.
func URL(app *config.Application, pr provider.PullRequest) (string, error) {
	return config.Render("url", app.URL, Data(app, pr))
}

// Environment renders the EphemeralEnvironment for a pull request. versions
// maps component names to their resolved exact chart versions.
func Environment(app *config.Application, pr provider.PullRequest, namespace string, versions map[string]string) (*petriv1.EphemeralEnvironment, error) {
	data := Data(app, pr)
	url, err := URL(app, pr)
	if err != nil {
		return nil, fmt.Errorf("%s: url: %w", app.File, err)
	}
	ee := &petriv1.EphemeralEnvironment{
		TypeMeta: metav1.TypeMeta{APIVersion: petriv1.GroupVersion.String(), Kind: "EphemeralEnvironment"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      data.Environment,
			Namespace: namespace,
			Labels: map[string]string{
				petriv1.LabelManagedBy: ManagedBy,
				LabelApplication:       app.Name,
				LabelPullRequest:       strconv.Itoa(pr.Number),
			},
			Annotations: map[string]string{AnnotationRepository: strings.ToLower(pr.Repository)},
		},
		Spec: petriv1.EphemeralEnvironmentSpec{
			SharedWorkloads: slices.Clone(app.SharedWorkloads),
			Placement:       Placement(app.Placement),
			Source: &petriv1.Source{
				Repository:  pr.Repository,
				Branch:      pr.HeadBranch,
				SHA:         pr.HeadSHA,
				PullRequest: pr.Number,
				URL:         pr.URL,
			},
		},
	}
	if url != "" {
		ee.Annotations[AnnotationURL] = url
	}
	if f := app.ForgeName(); f != config.ForgeGitHub {
		ee.Annotations[AnnotationForge] = f
	}
	// No spec.ttl: sync expires its environments itself, from the first
	// Ready of the head commit, and remembers it (lifecycle.go); the
	// operator's spec.ttl is for environments written by hand.
	for i, c := range app.Components {
		v, ok := versions[c.Name]
		if !ok || !config.IsExactVersion(v) {
			return nil, fmt.Errorf("component %s: chart version %q is not resolved", c.Name, v)
		}
		comp := petriv1.Component{
			Name:      c.Name,
			Chart:     petriv1.ChartReference{Repository: c.Chart.Repository, Name: c.Chart.Name, Version: v},
			DependsOn: slices.Clone(c.DependsOn),
			Uses:      slices.Clone(c.Uses),
		}
		if c.Release.Wait != nil {
			comp.Release.Wait = new(*c.Release.Wait)
		}
		if c.Release.Timeout != nil {
			comp.Release.Timeout = &metav1.Duration{Duration: c.Release.Timeout.Duration}
		}
		if len(c.Values) > 0 {
			raw, err := json.Marshal(c.Values)
			if err != nil {
				return nil, fmt.Errorf("component %s: values: %w", c.Name, err)
			}
			comp.Values = &apiextensionsv1.JSON{Raw: raw}
		}
		ee.Spec.Components = append(ee.Spec.Components, comp)
		if len(c.PullRequestValues) > 0 {
			rendered, err := renderValues(fmt.Sprintf("components[%d].pullRequestValues", i), c.PullRequestValues, data)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", app.File, err)
			}
			raw, err := json.Marshal(rendered)
			if err != nil {
				return nil, err
			}
			if ee.Spec.Values == nil {
				ee.Spec.Values = map[string]apiextensionsv1.JSON{}
			}
			ee.Spec.Values[c.Name] = apiextensionsv1.JSON{Raw: raw}
		}
	}
	return ee, nil
}

// Placement is an application's placement as the API server stores it in
// spec.placement: the strategy defaulted as the CRD defaults it, and empty
// requests left out, so that an unchanged file compares equal to the
// stored environment and is not written again. nil stays nil: the
// management cluster.
func Placement(p *petriv1.Placement) *petriv1.Placement {
	if p == nil {
		return nil
	}
	out := p.DeepCopy()
	if out.Strategy == "" {
		out.Strategy = petriv1.PlacementLeastLoaded
	}
	if r := out.Requests; r != nil && r.CPU == nil && r.Memory == nil {
		out.Requests = nil
	}
	return out
}

func renderValues(path string, v any, data config.Data) (any, error) {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for _, k := range slices.Sorted(maps.Keys(x)) {
			r, err := renderValues(path+"."+k, x[k], data)
			if err != nil {
				return nil, err
			}
			out[k] = r
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			r, err := renderValues(fmt.Sprintf("%s[%d]", path, i), e, data)
			if err != nil {
				return nil, err
			}
			out[i] = r
		}
		return out, nil
	case string:
		s, err := config.Render(path, x, data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return s, nil
	}
	return v, nil
}

// SharedWorkload renders the SharedWorkload object of a config file with
// its resolved exact chart version.
func SharedWorkload(sw *config.SharedWorkload, namespace, version string) *petriv1.SharedWorkload {
	spec := *sw.Spec.DeepCopy()
	spec.Chart.Version = version
	return &petriv1.SharedWorkload{
		TypeMeta: metav1.TypeMeta{APIVersion: petriv1.GroupVersion.String(), Kind: "SharedWorkload"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      sw.Name,
			Namespace: namespace,
			Labels:    map[string]string{petriv1.LabelManagedBy: ManagedBy, LabelApplication: SharedWorkloadOwner},
		},
		Spec: spec,
	}
}

// RepositoryKey is the key (config.RepositoryKey) of the repository an
// environment sync wrote is for; empty when it names none.
func RepositoryKey(annotations map[string]string) string {
	repo := annotations[AnnotationRepository]
	if repo == "" {
		return ""
	}
	return config.RepositoryKey(annotations[AnnotationForge], repo)
}

// Owned reports whether sync may touch an object: only with both labels.
func Owned(labels map[string]string) bool {
	return labels[petriv1.LabelManagedBy] == ManagedBy && labels[LabelApplication] != ""
}

// Existing is what a decision needs to know of an environment sync wrote.
type Existing struct {
	Name     string
	Number   int
	Deleting bool
}

// Deletion is a decided deletion and its evidence.
type Deletion struct {
	Name   string
	Number int
	Reason string
}

// Plan is the outcome of Decide for one application.
type Plan struct {
	// Apply are the pull requests whose environment is written (created or
	// updated), oldest first.
	Apply []provider.PullRequest
	// Waiting maps pull requests that match but get no environment now to
	// the reason.
	Waiting map[int]string
	// Delete are environments with positive evidence against them.
	Delete []Deletion
	// Unknown are environments whose pull request state is unknown: kept.
	Unknown []Existing
	// Held maps open, matching pull requests that get no environment for a
	// reason of the pull request's own (it expired) to that reason.
	Held map[int]string
}

// Decide computes what to do for one application. open is a successful
// listing of open pull requests; closed holds pull requests read one by one
// that are positively closed. Only these two are evidence: an environment
// whose pull request is in neither is kept as Unknown. held names open
// pull requests whose environment must not exist (it expired, which sync
// read from its own comment), with the reason. Callers that could not list
// the open pull requests must not call Decide at all.
//
// Under maxEnvironments an environment holds its slot until it is gone:
// one being deleted (its teardown runs) still counts, so a waiting pull
// request gets the slot when the environment's deletion completes.
func Decide(app *config.Application, open []provider.PullRequest, closed map[int]provider.PullRequest, existing []Existing, held map[int]string) Plan {
	plan := Plan{Waiting: map[int]string{}, Held: map[int]string{}}
	openBy := map[int]provider.PullRequest{}
	for _, pr := range open {
		if pr.Open() {
			openBy[pr.Number] = pr
		}
	}
	have := map[int]Existing{}
	slots := 0
	for _, e := range existing {
		have[e.Number] = e
		// Whatever exists holds its slot, being deleted or about to be.
		slots++
		if e.Deleting {
			continue
		}
		if pr, ok := openBy[e.Number]; ok {
			if m := app.Matches(View(pr)); !m.Match {
				plan.Delete = append(plan.Delete, Deletion{Name: e.Name, Number: e.Number, Reason: "pull request no longer matches: " + m.Reason})
				continue
			}
			if reason, ok := held[e.Number]; ok {
				plan.Delete = append(plan.Delete, Deletion{Name: e.Name, Number: e.Number, Reason: reason})
			}
			continue
		}
		if pr, ok := closed[e.Number]; ok && pr.State == "closed" {
			reason := "pull request closed"
			if pr.Merged {
				reason = "pull request merged"
			}
			plan.Delete = append(plan.Delete, Deletion{Name: e.Name, Number: e.Number, Reason: reason})
			continue
		}
		plan.Unknown = append(plan.Unknown, e)
	}
	numbers := slices.Sorted(maps.Keys(openBy))
	for _, n := range numbers {
		pr := openBy[n]
		if !app.Matches(View(pr)).Match {
			continue
		}
		e, exists := have[n]
		reason, isHeld := held[n]
		switch {
		case isHeld:
			plan.Held[n] = reason
		case exists && e.Deleting:
			plan.Waiting[n] = "the previous environment of this pull request is still being deleted"
		case exists:
			plan.Apply = append(plan.Apply, pr)
		case app.MaxEnvironments > 0 && slots >= app.MaxEnvironments:
			plan.Waiting[n] = fmt.Sprintf("waiting for a free environment: %s has its maximum of %d", app.Name, app.MaxEnvironments)
		default:
			slots++
			plan.Apply = append(plan.Apply, pr)
		}
	}
	sort.Slice(plan.Apply, func(i, j int) bool { return plan.Apply[i].Number < plan.Apply[j].Number })
	return plan
}

// View is what an application's trigger sees of a pull request, the one
// conversion that sync's engine and Decide share.
func View(pr provider.PullRequest) config.PullRequestView {
	v := config.PullRequestView{Draft: pr.Draft, Labels: pr.Labels, HeadBranch: pr.HeadBranch, BaseBranch: pr.BaseBranch, Fork: pr.Fork, Author: pr.Author}
	if pr.Trust != nil {
		v.Trust = &config.Trust{AuthorPermission: pr.Trust.AuthorPermission, WriterLabels: pr.Trust.WriterLabels}
	}
	return v
}
