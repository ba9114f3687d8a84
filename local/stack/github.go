package stack

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/petri-dev/petri/local/githubapi"
)

// DemoRepository is the GitHub repository whose pull requests
// examples/app/config-repo turns into environments.
const DemoRepository = "petri-dev/hello"

// DemoLabel is the label the demo application's trigger requires.
const DemoLabel = "preview"

// pulls remembers which pull requests exist on the stand-in, which panics on
// unknown ones.
type pulls struct {
	mu    sync.Mutex
	known map[int]bool
}

var webhookClient = &http.Client{Transport: &http.Transport{Proxy: nil}}

// deliver sends a webhook to sync the way GitHub does: signed, to the
// webhook URL (through the ingress and sync's Service).
func (s *Stack) deliver(ctx context.Context, number int, action string) error {
	return s.deliverOn(ctx, DemoRepository, number, action)
}

// deliverOn sends a repository's pull_request webhook.
func (s *Stack) deliverOn(ctx context.Context, repo string, number int, action string) error {
	d, err := s.GitHub.PullRequestEvent(repo, number, action)
	if err != nil {
		return err
	}
	resp, err := d.Send(ctx, webhookClient, s.WebhookURL, s.WebhookSecret)
	if err != nil {
		return fmt.Errorf("deliver %s webhook: %w", d.Event, err)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("deliver %s webhook: sync answered %s: %s", d.Event, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

func (s *Stack) pullExists(number int) bool {
	s.pulls.mu.Lock()
	defer s.pulls.mu.Unlock()
	return s.pulls.known[number]
}

// OpenPullRequest opens a pull request on the stand-in (labelled for the
// demo application) and delivers the pull_request "opened" webhook. Number 0
// picks the next free number.
func (s *Stack) OpenPullRequest(ctx context.Context, number int, title string) (githubapi.PullRequest, error) {
	s.pulls.mu.Lock()
	if s.pulls.known == nil {
		s.pulls.known = map[int]bool{}
	}
	if number == 0 {
		number = 1
		for s.pulls.known[number] {
			number++
		}
	}
	if s.pulls.known[number] {
		s.pulls.mu.Unlock()
		return githubapi.PullRequest{}, fmt.Errorf("pull request #%d exists already", number)
	}
	s.pulls.known[number] = true
	s.pulls.mu.Unlock()
	if title == "" {
		title = fmt.Sprintf("Change number %d", number)
	}
	sha := newSHA(number)
	if err := s.pushCommitImage(ctx, sha); err != nil {
		return githubapi.PullRequest{}, err
	}
	pr := s.GitHub.OpenPullRequest(DemoRepository, githubapi.PullRequest{
		Number:  number,
		Title:   title,
		HeadRef: fmt.Sprintf("feature/change-%d", number),
		HeadSHA: sha,
		Labels:  []string{DemoLabel},
	})
	return pr, s.deliver(ctx, number, "opened")
}

// PushCommit moves the pull request's head to a new commit and delivers
// the "synchronize" webhook.
func (s *Stack) PushCommit(ctx context.Context, number int) (githubapi.PullRequest, error) {
	if !s.pullExists(number) {
		return githubapi.PullRequest{}, fmt.Errorf("no pull request #%d", number)
	}
	sha := newSHA(number)
	if err := s.pushCommitImage(ctx, sha); err != nil {
		return githubapi.PullRequest{}, err
	}
	pr := s.GitHub.UpdatePullRequest(DemoRepository, number, func(p *githubapi.PullRequest) { p.HeadSHA = sha })
	return pr, s.deliver(ctx, number, "synchronize")
}

// ClosePullRequest closes the pull request and delivers the "closed"
// webhook.
func (s *Stack) ClosePullRequest(ctx context.Context, number int) (githubapi.PullRequest, error) {
	if !s.pullExists(number) {
		return githubapi.PullRequest{}, fmt.Errorf("no pull request #%d", number)
	}
	pr := s.GitHub.UpdatePullRequest(DemoRepository, number, func(p *githubapi.PullRequest) { p.State = "closed" })
	return pr, s.deliver(ctx, number, "closed")
}

// OpenPullRequestOn opens a pull request labelled DemoLabel on another
// repository of the stand-in (one an application of Options.ConfigSource
// watches) and delivers its "opened" webhook. It pushes no image.
func (s *Stack) OpenPullRequestOn(ctx context.Context, repo string, number int, title string) (githubapi.PullRequest, error) {
	pr := s.GitHub.OpenPullRequest(repo, githubapi.PullRequest{
		Number:  number,
		Title:   title,
		HeadRef: fmt.Sprintf("feature/change-%d", number),
		HeadSHA: githubapi.SHA(fmt.Sprintf("%s#%d@%s", repo, number, randomHex(8))),
		Labels:  []string{DemoLabel},
	})
	return pr, s.deliverOn(ctx, repo, number, "opened")
}

// PullRequest returns the stand-in's state of a pull request.
func (s *Stack) PullRequest(number int) (githubapi.PullRequest, bool) {
	if !s.pullExists(number) {
		return githubapi.PullRequest{}, false
	}
	return s.GitHub.PullRequest(DemoRepository, number), true
}

// pushCommitImage pushes the example application's image tagged with the
// commit's short id on the real node, as the pull request's CI would
// (examples/app/config-repo deploys that tag); nothing on the process node.
func (s *Stack) pushCommitImage(ctx context.Context, sha string) error {
	if s.RealNode == nil {
		return nil
	}
	if err := s.PushAppImage(ctx, short(sha)); err != nil {
		return fmt.Errorf("push the example application's image for commit %s: %w", short(sha), err)
	}
	return nil
}

// newSHA makes a fresh commit id.
func newSHA(number int) string {
	return githubapi.SHA(fmt.Sprintf("%s#%d@%s", DemoRepository, number, randomHex(8)))
}
