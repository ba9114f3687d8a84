package forges_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/gitea"
	"github.com/petri-dev/petri/local/stack"
	"github.com/petri-dev/petri/sync/render"
)

// hostileRun holds what TestHostileAuthorOnGitea's steps and checks share.
type hostileRun struct {
	t   *testing.T
	ctx context.Context
	g   *stack.GiteaForge
}

func (h *hostileRun) key(n int) client.ObjectKey {
	return client.ObjectKey{Namespace: stack.ManagementNamespace, Name: render.EnvironmentName(hostileApp, "gitea:"+stack.DemoRepository, n)}
}

// env is the environment of pull request n; nil when there is none.
func (h *hostileRun) env(n int) *petriv1.EphemeralEnvironment {
	var e petriv1.EphemeralEnvironment
	if err := st.Client.Get(h.ctx, h.key(n), &e); err != nil {
		return nil
	}
	return &e
}

// state is sync's PullRequestState of pull request n; nil when there is
// none.
func (h *hostileRun) state(n int) *petriv1.PullRequestState {
	var list petriv1.PullRequestStateList
	if err := st.Client.List(h.ctx, &list, client.InNamespace(stack.ManagementNamespace)); err != nil {
		return nil
	}
	for i, s := range list.Items {
		if s.Spec.Forge == stack.ForgeGitea && s.Spec.Repository == stack.DemoRepository && s.Spec.Number == int64(n) {
			return &list.Items[i]
		}
	}
	return nil
}

// revision is the Helm revision of the environment's component.
func (h *hostileRun) revision(n int) int32 {
	if e := h.env(n); e != nil {
		for _, c := range e.Status.Components {
			if c.Name == "app" {
				return c.Revision
			}
		}
	}
	return 0
}

func (h *hostileRun) waitReady(n int) {
	h.t.Helper()
	require.Eventually(h.t, func() bool {
		e := h.env(n)
		return e != nil && e.Status.Phase == petriv1.EnvironmentReady && e.Status.ObservedGeneration == e.Generation
	}, 3*time.Minute, 50*time.Millisecond, "the environment of #%d is Ready", n)
}

func (h *hostileRun) waitGone(n int) {
	h.t.Helper()
	require.Eventually(h.t, func() bool {
		return apierrors.IsNotFound(st.Client.Get(h.ctx, h.key(n), &petriv1.EphemeralEnvironment{}))
	}, 3*time.Minute, 50*time.Millisecond, "the environment of #%d is gone", n)
}

// giteaPull is a pull request as Gitea's API answers it: what sync reads.
type giteaPull struct {
	Title string `json:"title"`
	User  struct {
		Login string `json:"login"`
	} `json:"user"`
	Head struct {
		Ref string `json:"ref"`
	} `json:"head"`
	Labels []struct {
		Name string `json:"name"`
	} `json:"labels"`
}

func (h *hostileRun) pull(n int) giteaPull {
	var p giteaPull
	require.NoError(h.t, h.g.Server.Call(nil, http.MethodGet, fmt.Sprintf("/repos/%s/pulls/%d", stack.DemoRepository, n), nil, &p))
	return p
}

// syncComments are the comments of sync's identity on pull request n.
func (h *hostileRun) syncComments(n int) []stack.GiteaComment {
	cs, err := h.g.Comments(n)
	if err != nil {
		return nil
	}
	var out []stack.GiteaComment
	for _, c := range cs {
		if c.User.Login == h.g.Sync.Name {
			out = append(out, c)
		}
	}
	return out
}

func (h *hostileRun) comment(as *gitea.User, n int, body string) int64 {
	h.t.Helper()
	id, err := h.g.Server.Comment(as, stack.DemoRepository, n, body)
	require.NoError(h.t, err)
	return id
}

// reactions are the reactions on a comment by user; empty when unreadable.
func (h *hostileRun) reactions(id int64) map[string]string {
	m, err := h.g.Reactions(id)
	if err != nil {
		return map[string]string{}
	}
	return m
}

func (h *hostileRun) waitReaction(id int64, want string) {
	h.t.Helper()
	require.Eventually(h.t, func() bool { return h.reactions(id)[h.g.Sync.Name] == want }, time.Minute, 20*time.Millisecond,
		"sync answers comment %d with %s", id, want)
}

// checkSecrets: no Secret value of the cluster, no token and no webhook
// secret appears in a comment of the pull requests, in a commit status of
// their head commits or in an environment's status. Values are never
// printed, only where they are from.
func (h *hostileRun) checkSecrets(numbers ...int) {
	type secret struct{ where, value string }
	var secrets []secret
	var list corev1.SecretList
	require.NoError(h.t, st.Client.List(h.ctx, &list))
	for _, s := range list.Items {
		if s.Type == "helm.sh/release.v1" {
			continue
		}
		for k, v := range s.Data {
			if k == "ca.crt" || k == "namespace" || len(v) < 16 {
				continue
			}
			secrets = append(secrets, secret{fmt.Sprintf("Secret %s/%s key %s", s.Namespace, s.Name, k), string(v)})
		}
	}
	for _, u := range []gitea.User{h.g.Server.Admin, h.g.Sync, h.g.Writer, h.g.Stranger} {
		secrets = append(secrets, secret{"the token of " + u.Name, u.Token})
	}
	secrets = append(secrets, secret{"Gitea's webhook secret", h.g.WebhookSecret}, secret{"GitHub's webhook secret", string(st.WebhookSecret)})
	found := func(place, text string) {
		for _, s := range secrets {
			if s.value != "" && strings.Contains(text, s.value) {
				h.t.Errorf("the value of %s appears in %s", s.where, place)
			}
		}
	}
	for _, n := range numbers {
		cs, err := h.g.Comments(n)
		require.NoError(h.t, err)
		for _, c := range cs {
			found(fmt.Sprintf("comment %d on #%d", c.ID, n), c.Body)
		}
		if e := h.env(n); e != nil && e.Spec.Source != nil {
			statuses, err := h.g.Statuses(e.Spec.Source.SHA)
			require.NoError(h.t, err)
			for _, s := range statuses {
				found(fmt.Sprintf("commit status %s on #%d", s.Context, n), s.Description+" "+s.TargetURL)
			}
		}
	}
	var envs petriv1.EphemeralEnvironmentList
	require.NoError(h.t, st.Client.List(h.ctx, &envs, client.InNamespace(stack.ManagementNamespace)))
	for _, e := range envs.Items {
		raw, _ := json.Marshal(e.Status)
		found("the status of environment "+e.Name, string(raw))
	}
}

// checkPods: sync's and the operator's containers never restarted, and
// their logs say no "panic".
func (h *hostileRun) checkPods() {
	for _, ns := range []string{stack.SyncNamespace, stack.ManagementNamespace} {
		var pods corev1.PodList
		require.NoError(h.t, st.Client.List(h.ctx, &pods, client.InNamespace(ns)))
		for _, p := range pods.Items {
			if !strings.HasPrefix(p.Name, "petri-sync") && !strings.HasPrefix(p.Name, "petri-operator") {
				continue
			}
			for _, c := range p.Status.ContainerStatuses {
				assert.Zero(h.t, c.RestartCount, "container %s of pod %s/%s restarted", c.Name, ns, p.Name)
			}
		}
	}
	files, err := filepath.Glob(filepath.Join(st.LogDir(), "*.log"))
	require.NoError(h.t, err)
	seen := 0
	for _, f := range files {
		base := filepath.Base(f)
		if !strings.HasPrefix(base, stack.SyncNamespace+"_") && !strings.HasPrefix(base, stack.ManagementNamespace+"_petri-operator") {
			continue
		}
		seen++
		fh, err := os.Open(f)
		require.NoError(h.t, err)
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
		for line := 1; sc.Scan(); line++ {
			if strings.Contains(sc.Text(), "panic") {
				h.t.Errorf("%s line %d says panic", base, line)
				break
			}
		}
		_ = fh.Close()
	}
	assert.NotZero(h.t, seen, "the logs of sync and the operator were read")
}

// deliveryLog records the webhook deliveries the proxy in front of sync
// passes on, so that one can be sent again as it was.
type deliveryLog struct {
	mu  sync.Mutex
	all []recordedDelivery
}

// recordedDelivery is one delivery: its path, headers and body.
type recordedDelivery struct {
	path   string
	header http.Header
	body   []byte
}

// record keeps a delivery and gives its body back to the request.
func (l *deliveryLog) record(r *http.Request) {
	if r.Method != http.MethodPost || r.Body == nil {
		return
	}
	body, err := io.ReadAll(r.Body)
	_ = r.Body.Close()
	r.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return
	}
	l.mu.Lock()
	l.all = append(l.all, recordedDelivery{path: r.URL.RequestURI(), header: r.Header.Clone(), body: body})
	l.mu.Unlock()
}

// comment finds the issue_comment delivery of a comment with an action.
func (l *deliveryLog) comment(id int64, action string) (recordedDelivery, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, d := range l.all {
		var p struct {
			Action  string `json:"action"`
			Comment struct {
				ID int64 `json:"id"`
			} `json:"comment"`
		}
		if d.header.Get("X-Gitea-Event") == "issue_comment" && json.Unmarshal(d.body, &p) == nil && p.Action == action && p.Comment.ID == id {
			return d, true
		}
	}
	return recordedDelivery{}, false
}

var replayClient = &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 30 * time.Second}

// replay sends the delivery again to base, with its headers and signature.
func (d recordedDelivery) replay(base string) (int, error) {
	req, err := http.NewRequest(http.MethodPost, base+d.path, bytes.NewReader(d.body))
	if err != nil {
		return 0, err
	}
	for k, vs := range d.header {
		if k == "Content-Length" || k == "Connection" || k == "Accept-Encoding" {
			continue
		}
		req.Header[k] = slices.Clone(vs)
	}
	resp, err := replayClient.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// asJSONSends is a text as a JSON client sends it: bytes that are not
// UTF-8 become U+FFFD.
func asJSONSends(s string) string {
	b, _ := json.Marshal(s)
	var out string
	_ = json.Unmarshal(b, &out)
	return out
}

// valuesOf are an environment's values of a component.
func valuesOf(t *testing.T, e *petriv1.EphemeralEnvironment, component string) map[string]any {
	raw, ok := e.Spec.Values[component]
	require.True(t, ok, "environment %s has values for %s", e.Name, component)
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw.Raw, &m))
	return m
}
