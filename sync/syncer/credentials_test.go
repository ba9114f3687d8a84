package syncer_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/githubapi"
	"github.com/petri-dev/petri/sync/api"
	"github.com/petri-dev/petri/sync/render"
)

// planted is one credential written into every place of sync's
// configuration that can hold one; no output may ever show it.
const planted = "PLANTED-c4f3-tok-91d2e8"

// lockedBuffer collects sync's log from its goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// echoAuthorization answers with status and a body that repeats what the
// request carried (its Authorization header, its query), as a careless or
// hostile server does.
func echoAuthorization(status int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(status)
		fmt.Fprintf(w, "refused: Authorization: %s; query %s\n", r.Header.Get("Authorization"), r.URL.RawQuery)
	}
}

// TestPlantedCredentialNeverLeaves puts one token into the chart
// repositories' userinfo and queries (https index and oci), the forge's
// token file, the webhook secret and a shared workload's values, drives
// every failure those can take part in (index 401/404/500 echoing the
// Authorization header, a redirect to another host, an OCI token realm on
// another host, an OCI reference with userinfo, a repository the config
// refuses, a deploy whose reason quotes its URL), and then searches every
// output sync has for it: the pull request's comment and commit statuses,
// the read API, /readyz and sync's log.
func TestPlantedCredentialNeverLeaves(t *testing.T) {
	t.Parallel()
	repos := newLeakyRepos(t)
	charts, withToken := repos.charts, repos.withToken
	logs := &lockedBuffer{}
	h := newHarness(t, harnessOptions{files: repos.files(), token: planted + "-forge", webhookSecret: planted + "-hook", logs: logs})
	pr := h.open(githubapi.PullRequest{Labels: []string{"preview"}})

	// A deploy failed, and its reason quotes the chart's URL and what the
	// repository answered (the operator plays its part here: the status is
	// what it copies from a deploy Job's termination message).
	var env *petriv1.EphemeralEnvironment
	require.Eventually(t, func() bool {
		var list petriv1.EphemeralEnvironmentList
		if h.c.List(h.ctx, &list) != nil {
			return false
		}
		for i := range list.Items {
			if list.Items[i].Namespace == h.ns && list.Items[i].Labels[render.LabelApplication] == "deployed" {
				env = &list.Items[i]
				return true
			}
		}
		return false
	}, 15*time.Second, 10*time.Millisecond, "the environment of application deployed")
	reason := fmt.Sprintf("ChartNotFound: GET %s/index.yaml: 401 Unauthorized: Authorization: Basic %s; Bearer %s",
		withToken("/deploy"), "Y2k6"+planted, planted)
	setStatus(t, h, env.Name, func(e *petriv1.EphemeralEnvironment) {
		e.Status.ObservedGeneration = e.Generation
		e.Status.TargetNamespace = "deployed-pr-x-ab12"
		e.Status.Phase = petriv1.EnvironmentFailed
		e.Status.Components = []petriv1.ComponentStatus{{Name: "web", Phase: petriv1.ComponentFailed, Generation: e.Generation, LastError: reason}}
	})

	// Every application has said what went wrong, on the pull request and
	// in its commit status.
	apps := []string{"unauthorized", "missing", "broken", "redirected", "realm", "userinfo", "deployed"}
	var comment string
	require.Eventually(t, func() bool {
		cs := h.gh.Comments(ghRepo, pr.Number)
		if len(cs) != 1 {
			return false
		}
		comment = cs[0].Body
		for _, a := range apps {
			if !strings.Contains(comment, "#### "+a+"\n") {
				return false
			}
		}
		return strings.Contains(comment, "ChartNotFound")
	}, 20*time.Second, 20*time.Millisecond, "the comment names every application and the failed deploy")
	var statuses []githubapi.Status
	require.Eventually(t, func() bool {
		statuses = h.gh.Statuses(ghRepo, pr.HeadSHA)
		seen := map[string]bool{}
		for _, s := range statuses {
			seen[s.Context] = s.State == "error" || s.State == "failure"
		}
		for _, a := range apps {
			if !seen["petri/"+a] {
				return false
			}
		}
		return true
	}, 20*time.Second, 20*time.Millisecond, "every application's commit status says it failed")
	// The shared workload's resolution failed, and the config loop logged it.
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "Applying shared workloads failed") }, 20*time.Second, 20*time.Millisecond)

	// The failures are told, with the repository's host, without the token.
	assert.Contains(t, comment, "HTTP 401")
	assert.Contains(t, comment, "HTTP 404")
	assert.Contains(t, comment, "HTTP 500")
	assert.Contains(t, comment, "-chart-allowed-hosts", "the redirect and the realm are refused, and the comment says how to allow them")
	assert.Contains(t, comment, strings.TrimPrefix(charts.URL, "https://"))
	assert.Zero(t, repos.elsewhere.Load(), "no request reached another host (a redirect's target or a token realm)")

	outputs := h.outputs(comment, logs, statuses)
	assert.Contains(t, outputs["GET "+api.ApplicationsPath], "refused", "the application the config refused is in the read API")
	assert.Contains(t, outputs["GET "+api.EnvironmentsPath], "ChartNotFound")
	for where, text := range outputs {
		// The token, and the forge token and webhook secret it starts.
		assert.NotContains(t, text, planted, "%s shows the planted credential", where)
	}
}

// leakyRepos are chart repositories that answer every request with the
// credential it carried, or send it elsewhere: an https index (401, 404,
// 500, a redirect to another host) and an OCI registry whose token realm is
// on another host. elsewhere counts the requests that reached another host.
type leakyRepos struct {
	charts    *httptest.Server
	regHost   string
	elsewhere atomic.Int32
}

func newLeakyRepos(t *testing.T) *leakyRepos {
	l := &leakyRepos{}
	// Another host: nothing may reach it.
	other := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.elsewhere.Add(1)
		echoAuthorization(http.StatusOK)(w, r)
	}))
	t.Cleanup(other.Close)
	realm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.elsewhere.Add(1)
		_, _ = io.WriteString(w, `{"token":"`+planted+`"}`)
	}))
	t.Cleanup(realm.Close)
	// go-containerregistry refuses a realm at a private address literal
	// itself; by name it does not.
	realmURL := strings.Replace(realm.URL, "127.0.0.1", "localhost", 1)

	l.charts = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/r401/"):
			echoAuthorization(http.StatusUnauthorized)(w, r)
		case strings.HasPrefix(r.URL.Path, "/r404/"):
			echoAuthorization(http.StatusNotFound)(w, r)
		case strings.HasPrefix(r.URL.Path, "/r500/"):
			echoAuthorization(http.StatusInternalServerError)(w, r)
		case strings.HasPrefix(r.URL.Path, "/away/"):
			http.Redirect(w, r, other.URL+"/index.yaml?sig="+planted, http.StatusFound)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(l.charts.Close)
	registry := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="%s/token?access_token=%s",service="registry"`, realmURL, planted))
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, `{"errors":[{"code":"UNAUTHORIZED","message":"you sent %s %s"}]}`, r.Header.Get("Authorization"), planted)
	}))
	t.Cleanup(registry.Close)
	l.regHost = strings.TrimPrefix(registry.URL, "http://")
	return l
}

// withToken is the https index at path, the planted token in its userinfo
// and its query.
func (l *leakyRepos) withToken(path string) string {
	return strings.Replace(l.charts.URL, "https://", "https://ci:"+planted+"@", 1) + path + "?token=" + planted
}

// files is a config repository with an application on each of the leaky
// repositories, one the config refuses, one that deploys, and a shared
// workload whose values hold the token.
func (l *leakyRepos) files() map[string]string {
	app := func(name, repository, version string) string {
		return fmt.Sprintf(`apiVersion: petri.dev/v1alpha1
kind: Application
name: %s
repository: %s
trigger:
  labels: [preview]
components:
  - name: web
    chart:
      repository: %s
      name: web
      version: "%s"
`, name, ghRepo, repository, version)
	}
	return map[string]string{
		"applications/unauthorized.yaml": app("unauthorized", l.withToken("/r401"), "~1.4"),
		"applications/missing.yaml":      app("missing", l.withToken("/r404"), "~1.4"),
		"applications/broken.yaml":       app("broken", l.withToken("/r500"), "~1.4"),
		"applications/redirected.yaml":   app("redirected", l.withToken("/away"), "~1.4"),
		"applications/realm.yaml":        app("realm", "oci://"+l.regHost+"/charts", "^1"),
		"applications/userinfo.yaml":     app("userinfo", "oci://ci:"+planted+"@"+l.regHost+"/charts", "^1"),
		"applications/refused.yaml":      app("refused", "ftp://ci:"+planted+"@"+l.regHost+"/charts", "1.0.0"),
		"applications/deployed.yaml":     app("deployed", chartRepo.URL, "~1.4"),
		"shared/leaky.yaml": fmt.Sprintf(`kind: SharedWorkload
name: leaky
spec:
  chart:
    repository: %s
    name: web
    version: "~1.4"
  values:
    auth: {password: %s}
  instanceSecret:
    keys: [admin-password]
`, l.withToken("/r401"), planted),
	}
}

// outputs is every output sync has, by where it is shown: the comment,
// sync's log, each commit status, the read API and /readyz.
func (h *harness) outputs(comment string, logs *lockedBuffer, statuses []githubapi.Status) map[string]string {
	t := h.t
	t.Helper()
	outputs := map[string]string{"comment": comment, "sync's log": logs.String()}
	for _, s := range statuses {
		outputs["commit status "+s.Context] = s.Description + " " + s.TargetURL
	}
	for _, path := range []string{api.EnvironmentsPath, api.ApplicationsPath, "/readyz"} {
		resp, err := http.Get(h.url + path)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		require.NoError(t, err)
		outputs["GET "+path] = string(body)
	}
	return outputs
}
