package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/githubapi"
	"github.com/petri-dev/petri/local/stack"
	"github.com/petri-dev/petri/sync/config"
	"github.com/petri-dev/petri/sync/render"
)

// What scenario 8 checks, all in the ScenarioChecks column, each
// violation's text naming its promise:
//
//   - no other pull request's environment changes: an environment's spec
//     generation and UID stay what they were at its first Ready, and it
//     carries no sleep, wake or redeploy request but its own maintainer's;
//   - no command takes effect without write access: no such command gets
//     sync's +1 or sets an annotation, and a maintainer's command takes
//     effect whatever an author forged;
//   - forged state holds nothing back: the environment whose head commit
//     was forged expired is written, and the ones forged kept or extended
//     expire when their ttl is up;
//   - rendered values hold the text literally, and sync's comment keeps
//     its shape (one marker, one readable state line, the URL as rendered);
//   - no Secret value appears in any pod's log, any comment, any
//     deployment status or any environment's status;
//   - nothing panics: the operator's and sync's logs have no "panic";
//   - sync edits no comment but its own, and marks inactive only
//     deployments it created;
//   - the API server refuses a SharedWorkload step with valueFrom.
//
// Deletions are judged by the recorder (NoUnjustifiedDeletion): only the
// environments that must expire may go before their pull request closes.

// violate8 records one of scenario 8's breaches.
func (h *hostile) violate8(key, format string, args ...any) {
	h.sc.violate(ScenarioChecks, "hostile/"+key, format, args...)
	h.sc.logf("scenario 8: VIOLATION: "+format, args...)
}

// waitWritten waits until sync wrote the environment of each pull request
// (but the held ones: check waits for those, at the same time as for the
// rest) and it is Ready, and records what it was then.
func (h *hostile) waitWritten(ctx context.Context) {
	var prs []*hostilePR
	for _, pr := range h.prs {
		if !pr.held {
			prs = append(prs, pr)
		}
	}
	h.waitReady(ctx, prs)
}

// waitReady waits until sync wrote each pull request's environment and it
// is Ready, and records what it was then.
func (h *hostile) waitReady(ctx context.Context, prs []*hostilePR) {
	names := make([]string, 0, len(prs))
	byName := map[string]*hostilePR{}
	for _, pr := range prs {
		names = append(names, pr.env)
		byName[pr.env] = pr
	}
	h.sc.parallel(names, func(name string) {
		pr := byName[name]
		var env *petriv1.EphemeralEnvironment
		if !waitFor(ctx, h.wait(), 250*time.Millisecond, func() bool {
			env, _ = h.sc.getEnv(ctx, name)
			return env != nil
		}) {
			h.violate8(fmt.Sprintf("not-written/%d", pr.number), "pull request #%d (%s): sync wrote no environment %s within %s: the forged state held it back",
				pr.number, pr.attack, name, h.wait())
			return
		}
		pr.mu.Lock()
		pr.written = true
		pr.mu.Unlock()
		if pr.expires {
			h.sc.rec.expectExpiry(name)
			h.sc.expectGone(name)
		} else {
			h.sc.expectPresent(name)
		}
		h.sc.waitState(ctx, name, "deploy", true, stepTimeout)
		if env, _ = h.sc.getEnv(ctx, name); env != nil {
			pr.mu.Lock()
			pr.readyAt, pr.generation, pr.uid = time.Now(), env.Generation, string(env.UID)
			pr.mu.Unlock()
		}
	})
}

// check runs every check of the scenario once the attacks are made.
func (h *hostile) check(ctx context.Context) {
	names := make([]string, 0, len(h.prs))
	byName := map[string]*hostilePR{}
	for _, pr := range h.prs {
		names = append(names, pr.env)
		byName[pr.env] = pr
	}
	h.sc.parallel(names, func(name string) {
		pr := byName[name]
		if pr.held {
			h.waitReady(ctx, []*hostilePR{pr})
		}
		h.checkCommands(ctx, pr)
		h.checkExpiry(ctx, pr)
		h.checkUnchanged(ctx, pr)
		if pr.literal {
			h.checkLiteral(ctx, pr)
		}
	})
	h.checkComments()
	h.checkDeployments()
	h.checkSecrets(ctx)
	h.checkPanics()
}

// checkCommands: the maintainer's command takes effect; the others'
// commands are refused and change nothing.
func (h *hostile) checkCommands(ctx context.Context, pr *hostilePR) {
	gh := h.sc.st.GitHub
	if pr.redeployBy > 0 && pr.uid != "" {
		want := fmt.Sprintf("comment-%d", pr.redeployBy)
		if !waitFor(ctx, h.wait(), 250*time.Millisecond, func() bool {
			env, _ := h.sc.getEnv(ctx, pr.env)
			return env != nil && env.Annotations[render.AnnotationRedeploy] == want
		}) {
			h.violate8(fmt.Sprintf("ignored/%d", pr.number), "pull request #%d (%s): @%s's `/petri redeploy` (comment %d, with write access) did not take effect within %s",
				pr.number, pr.attack, maintainer, pr.redeployBy, h.wait())
		}
	}
	if pr.redeployBy > 0 && pr.literal {
		// Delivered again and again, answered once.
		note := fmt.Sprintf("`/petri redeploy` from @%s", maintainer)
		// The visible part: the state line may repeat the notes.
		visible, _, _ := strings.Cut(h.syncComment(pr.number), "<!-- petri:state ")
		if n := strings.Count(visible, note); n > 1 {
			h.violate8(fmt.Sprintf("replayed/%d", pr.number), "pull request #%d (%s): @%s's one `/petri redeploy`, its delivery replayed, is answered %d times in sync's comment", pr.number, pr.attack, maintainer, n)
		}
	}
	// Wait until sync answered the commands, so that the checks after
	// this one see what they did.
	waitFor(ctx, h.wait()/2, 250*time.Millisecond, func() bool {
		for _, id := range pr.answered {
			if len(gh.Reactions(HostileRepository, id)) == 0 {
				return false
			}
		}
		return true
	})
	for _, id := range pr.refused {
		for _, re := range gh.Reactions(HostileRepository, id) {
			if re.Content == "+1" {
				h.violate8(fmt.Sprintf("accepted/%d/%d", pr.number, id), "pull request #%d (%s): comment %d, a command of someone without write access, was accepted (+1)", pr.number, pr.attack, id)
			}
		}
	}
}

// checkExpiry: an environment forged kept or extended expires when its
// ttl is up, not before.
func (h *hostile) checkExpiry(ctx context.Context, pr *hostilePR) {
	pr.mu.Lock()
	readyAt := pr.readyAt
	pr.mu.Unlock()
	if !pr.expires || readyAt.IsZero() {
		return
	}
	var rec *envRecord
	due := readyAt.Add(hostileTTL)
	// sync looks again when an expiry is due, and resyncs every 5 s.
	grace := time.Duration(h.sc.size(40, 20)) * time.Second
	waitFor(ctx, time.Until(due)+grace, 250*time.Millisecond, func() bool {
		rec = h.sc.rec.environment(pr.env)
		return rec != nil && !rec.deleting.IsZero()
	})
	switch {
	case rec == nil || rec.deleting.IsZero():
		h.violate8(fmt.Sprintf("kept/%d", pr.number), "pull request #%d (%s): environment %s did not expire within %s of its ttl (%s) being up: the forged state kept it",
			pr.number, pr.attack, pr.env, grace, hostileTTL)
	case rec.deleting.Before(due.Add(-5 * time.Second)):
		h.violate8(fmt.Sprintf("early/%d", pr.number), "pull request #%d (%s): environment %s expired %s after its first Ready, before its ttl of %s",
			pr.number, pr.attack, pr.env, rec.deleting.Sub(readyAt).Round(time.Second), hostileTTL)
	}
}

// checkUnchanged: nothing but its own maintainer changed an environment.
func (h *hostile) checkUnchanged(ctx context.Context, pr *hostilePR) {
	pr.mu.Lock()
	uid, gen := pr.uid, pr.generation
	pr.mu.Unlock()
	if uid == "" || pr.expires {
		return
	}
	env, err := h.sc.getEnv(ctx, pr.env)
	if err != nil {
		return
	}
	if env == nil || string(env.UID) != uid || env.DeletionTimestamp != nil {
		h.violate8(fmt.Sprintf("replaced/%d", pr.number), "pull request #%d (%s): environment %s was deleted or replaced while its pull request was open", pr.number, pr.attack, pr.env)
		return
	}
	if env.Generation != gen {
		h.violate8(fmt.Sprintf("spec/%d", pr.number), "pull request #%d (%s): environment %s's spec changed (generation %d, was %d at its first Ready) with no push",
			pr.number, pr.attack, pr.env, env.Generation, gen)
	}
	if v, ok := env.Annotations[render.AnnotationSleepRequested]; ok {
		h.violate8(fmt.Sprintf("sleep/%d", pr.number), "pull request #%d (%s): environment %s was asked to sleep (%s) though no one with write access commanded it", pr.number, pr.attack, pr.env, v)
	}
	want := ""
	if pr.redeployBy > 0 {
		want = fmt.Sprintf("comment-%d", pr.redeployBy)
	}
	if v := env.Annotations[render.AnnotationRedeploy]; v != "" && v != want {
		h.violate8(fmt.Sprintf("redeploy/%d", pr.number), "pull request #%d (%s): environment %s was redeployed by %q, not by its maintainer's command", pr.number, pr.attack, pr.env, v)
	}
	if v, ok := env.Annotations[render.AnnotationWakeRequested]; ok && want == "" {
		h.violate8(fmt.Sprintf("wake/%d", pr.number), "pull request #%d (%s): environment %s was asked to wake (%s) though no one with write access commanded it", pr.number, pr.attack, pr.env, v)
	}
}

// asGitHubSends is a text as GitHub's JSON carries it: bytes that are not
// UTF-8 become U+FFFD.
func asGitHubSends(s string) string {
	b, _ := json.Marshal(s)
	var out string
	_ = json.Unmarshal(b, &out)
	return out
}

// AsValuesHold is an author's text as rendered values hold it: literally,
// but with a space between two braces of a template delimiter ("{{" is
// "{ {", "}}" is "} }", "{{{" is "{ { {"), so that a chart's tpl finds
// no action in it. The hostile-author tests of every forge expect it.
func AsValuesHold(s string) string {
	var b strings.Builder
	var prev rune
	for _, r := range s {
		if (r == '{' || r == '}') && r == prev {
			b.WriteByte(' ')
		}
		b.WriteRune(r)
		prev = r
	}
	return b.String()
}

// checkLiteral: the values hold the title, branch, labels and author as
// written (AsValuesHold), and sync's comment keeps its shape.
func (h *hostile) checkLiteral(ctx context.Context, pr *hostilePR) {
	p := h.sc.st.GitHub.PullRequest(HostileRepository, pr.number)
	title, branch := asGitHubSends(p.Title), asGitHubSends(p.HeadRef)
	var labels []string
	for _, l := range p.Labels {
		labels = append(labels, AsValuesHold(asGitHubSends(l)))
	}
	want := map[string]any{
		"message": fmt.Sprintf("PR #%d: %s (%s)", pr.number, AsValuesHold(title), strings.Join(labels, ", ")),
		"commit":  p.HeadSHA,
		"env":     map[string]any{"PR_TITLE": AsValuesHold(title), "PR_BRANCH": AsValuesHold(branch), "PR_AUTHOR": AsValuesHold(p.Author)},
	}
	env, err := h.sc.getEnv(ctx, pr.env)
	if err != nil || env == nil {
		return
	}
	var got map[string]any
	if raw, ok := env.Spec.Values["app"]; !ok || json.Unmarshal(raw.Raw, &got) != nil {
		h.violate8(fmt.Sprintf("values/%d", pr.number), "pull request #%d (%s): environment %s has no readable values for app", pr.number, pr.attack, pr.env)
	} else if !reflect.DeepEqual(got, want) {
		h.violate8(fmt.Sprintf("values/%d", pr.number), "pull request #%d (%s): environment %s's values do not hold the text literally: %s", pr.number, pr.attack, pr.env, ValuesDiff(got, want))
	}
	if env.Spec.Source == nil || env.Spec.Source.Branch != branch {
		h.violate8(fmt.Sprintf("branch/%d", pr.number), "pull request #%d (%s): environment %s's spec.source.branch is not the branch as written", pr.number, pr.attack, pr.env)
	}
	body := h.syncComment(pr.number)
	if body == "" {
		h.violate8(fmt.Sprintf("no-comment/%d", pr.number), "pull request #%d (%s): sync wrote no comment", pr.number, pr.attack)
		return
	}
	url := "http://" + config.Slug(branch) + ".hostile.preview.example.com/"
	_, stateOK := render.ParseState(body)
	switch {
	case !strings.HasPrefix(body, render.CommentMarker):
		h.violate8(fmt.Sprintf("comment-shape/%d", pr.number), "pull request #%d (%s): sync's comment does not begin with its marker", pr.number, pr.attack)
	case strings.Count(body, "<!-- petri:state ") != 1 || !stateOK:
		h.violate8(fmt.Sprintf("comment-shape/%d", pr.number), "pull request #%d (%s): sync's comment has %d state lines (readable: %v), want one", pr.number, pr.attack, strings.Count(body, "<!-- petri:state "), stateOK)
	case !strings.Contains(body, "- URL: "+url+"\n"):
		h.violate8(fmt.Sprintf("comment-url/%d", pr.number), "pull request #%d (%s): sync's comment does not show the URL as rendered (%s)", pr.number, pr.attack, url)
	}
}

// ValuesDiff names the keys whose values differ, with their lengths (the
// texts are long and hostile: never printed whole); "" when none do. The
// hostile-author tests of every forge read rendered values with it.
func ValuesDiff(got, want map[string]any) string {
	var out []string
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	var gf, wf map[string]any
	_ = json.Unmarshal(g, &gf)
	_ = json.Unmarshal(w, &wf)
	flat := func(m map[string]any) map[string]string {
		f := map[string]string{}
		var walk func(prefix string, v any)
		walk = func(prefix string, v any) {
			if mm, ok := v.(map[string]any); ok {
				for k, x := range mm {
					walk(prefix+"."+k, x)
				}
				return
			}
			f[prefix] = fmt.Sprint(v)
		}
		walk("", m)
		return f
	}
	gm, wm := flat(gf), flat(wf)
	for k, wv := range wm {
		if gv, ok := gm[k]; !ok || gv != wv {
			out = append(out, fmt.Sprintf("%s (%d bytes, want %d)", strings.TrimPrefix(k, "."), len(gm[k]), len(wv)))
		}
	}
	for k := range gm {
		if _, ok := wm[k]; !ok {
			out = append(out, strings.TrimPrefix(k, ".")+" (not templated)")
		}
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// syncComment is the body of sync's own comment on a pull request (by the
// token's user, with the marker); empty when there is none.
func (h *hostile) syncComment(n int) string {
	for _, c := range h.sc.st.GitHub.Comments(HostileRepository, n) {
		if c.Author == githubapi.APIUser && strings.Contains(c.Body, render.CommentMarker) {
			return c.Body
		}
	}
	return ""
}

// checkComments: sync wrote at most one comment per pull request and
// edited no one else's.
func (h *hostile) checkComments() {
	for _, pr := range h.prs {
		own := 0
		for _, c := range h.sc.st.GitHub.Comments(HostileRepository, pr.number) {
			if c.Author == githubapi.APIUser {
				own++
				continue
			}
			if slices.Contains(c.Editors, githubapi.APIUser) {
				h.violate8(fmt.Sprintf("edited/%d", c.ID), "pull request #%d (%s): sync edited @%s's comment %d (%d times)", pr.number, pr.attack, c.Author, c.ID,
					countOf(c.Editors, githubapi.APIUser))
			}
		}
		if own > 1 {
			h.violate8(fmt.Sprintf("comments/%d", pr.number), "pull request #%d (%s): sync wrote %d comments, want one", pr.number, pr.attack, own)
		}
	}
}

func countOf(xs []string, x string) int {
	n := 0
	for _, v := range xs {
		if v == x {
			n++
		}
	}
	return n
}

// checkDeployments: sync posted nothing on a deployment it did not
// create, and marked inactive only its own.
func (h *hostile) checkDeployments() {
	gh := h.sc.st.GitHub
	for _, d := range gh.Deployments(HostileRepository) {
		if d.Creator == githubapi.APIUser {
			continue
		}
		for _, st := range gh.DeploymentStatuses(HostileRepository, d.ID) {
			if st.Creator == githubapi.APIUser {
				h.violate8(fmt.Sprintf("deployment/%d/%d", d.ID, st.ID), "sync posted %q (%q) on deployment %d of %s, which @%s created, not sync",
					st.State, st.Description, d.ID, d.Environment, d.Creator)
			}
		}
	}
}

// secretValue is one value of a Secret, named but never shown.
type secretValue struct {
	where string
	value string
}

// secretValues are the values of every Secret in the cluster long enough
// to be credentials (16 bytes), but Helm's release records (the
// releases' own values, not credentials) and the public parts of a
// service account's token Secret.
func (h *hostile) secretValues(ctx context.Context) []secretValue {
	var list corev1.SecretList
	if err := retryAPI(ctx, func() error { return h.sc.st.Client.List(ctx, &list) }); err != nil {
		h.sc.logf("scenario 8: list Secrets: %v", err)
		return nil
	}
	var out []secretValue
	for _, s := range list.Items {
		if s.Type == "helm.sh/release.v1" {
			continue
		}
		for k, v := range s.Data {
			if k == "ca.crt" || k == "namespace" || len(v) < 16 {
				continue
			}
			out = append(out, secretValue{where: fmt.Sprintf("Secret %s/%s key %s", s.Namespace, s.Name, k), value: string(v)})
		}
	}
	if len(h.sc.st.WebhookSecret) >= 16 {
		out = append(out, secretValue{where: "the webhook secret", value: string(h.sc.st.WebhookSecret)})
	}
	return out
}

// checkSecrets: no Secret value in any pod's log, comment, deployment
// status, or environment's or shared workload's status.
func (h *hostile) checkSecrets(ctx context.Context) {
	secrets := h.secretValues(ctx)
	if len(secrets) == 0 {
		return
	}
	found := func(place, text string) {
		for _, s := range secrets {
			if strings.Contains(text, s.value) {
				h.violate8("secret/"+s.where+"/"+place, "the value of %s appears in %s", s.where, place)
			}
		}
	}
	files, _ := filepath.Glob(filepath.Join(h.sc.st.LogDir(), "*.log"))
	for _, f := range files {
		if data, err := os.ReadFile(f); err == nil {
			found("the log "+filepath.Base(f), string(data))
		}
	}
	gh := h.sc.st.GitHub
	for _, pr := range h.prs {
		for _, c := range gh.Comments(HostileRepository, pr.number) {
			found(fmt.Sprintf("comment %d on #%d", c.ID, pr.number), c.Body)
		}
	}
	for _, d := range gh.Deployments(HostileRepository) {
		for _, st := range gh.DeploymentStatuses(HostileRepository, d.ID) {
			found(fmt.Sprintf("status %d of deployment %d", st.ID, d.ID), st.Description+" "+st.EnvironmentURL+" "+st.LogURL)
		}
	}
	var envs petriv1.EphemeralEnvironmentList
	if err := retryAPI(ctx, func() error { return h.sc.st.Client.List(ctx, &envs, client.InNamespace(stack.ManagementNamespace)) }); err == nil {
		for _, e := range envs.Items {
			raw, _ := json.Marshal(e.Status)
			found("the status of environment "+e.Name, string(raw))
		}
	}
	var sws petriv1.SharedWorkloadList
	if err := retryAPI(ctx, func() error { return h.sc.st.Client.List(ctx, &sws) }); err == nil {
		for _, w := range sws.Items {
			raw, _ := json.Marshal(w.Status)
			found("the status of shared workload "+w.Name, string(raw))
		}
	}
}

// checkPanics: the operator's and sync's logs have no "panic".
func (h *hostile) checkPanics() {
	files, _ := filepath.Glob(filepath.Join(h.sc.st.LogDir(), "*.log"))
	for _, f := range files {
		base := filepath.Base(f)
		if !strings.HasPrefix(base, stack.ManagementNamespace+"_petri-operator") && !strings.HasPrefix(base, stack.SyncNamespace+"_") {
			continue
		}
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
		line := 0
		for sc.Scan() {
			line++
			if strings.Contains(sc.Text(), "panic") {
				h.violate8("panic/"+base, "%s line %d: %.200s", base, line, sc.Text())
				break
			}
		}
		_ = fh.Close()
	}
}

// secretKeyRefStep: the API server refuses a SharedWorkload whose
// provision step reads the operator's ownership key through valueFrom.
func (h *hostile) secretKeyRefStep(ctx context.Context) {
	sw := &petriv1.SharedWorkload{
		ObjectMeta: metav1.ObjectMeta{Namespace: stack.ManagementNamespace, Name: "s8-secret-reader"},
		Spec: petriv1.SharedWorkloadSpec{
			Chart: petriv1.ChartReference{Repository: stack.DeployerCharts, Name: "greeter", Version: "0.1.0"},
			Provision: &petriv1.ContainerTemplate{Image: "petri.dev/example-app:latest", Args: []string{"provision"}, Env: []corev1.EnvVar{{
				Name: "STOLEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: petriv1.OwnershipKeySecret}, Key: "key"}},
			}}},
		},
	}
	err := retryAPI(ctx, func() error { return h.sc.st.Client.Create(ctx, sw) })
	switch {
	case err == nil:
		h.violate8("step-secretkeyref", "the API server accepted SharedWorkload %s, whose provision step reads Secret %s through valueFrom.secretKeyRef", sw.Name, petriv1.OwnershipKeySecret)
		_ = h.sc.st.Client.Delete(ctx, sw)
	case apierrors.IsInvalid(err) || apierrors.IsForbidden(err):
		h.stepRefused = true
		h.sc.logf("scenario 8: the API server refused a step with valueFrom.secretKeyRef: %v", err)
	default:
		h.violate8("step-secretkeyref", "creating SharedWorkload %s with valueFrom.secretKeyRef in its step failed otherwise than refused: %v", sw.Name, err)
	}
}
