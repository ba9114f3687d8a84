package stack

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/petri-dev/petri/local/githubapi"
)

// ControlHandler lets another process play GitHub against a running stack
// (petri-local pr): open, push to or close a pull request of
// DemoRepository, each followed by its signed webhook. It listens on
// loopback only and touches nothing but the GitHub stand-in.
//
//	POST /pulls?number=N&title=T    open (number optional)
//	POST /pulls/{number}/push       push a new commit
//	POST /pulls/{number}/close      close
func (s *Stack) ControlHandler() http.Handler {
	mux := http.NewServeMux()
	answer := func(w http.ResponseWriter, pr githubapi.PullRequest, what string, err error) {
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "pull request #%d %q %s on %s: head %s (%s), webhook delivered to %s\n",
			pr.Number, pr.Title, what, DemoRepository, short(pr.HeadSHA), pr.HeadRef, s.WebhookURL)
	}
	mux.HandleFunc("POST /pulls", func(w http.ResponseWriter, r *http.Request) {
		n := 0
		if v := r.URL.Query().Get("number"); v != "" {
			var err error
			if n, err = strconv.Atoi(v); err != nil || n < 1 {
				http.Error(w, "number must be a positive whole number", http.StatusBadRequest)
				return
			}
		}
		pr, err := s.OpenPullRequest(r.Context(), n, r.URL.Query().Get("title"))
		answer(w, pr, "opened", err)
	})
	mux.HandleFunc("POST /pulls/{number}/{action}", func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(r.PathValue("number"))
		if err != nil {
			http.Error(w, "number must be a whole number", http.StatusBadRequest)
			return
		}
		var pr githubapi.PullRequest
		switch r.PathValue("action") {
		case "push":
			pr, err = s.PushCommit(r.Context(), n)
			answer(w, pr, "got a new commit", err)
		case "close":
			pr, err = s.ClosePullRequest(r.Context(), n)
			answer(w, pr, "closed", err)
		default:
			http.NotFound(w, r)
		}
	})
	return mux
}

// Control asks a running stack's ControlHandler at addr to act on a pull
// request: action is open, push or close.
func Control(ctx context.Context, addr, action string, number int, title string) (string, error) {
	var u string
	switch action {
	case "open":
		q := url.Values{}
		if number > 0 {
			q.Set("number", strconv.Itoa(number))
		}
		if title != "" {
			q.Set("title", title)
		}
		u = "http://" + addr + "/pulls?" + q.Encode()
	case "push", "close":
		if number < 1 {
			return "", fmt.Errorf("%s needs the pull request's number", action)
		}
		u = fmt.Sprintf("http://%s/pulls/%d/%s", addr, number, action)
	default:
		return "", fmt.Errorf("unknown action %q: want open, push or close", action)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return "", err
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil}}).Do(req)
	if err != nil {
		return "", fmt.Errorf("is make run still running? %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s", strings.TrimSpace(string(body)))
	}
	return strings.TrimSpace(string(body)), nil
}
