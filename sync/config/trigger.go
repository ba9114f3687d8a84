// Triggers: whether a pull request matches an application.

package config

import (
	"fmt"
	"slices"
	"strings"
)

// MergeQueueBranchPrefix begins the branches GitHub's merge queue makes
// (gh-readonly-queue/<base>/pr-<number>-<sha>): the queue's own commits,
// never a pull request of anyone's to preview.
const MergeQueueBranchPrefix = "gh-readonly-queue/"

// MatchResult says whether a pull request matches an application's trigger,
// and if not, why.
type MatchResult struct {
	Match  bool
	Reason string
}

// Matches applies the trigger filters to an open pull request.
func (a *Application) Matches(pr PullRequestView) MatchResult {
	if strings.HasPrefix(pr.HeadBranch, MergeQueueBranchPrefix) {
		// Whatever the trigger says: a merge group is reported on
		// (mergeQueue), never deployed.
		return MatchResult{Reason: "head branch " + MergeQueueBranchPrefix + "... is the merge queue's"}
	}
	if pr.Draft && !a.Trigger.Drafts {
		return MatchResult{Reason: "draft pull requests are off"}
	}
	for _, l := range a.Trigger.Labels {
		if !slices.Contains(pr.Labels, l) {
			return MatchResult{Reason: fmt.Sprintf("label %q is required", l)}
		}
	}
	for _, l := range a.Trigger.ExcludeLabels {
		if slices.Contains(pr.Labels, l) {
			return MatchResult{Reason: fmt.Sprintf("label %q is excluded", l)}
		}
	}
	if a.headBranch != nil && !a.headBranch.MatchString(pr.HeadBranch) {
		return MatchResult{Reason: fmt.Sprintf("head branch %q does not match %s", pr.HeadBranch, a.Trigger.HeadBranch)}
	}
	if a.baseBranch != nil && !a.baseBranch.MatchString(pr.BaseBranch) {
		return MatchResult{Reason: fmt.Sprintf("base branch %q does not match %s", pr.BaseBranch, a.Trigger.BaseBranch)}
	}
	return a.trusted(pr)
}

// PullRequestView is what the trigger filters look at.
type PullRequestView struct {
	Draft      bool
	Labels     []string
	HeadBranch string
	BaseBranch string
	// Fork says the head branch is in another repository.
	Fork   bool
	Author string
	// Trust holds what was looked up about the author and the labels
	// (trust.go); nil: nothing.
	Trust *Trust
}
