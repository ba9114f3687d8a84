// Package provider is what sync needs from a code host, as three small
// roles: a pull-request source (list, read, and the CI gate of a commit), a
// reporter (commit status, the one comment, deployments) and a command
// reader (comments, reactions, permission). The GitHub implementation lives
// in provider/github; tests point it at a local stand-in of the GitHub API.
package provider

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// PullRequest is what sync knows about one pull request.
type PullRequest struct {
	// Repository is owner/name.
	Repository string
	Number     int
	// State is "open" or "closed".
	State      string
	Merged     bool
	Draft      bool
	Title      string
	Author     string
	HeadBranch string
	HeadSHA    string
	BaseBranch string
	Labels     []string
	URL        string
	CreatedAt  time.Time
	UpdatedAt  time.Time
	// Fork says the head branch is in another repository than the pull
	// request's (a fork), or in one the forge no longer shows (a deleted
	// fork): its author chose everything in it.
	Fork bool
	// Trust is what sync looked up of the author's permission and of who
	// added the labels, where an application's trigger needs it; a forge
	// never fills it in.
	Trust *Trust
}

// Trust is what sync learned of who stands behind a pull request, beyond
// what a listing says.
type Trust struct {
	// AuthorPermission is the author's permission (PermissionAdmin, ...);
	// empty when not looked up.
	AuthorPermission string
	// WriterLabels are the labels that someone with write access added
	// last.
	WriterLabels []string
}

// LabelHistory is a pull-request source that can say who added a label
// to a pull request. A forge that cannot say does not implement it, and
// no label on a fork's pull request there counts as added by a writer.
type LabelHistory interface {
	// LabelAdders returns, by label, the login that last added each label
	// the forge records an addition of on the pull request: one read of
	// its history for all its labels.
	LabelAdders(ctx context.Context, repository string, number int) (map[string]string, error)
}

// Open reports whether the pull request is open.
func (p PullRequest) Open() bool { return p.State == "open" }

// HasLabel reports whether the pull request carries the label.
func (p PullRequest) HasLabel(l string) bool { return slices.Contains(p.Labels, l) }

// Gate names the CI result that must be successful on a commit before sync
// deploys it: a check run or a commit status context.
type Gate struct {
	CheckRun      string
	StatusContext string
	// App, with CheckRun, is the slug of the app whose run counts; runs of
	// that name by any other app are not the gate's.
	App string
}

// String names the gate for people.
func (g Gate) String() string {
	if g.CheckRun != "" && g.App != "" {
		return "check run " + g.CheckRun + " of app " + g.App
	}
	if g.CheckRun != "" {
		return "check run " + g.CheckRun
	}
	return "status " + g.StatusContext
}

// GateState is the result of a gate on one commit.
type GateState string

// Gate states.
const (
	GatePassed  GateState = "Passed"
	GatePending GateState = "Pending"
	GateFailed  GateState = "Failed"
)

// CommitStatus is the status sync posts on a pull request's head commit.
type CommitStatus struct {
	// State is pending, success, failure or error.
	State       string
	Context     string
	Description string
	TargetURL   string
}

// The roles below are what sync needs of a forge, one interface each, so
// that a forge implements them one at a time and a test stands in for one
// alone. What sync lists and reads of pull requests decides which
// environments exist; what it reports changes nothing it decides; what it
// reads of commands is the only input people write on a pull request.

// PullRequestSource lists and reads pull requests and the CI gate of their
// head commits: everything the plan of a repository is decided on.
type PullRequestSource interface {
	// ListOpenPullRequests returns every open pull request of a repository.
	// An error means "unknown", never "none".
	ListOpenPullRequests(ctx context.Context, repository string) ([]PullRequest, error)
	// GetPullRequest reads one pull request, open or not.
	GetPullRequest(ctx context.Context, repository string, number int) (PullRequest, error)
	// GateState reads the state of a gate on a commit and a one-line reason.
	GateState(ctx context.Context, repository, sha string, gate Gate) (GateState, string, error)
}

// Reporter tells the people on a pull request what became of it: a commit
// status per application, the one comment, and deployments.
type Reporter interface {
	// SetCommitStatus posts a commit status.
	SetCommitStatus(ctx context.Context, repository, sha string, status CommitStatus) error
	// UpsertComment makes the pull request carry exactly one comment with
	// marker in its body, creating it once and editing it in place after.
	UpsertComment(ctx context.Context, repository string, number int, marker, body string) error
	// FindDeployment returns the newest deployment of a commit to an
	// environment; 0 when there is none.
	FindDeployment(ctx context.Context, repository, sha, environment string) (int64, error)
	// CreateDeployment creates a deployment and returns its id.
	CreateDeployment(ctx context.Context, repository string, d Deployment) (int64, error)
	// SetDeploymentStatus posts a status of a deployment.
	SetDeploymentStatus(ctx context.Context, repository string, id int64, st DeploymentStatus) error
}

// NewCommits is a Reporter that compares a commit's first status of a
// context with the latest the forge shows before posting it, so that a
// restarted sync or a new leader posts no status twice. NewCommit tells it
// that no other process can have posted one of context on sha: the caller
// saw the commit become a pull request's head while it led (after another
// head), so there is nothing to compare with and the read is spared. It
// changes nothing once a status of that commit and context is known. (The
// one exception: a head pushed back to a commit that was the head before
// the caller led, whose status an earlier leader may have posted; the same
// status is then posted once more, which costs what the read would have.)
type NewCommits interface {
	NewCommit(repository, sha, context string)
}

// CommandReader reads the comments of pull requests (sync's own and the
// /petri commands people wrote), answers a command with a reaction, and
// says whether its author may give it.
type CommandReader interface {
	// ListComments returns every comment of a pull request, oldest first.
	ListComments(ctx context.Context, repository string, number int) ([]Comment, error)
	// ListRepositoryComments returns the comments on every pull request and
	// issue of a repository updated at or after since, oldest first: the
	// resync's way to find commands whose webhook never arrived.
	ListRepositoryComments(ctx context.Context, repository string, since time.Time) ([]Comment, error)
	// React leaves a reaction (ReactionAccepted, ReactionRefused) on a
	// comment; leaving the same one again changes nothing.
	React(ctx context.Context, repository string, commentID int64, reaction string) error
	// Permission is a user's permission on a repository: PermissionAdmin,
	// PermissionWrite (which a maintainer has too), PermissionRead or
	// PermissionNone.
	Permission(ctx context.Context, repository, user string) (string, error)
}

// Provider is one forge in all three roles, as the GitHub implementation
// is.
type Provider interface {
	PullRequestSource
	Reporter
	CommandReader
}

// Delivery is what sync reads of one forge's webhook delivery, whatever the
// forge; a forge's own event adds what only it sends.
type Delivery struct {
	// Kind is the forge's name of the event (its event header).
	Kind string
	// Action is the forge's: opened, closed, ... for pull requests;
	// created, edited, deleted for comments.
	Action string
	// Repository is the repository's path on its forge (owner/name, or a
	// GitLab project's full path; the target of a pull request from a
	// fork).
	Repository string
	// Sender is the user who acted.
	Sender string
	// PullRequest is the pull request of a pull-request event, and of a
	// comment on one when the forge includes it.
	PullRequest *PullRequest
	// Comment is the comment of a comment event, its Number the pull
	// request's (or issue's).
	Comment *Comment
	// IsPull says a comment is on a pull request (not an issue).
	IsPull bool
}

// Comment is one comment on a pull request.
type Comment struct {
	ID int64
	// Number is the pull request (or issue) it is on.
	Number    int
	Author    string
	Body      string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Permissions a user can have on a repository, as GitHub names them.
const (
	PermissionAdmin = "admin"
	PermissionWrite = "write"
	PermissionRead  = "read"
	PermissionNone  = "none"
)

// Reactions sync leaves on a command: accepted or refused.
const (
	ReactionAccepted = "+1"
	ReactionRefused  = "-1"
)

// Deployment is a deployment of a commit to an environment, transient
// (it goes away with the pull request) and never production.
type Deployment struct {
	SHA         string
	Environment string
	Description string
}

// DeploymentStatus is one state of a deployment: in_progress, success
// (with EnvironmentURL), failure or inactive.
type DeploymentStatus struct {
	State          string
	Description    string
	EnvironmentURL string
	LogURL         string
}

// Forgetter is a role's implementation that remembers something per pull
// request (the GitHub reporter remembers the comment it keeps on each). Sync tells it
// when a closed pull request's last feedback is posted and when a
// repository leaves the config, so that what it remembers stays bounded by
// what is open.
type Forgetter interface {
	ForgetPullRequest(repository string, number int)
	ForgetRepository(repository string)
}

// RateLimitError says the code host refused for rate limiting; nothing is
// tried again before Until.
type RateLimitError struct {
	Until time.Time
	Err   error
}

func (e *RateLimitError) Error() string {
	return fmt.Sprintf("rate limited until %s: %v", e.Until.UTC().Format(time.RFC3339), e.Err)
}

func (e *RateLimitError) Unwrap() error { return e.Err }

// ErrNotFound is returned for a pull request or commit that does not exist.
var ErrNotFound = errors.New("not found")
