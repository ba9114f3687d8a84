// Gitea's webhooks: the signature check (X-Gitea-Signature) and the reading
// of pull_request and issue_comment payloads into provider types.

package gitea

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	sdk "code.gitea.io/sdk/gitea"

	"github.com/petri-dev/petri/sync/provider"
)

// Webhook headers Gitea sends. Gitea also sends X-GitHub-Event and
// X-Hub-Signature-256, but its payloads are Gitea's, not GitHub's: a
// delivery is read as Gitea's by X-Gitea-Event.
const (
	HeaderEvent     = "X-Gitea-Event"
	HeaderSignature = "X-Gitea-Signature"
	HeaderDelivery  = "X-Gitea-Delivery"
)

// Event kinds sync reads (X-Gitea-Event). Gitea sends comments on pull
// requests as issue_comment too (X-Gitea-Event-Type pull_request_comment).
const (
	EventPullRequest  = "pull_request"
	EventIssueComment = "issue_comment"
)

// ErrBadSignature says a delivery's X-Gitea-Signature is missing or is not
// the HMAC of its body with the webhook's secret.
var ErrBadSignature = errors.New("gitea webhook signature missing or wrong")

// ErrUnknownEvent says a delivery is of a kind sync does not read.
var ErrUnknownEvent = errors.New("gitea webhook event not read by sync")

// ValidSignature reports whether signature (X-Gitea-Signature: the hex
// HMAC-SHA256 of the body with the secret) is right, comparing in constant
// time. An empty secret validates nothing.
func ValidSignature(secret, body []byte, signature string) bool {
	if len(secret) == 0 {
		return false
	}
	got, err := hex.DecodeString(strings.TrimSpace(signature))
	if err != nil || len(got) != sha256.Size {
		return false
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return hmac.Equal(got, mac.Sum(nil))
}

// SignaturePresent reports whether a delivery carries a well-formed
// X-Gitea-Signature (64 hexadecimal digits); one that does not is refused
// before its body is read.
func SignaturePresent(h http.Header) bool {
	sig := strings.TrimSpace(h.Get(HeaderSignature))
	return len(sig) == hex.EncodedLen(sha256.Size) && strings.Trim(strings.ToLower(sig), "0123456789abcdef") == ""
}

// Verified reports whether body is signed with the secret of the
// repository it names (secrets.For): a repository with a secret of its own
// is never accepted signed with another's. Unsigned yet, only the
// repository's name is read of the body, to know whose secret signs it; a
// body that names none is checked with the forge-wide secret.
func Verified(h http.Header, body []byte, secrets provider.WebhookSecrets) bool {
	var named struct {
		Repository struct {
			FullName string `json:"full_name"`
		} `json:"repository"`
	}
	_ = json.Unmarshal(body, &named)
	return ValidSignature(secrets.For(named.Repository.FullName), body, h.Get(HeaderSignature))
}

// ReadVerified reads a delivery's body (at most limit bytes) and checks its
// signature (SignaturePresent before reading, Verified after), for a
// receiver of Gitea's hooks other than sync's webhook handler, which makes
// the same two checks around its own bounded read. A body of known length
// is read into a buffer of that length. It returns the event kind and the
// body.
func ReadVerified(r *http.Request, secrets provider.WebhookSecrets, limit int64) (string, []byte, error) {
	if secrets.Empty() || !SignaturePresent(r.Header) {
		return "", nil, ErrBadSignature
	}
	if r.ContentLength > limit {
		return "", nil, fmt.Errorf("gitea webhook body over %d bytes", limit)
	}
	var body []byte
	var err error
	if r.ContentLength >= 0 {
		body = make([]byte, r.ContentLength)
		_, err = io.ReadFull(r.Body, body)
	} else {
		body, err = io.ReadAll(io.LimitReader(r.Body, limit+1))
	}
	if err != nil {
		return "", nil, fmt.Errorf("read gitea webhook: %w", err)
	}
	if int64(len(body)) > limit {
		return "", nil, fmt.Errorf("gitea webhook body over %d bytes", limit)
	}
	if !Verified(r.Header, body, secrets) {
		return "", nil, ErrBadSignature
	}
	return r.Header.Get(HeaderEvent), body, nil
}

// Event is what sync reads of one delivery (Kind is EventPullRequest or
// EventIssueComment; Action is Gitea's: opened, reopened, closed, merged or
// not as PullRequest.Merged says, edited, synchronized, label_updated, ...
// for pull requests). Gitea sends nothing beyond what every forge does.
type Event = provider.Delivery

type pullRequestPayload struct {
	Action      string           `json:"action"`
	Number      int64            `json:"number"`
	PullRequest *sdk.PullRequest `json:"pull_request"`
	Repository  *sdk.Repository  `json:"repository"`
	Sender      *sdk.User        `json:"sender"`
}

type issueCommentPayload struct {
	Action      string           `json:"action"`
	Issue       *sdk.Issue       `json:"issue"`
	PullRequest *sdk.PullRequest `json:"pull_request"`
	Comment     *sdk.Comment     `json:"comment"`
	Repository  *sdk.Repository  `json:"repository"`
	Sender      *sdk.User        `json:"sender"`
	IsPull      bool             `json:"is_pull"`
}

// ParseWebhook reads a pull_request or issue_comment payload; other kinds
// are ErrUnknownEvent.
func ParseWebhook(kind string, body []byte) (Event, error) {
	switch kind {
	case EventPullRequest:
		var p pullRequestPayload
		if err := json.Unmarshal(body, &p); err != nil {
			return Event{}, fmt.Errorf("gitea pull_request payload: %w", err)
		}
		if p.PullRequest == nil || p.Repository == nil || p.Repository.FullName == "" {
			return Event{}, errors.New("gitea pull_request payload without pull_request or repository")
		}
		pr := convert(p.Repository.FullName, p.PullRequest)
		return Event{Kind: kind, Action: p.Action, Repository: p.Repository.FullName, Sender: login(p.Sender), PullRequest: &pr}, nil
	case EventIssueComment:
		var p issueCommentPayload
		if err := json.Unmarshal(body, &p); err != nil {
			return Event{}, fmt.Errorf("gitea issue_comment payload: %w", err)
		}
		if p.Comment == nil || p.Issue == nil || p.Repository == nil || p.Repository.FullName == "" {
			return Event{}, errors.New("gitea issue_comment payload without comment, issue or repository")
		}
		c := convertComment(p.Comment, int(p.Issue.Index))
		ev := Event{Kind: kind, Action: p.Action, Repository: p.Repository.FullName, Sender: login(p.Sender), Comment: &c,
			IsPull: p.IsPull || p.Issue.PullRequest != nil}
		if p.PullRequest != nil {
			pr := convert(p.Repository.FullName, p.PullRequest)
			ev.PullRequest = &pr
		}
		return ev, nil
	}
	return Event{}, fmt.Errorf("%w: %q", ErrUnknownEvent, kind)
}

func login(u *sdk.User) string {
	if u == nil {
		return ""
	}
	return u.UserName
}
