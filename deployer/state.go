package deployer

import (
	"helm.sh/helm/v3/pkg/release"
)

// Action is what Deploy does for a release, chosen from its stored state
// rather than by trying install and falling back to upgrade: a blind retry
// cannot tell "never installed" from "a previous pod died holding the lock".
type Action string

const (
	// ActionInstall: no release record exists (or only an uninstalled one,
	// which Helm's install replaces).
	ActionInstall Action = "install"
	// ActionUpgrade: the release exists in a settled state (deployed, failed,
	// superseded); Helm upgrades a failed release even when no revision was
	// ever deployed.
	ActionUpgrade Action = "upgrade"
	// ActionUnlockUpgrade: the latest record is stuck in a pending state
	// because the pod running the previous operation was killed. Helm refuses
	// to act on a pending release (it reads as a lock), so the record is first
	// marked failed, then upgraded.
	ActionUnlockUpgrade Action = "unlock-upgrade"
)

// ChooseAction decides what Deploy does given the release's latest record
// (nil when there is none). It is the deployer's model of release state,
// after fluxcd helm-controller's internal/reconcile/state.go; it assumes the
// operator runs at most one deployer per release at a time, so a pending
// record always belongs to a dead pod.
func ChooseAction(latest *release.Release) Action {
	if latest == nil || latest.Info == nil {
		return ActionInstall
	}
	switch latest.Info.Status {
	case release.StatusUninstalled:
		return ActionInstall
	case release.StatusDeployed, release.StatusFailed, release.StatusSuperseded:
		return ActionUpgrade
	default:
		// pending-install, pending-upgrade, pending-rollback, and the two
		// that a dead pod can equally leave behind: uninstalling (an
		// interrupted undeploy) and unknown.
		return ActionUnlockUpgrade
	}
}
