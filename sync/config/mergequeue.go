// The merge queue: where petri/<app> is a required check and a branch
// merges through GitHub's merge queue, the queue waits for that status on
// each merge group's commit (gh-readonly-queue/<base>/pr-<number>-<sha>),
// which Petri never deploys. An application says what its status there is.

package config

import (
	"slices"
	"strings"
)

// Values of an application's mergeQueue.
const (
	// MergeQueueSuccess posts success on every merge group: Petri does not
	// deploy merge groups, and never holds the queue up. The default.
	MergeQueueSuccess = "success"
	// MergeQueueEnvironment makes the merge group's status follow the pull
	// request's environment at its head: success once it is Ready there,
	// pending while it deploys, failure when it failed.
	MergeQueueEnvironment = "environment"
	// MergeQueueOff posts nothing on merge groups: for a queue that does
	// not require petri/<app>.
	MergeQueueOff = "off"
)

// MergeQueueModes are the values of mergeQueue, in the order they are
// documented.
var MergeQueueModes = []string{MergeQueueSuccess, MergeQueueEnvironment, MergeQueueOff}

// MergeQueueMode is the application's mergeQueue, MergeQueueSuccess when it
// names none.
func (a *Application) MergeQueueMode() string {
	if a.MergeQueue == "" {
		return MergeQueueSuccess
	}
	return a.MergeQueue
}

// validateMergeQueue checks mergeQueue: one of the modes, and only on
// GitHub, the one forge whose merge queue sends merge groups.
func validateMergeQueue(d *decoder, a *Application) {
	switch {
	case a.MergeQueue == "":
	case !slices.Contains(MergeQueueModes, a.MergeQueue):
		d.errorf("mergeQueue", "unknown value %q: mergeQueue must be one of %s", a.MergeQueue, strings.Join(MergeQueueModes, ", "))
	case a.ForgeName() != ForgeGitHub:
		d.errorf("mergeQueue", "%s sends no merge groups: mergeQueue is for GitHub's merge queue", a.ForgeName())
	}
}
