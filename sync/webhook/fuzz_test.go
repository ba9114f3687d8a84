package webhook_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/petri-dev/petri/local/githubapi"
	"github.com/petri-dev/petri/sync/metrics"
	"github.com/petri-dev/petri/sync/provider"
	"github.com/petri-dev/petri/sync/render"
	"github.com/petri-dev/petri/sync/webhook"
)

// Body encodings a fuzzed delivery is sent with.
const (
	encJSON    = iota // the payload as an application/json body
	encForm           // payload=<escaped payload>, form-encoded, as GitHub sends it
	encRawForm        // the bytes as they are, declared form-encoded
	encodings
)

// payloadShape is the part of a payload the handler's result must agree
// with, decoded independently of go-github. It holds a subset of the fields
// go-github decodes, with the same types, so every payload go-github
// accepts decodes here too.
type payloadShape struct {
	Action *string `json:"action"`
	Issue  *struct {
		Number      *int `json:"number"`
		PullRequest *struct {
			URL *string `json:"url"`
		} `json:"pull_request"`
	} `json:"issue"`
	Comment *struct {
		ID   *int64  `json:"id"`
		Body *string `json:"body"`
		User *struct {
			Login *string `json:"login"`
		} `json:"user"`
	} `json:"comment"`
	SHA        *string `json:"sha"`
	State      *string `json:"state"`
	Context    *string `json:"context"`
	Ref        *string `json:"ref"`
	After      *string `json:"after"`
	Repository *struct {
		FullName *string `json:"full_name"`
		CloneURL *string `json:"clone_url"`
	} `json:"repository"`
	PullRequest *prShape       `json:"pull_request"`
	CheckRun    *checkRunShape `json:"check_run"`
}

// prShape is a payload's pull request.
type prShape struct {
	Number *int    `json:"number"`
	State  *string `json:"state"`
	Draft  *bool   `json:"draft"`
	Head   *struct {
		Ref *string `json:"ref"`
		SHA *string `json:"sha"`
	} `json:"head"`
	Base *struct {
		Ref *string `json:"ref"`
	} `json:"base"`
	Labels []*struct {
		Name *string `json:"name"`
	} `json:"labels"`
}

// checkRunShape is a payload's check run.
type checkRunShape struct {
	Name       *string `json:"name"`
	HeadSHA    *string `json:"head_sha"`
	Status     *string `json:"status"`
	Conclusion *string `json:"conclusion"`
	App        *struct {
		Slug *string `json:"slug"`
	} `json:"app"`
}

// app is the slug of the app that posted the run, "" when none is named.
func (cr *checkRunShape) app() string {
	if cr.App == nil {
		return ""
	}
	return str(cr.App.Slug)
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// FuzzDelivery sends arbitrary, correctly signed deliveries through the
// handler. The seeds are GitHub's published example payloads of every event
// sync consumes, plus malformed ones.
func FuzzDelivery(f *testing.F) {
	seedDeliveries(f)
	secret := []byte("fuzz-secret")
	q := make(chan webhook.Event, 1)
	h := &webhook.Handler{Secret: secret, Queue: q, Metrics: metrics.New()}

	f.Fuzz(func(t *testing.T, event string, enc uint8, data []byte) {
		body, contentType := data, "application/json"
		switch enc % encodings {
		case encForm:
			body, contentType = []byte("payload="+url.QueryEscape(string(data))), "application/x-www-form-urlencoded"
		case encRawForm:
			contentType = "application/x-www-form-urlencoded"
		}
		send := func(sig string) *httptest.ResponseRecorder {
			req := httptest.NewRequest(http.MethodPost, "/webhooks/github", bytes.NewReader(body))
			req.Header.Set("X-GitHub-Event", event)
			req.Header.Set("X-GitHub-Delivery", "d-1")
			req.Header.Set("Content-Type", contentType)
			req.Header.Set("X-Hub-Signature-256", sig)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			return rec
		}
		queued := func() (webhook.Event, bool) {
			select {
			case ev := <-q:
				return ev, true
			default:
				return webhook.Event{}, false
			}
		}

		if rec := send(githubapi.Sign([]byte("another-secret"), body)); rec.Code != http.StatusUnauthorized {
			t.Fatalf("a delivery signed with another secret was answered %d, want 401", rec.Code)
		}
		if _, ok := queued(); ok {
			t.Fatal("a delivery signed with another secret was queued")
		}

		rec := send(githubapi.Sign(secret, body))
		ev, ok := queued()
		switch rec.Code {
		case http.StatusAccepted, http.StatusOK, http.StatusBadRequest:
		default:
			t.Fatalf("answered %d (%s), want 200, 202 or 400", rec.Code, rec.Body)
		}
		if ok != (rec.Code == http.StatusAccepted && rec.Body.String() == "queued\n") {
			t.Fatalf("answered %d (%q) but queued=%v", rec.Code, rec.Body, ok)
		}
		switch event {
		case "pull_request", "push", "status", "check_run", "issue_comment", "ping":
		default:
			// Unknown events are acknowledged and ignored; only a form
			// body that does not parse is refused before the event type
			// is looked at.
			if ok || (rec.Code != http.StatusAccepted && !(rec.Code == http.StatusBadRequest && enc%encodings == encRawForm)) {
				t.Fatalf("event %q: answered %d, queued=%v; unknown events are acknowledged and ignored", event, rec.Code, ok)
			}
			return
		}
		if !ok {
			return
		}

		// Accepted: the event must be what the payload says, never a
		// zero event that merely looks valid.
		payload := data
		if enc%encodings == encRawForm {
			form, err := url.ParseQuery(string(data))
			if err != nil {
				t.Fatalf("queued an event from an unparsable form body: %v", err)
			}
			payload = []byte(form.Get("payload"))
		}
		var want payloadShape
		if err := json.Unmarshal(payload, &want); err != nil {
			t.Fatalf("queued an event from a payload that does not decode: %v", err)
		}
		if ev.Type != event || ev.Delivery != "d-1" || ev.Received.IsZero() {
			t.Fatalf("event envelope %q %q %v, want %q d-1 and a receive time", ev.Type, ev.Delivery, ev.Received, event)
		}
		if want.Repository == nil || str(want.Repository.FullName) == "" || ev.Repository != *want.Repository.FullName {
			t.Fatalf("queued repository %q, payload has %+v", ev.Repository, want.Repository)
		}
		checkEvent(t, event, ev, want)
	})
}

// seedDeliveries seeds the fuzzer with GitHub's example payloads of every
// event sync reads, in each encoding, and with malformed ones.
func seedDeliveries(f *testing.F) {
	root := filepath.Join("..", "..", "local", "githubapi", "testdata")
	seeded := 0
	for _, event := range []string{"pull_request", "push", "status", "check_run", "issue_comment", "ping"} {
		files, err := filepath.Glob(filepath.Join(root, event, "*payload.json"))
		if err != nil {
			f.Fatal(err)
		}
		for _, p := range files {
			data, err := os.ReadFile(p)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(event, uint8(encJSON), data)
			seeded++
		}
	}
	if seeded < 15 {
		f.Fatalf("found only %d example payloads under %s", seeded, root)
	}
	opened, err := os.ReadFile(filepath.Join(root, "pull_request", "opened.payload.json"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add("pull_request", uint8(encForm), opened)
	f.Add("pull_request", uint8(encRawForm), []byte("payload="+url.QueryEscape(string(opened))))
	for _, s := range []struct{ event, payload string }{
		{"pull_request", ``},
		{"pull_request", `null`},
		{"pull_request", `[]`},
		{"pull_request", `{}`},
		{"pull_request", `{"number": "two"`},
		{"pull_request", `{"pull_request": null, "repository": {"full_name": "a/b"}}`},
		{"pull_request", `{"pull_request": {"number": 0}, "repository": {"full_name": "a/b"}}`},
		{"pull_request", `{"pull_request": {"number": 7}, "repository": {"full_name": ""}}`},
		{"pull_request", `{"pull_request": {"number": 7, "labels": [null, {"name": "x"}]}, "repository": {"full_name": "a/b"}}`},
		{"pull_request", `{"pull_request": {"number": 7, "head": "main"}, "repository": {"full_name": "a/b"}}`},
		{"pull_request", `{"action": "opened", "number": 3, "pull_request": {"number": 3, "state": "open", "head": {"ref": "f", "sha": "abc"}}, "repository": {"full_name": "a/b"}}`},
		{"push", `{"ref": "refs/heads/main", "after": "abc", "repository": {}}`},
		{"push", `{"ref": "refs/heads/main", "after": "abc", "repository": {"full_name": "a/b", "clone_url": 5}}`},
		{"status", `{"sha": "", "state": "success", "repository": {"full_name": "a/b"}}`},
		{"status", `{"sha": "abc", "state": "error", "context": "ci", "repository": {"full_name": "a/b"}}`},
		{"check_run", `{"check_run": {"name": "build"}, "repository": {"full_name": "a/b"}}`},
		{"check_run", `{"check_run": {"name": "build", "head_sha": "abc", "status": "completed", "conclusion": "timed_out"}, "repository": {"full_name": "a/b"}}`},
		{"issue_comment", `{"action": "created", "issue": {"number": 4}, "comment": {"id": 9, "body": "/petri wake"}, "repository": {"full_name": "a/b"}}`},
		{"issue_comment", `{"action": "created", "issue": {"number": 4, "pull_request": {"url": "u"}}, "comment": {"id": 9, "body": "/petri wake"}, "repository": {"full_name": "a/b"}}`},
		{"issue_comment", `{"action": "edited", "issue": {"number": 4, "pull_request": {}}, "comment": {"id": 9, "body": "/petri wake"}, "repository": {"full_name": "a/b"}}`},
		{"issue_comment", `{"action": "created", "issue": {"number": 4, "pull_request": {}}, "comment": {"id": 0, "body": "/petri sleep"}, "repository": {"full_name": "a/b"}}`},
		{"ping", `{"zen": 1}`},
		{"deployment", `{]`},
		{"", `{}`},
		{"Pull_Request", `{}`},
	} {
		f.Add(s.event, uint8(encJSON), []byte(s.payload))
	}
	f.Add("pull_request", uint8(encRawForm), []byte("payload=%zz"))
	f.Add("status", uint8(encRawForm), []byte("other=1&payload=%7B%7D"))
	f.Add("deployment", uint8(encRawForm), []byte("payload=%zz"))
}

// checkEvent fails t unless an accepted event is what its payload says.
func checkEvent(t *testing.T, event string, ev webhook.Event, want payloadShape) {
	switch event {
	case "ping":
		t.Fatal("a ping was queued")
	case "pull_request":
		checkPullRequest(t, ev, want.PullRequest)
	case "push":
		if ev.Ref != str(want.Ref) || ev.SHA != str(want.After) {
			t.Fatalf("push %q@%q, payload has %q@%q", ev.Ref, ev.SHA, str(want.Ref), str(want.After))
		}
		if len(ev.CloneURLs) == 0 || ev.CloneURLs[0] != str(want.Repository.CloneURL) {
			t.Fatalf("clone URLs %q, payload has %q", ev.CloneURLs, str(want.Repository.CloneURL))
		}
	case "status":
		if str(want.SHA) == "" || ev.SHA != *want.SHA || ev.Gate != (provider.Gate{StatusContext: str(want.Context)}) {
			t.Fatalf("status %q %+v, payload has %q %q", ev.SHA, ev.Gate, str(want.SHA), str(want.Context))
		}
		wantState := provider.GatePending
		switch str(want.State) {
		case "success":
			wantState = provider.GatePassed
		case "failure", "error":
			wantState = provider.GateFailed
		}
		if ev.GateState != wantState {
			t.Fatalf("status state %q read as %q, want %q", str(want.State), ev.GateState, wantState)
		}
	case "issue_comment":
		c, is := want.Comment, want.Issue
		if str(want.Action) != "created" || is == nil || is.PullRequest == nil || is.Number == nil || c == nil || c.ID == nil || ev.Comment == nil {
			t.Fatalf("queued an issue_comment that is not a new comment on a pull request: %+v", ev)
		}
		if ev.Comment.ID != *c.ID || ev.Comment.Number != *is.Number || ev.Comment.Body != str(c.Body) {
			t.Fatalf("comment %+v does not match the payload's %+v on %d", ev.Comment, c, *is.Number)
		}
		if c.User != nil && ev.Comment.Author != str(c.User.Login) {
			t.Fatalf("comment author %q, payload has %q", ev.Comment.Author, str(c.User.Login))
		}
		if !render.HasCommand(ev.Comment.Body) {
			t.Fatalf("queued a comment without a command: %q", ev.Comment.Body)
		}
	case "check_run":
		checkCheckRun(t, ev, want.CheckRun)
	}
}

// checkPullRequest fails t unless the event's pull request is the
// payload's.
func checkPullRequest(t *testing.T, ev webhook.Event, pr *prShape) {
	if pr == nil || pr.Number == nil || *pr.Number == 0 || ev.PullRequest == nil {
		t.Fatalf("queued a pull_request event without a pull request number: %+v", ev)
	}
	got := ev.PullRequest
	if got.Repository != ev.Repository || got.Number != *pr.Number || got.State != str(pr.State) ||
		got.Draft != (pr.Draft != nil && *pr.Draft) {
		t.Fatalf("pull request %+v does not match the payload's %+v", got, pr)
	}
	var head, sha, base string
	if pr.Head != nil {
		head, sha = str(pr.Head.Ref), str(pr.Head.SHA)
	}
	if pr.Base != nil {
		base = str(pr.Base.Ref)
	}
	if got.HeadBranch != head || got.HeadSHA != sha || got.BaseBranch != base || ev.SHA != sha {
		t.Fatalf("branches %q@%q -> %q (event sha %q), payload has %q@%q -> %q", got.HeadBranch, got.HeadSHA, got.BaseBranch, ev.SHA, head, sha, base)
	}
	var labels []string
	for _, l := range pr.Labels {
		if l == nil {
			labels = append(labels, "")
			continue
		}
		labels = append(labels, str(l.Name))
	}
	if !slices.Equal(got.Labels, labels) {
		t.Fatalf("labels %q, payload has %q", got.Labels, labels)
	}
}

// checkCheckRun fails t unless the event's gate is the payload's check run.
func checkCheckRun(t *testing.T, ev webhook.Event, cr *checkRunShape) {
	if cr == nil || str(cr.HeadSHA) == "" || ev.SHA != *cr.HeadSHA || ev.Gate != (provider.Gate{CheckRun: str(cr.Name), App: cr.app()}) {
		t.Fatalf("check run %q %+v, payload has %+v", ev.SHA, ev.Gate, cr)
	}
	wantState := provider.GatePending
	if str(cr.Status) == "completed" {
		switch str(cr.Conclusion) {
		case "success":
			wantState = provider.GatePassed
		case "neutral", "skipped", "stale":
		default:
			wantState = provider.GateFailed
		}
	}
	if ev.GateState != wantState {
		t.Fatalf("check run %q/%q read as %q, want %q", str(cr.Status), str(cr.Conclusion), ev.GateState, wantState)
	}
}
