package deployer_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"helm.sh/helm/v3/pkg/release"

	"github.com/petri-dev/petri/deployer"
)

func TestChooseAction(t *testing.T) {
	t.Parallel()
	withStatus := func(s release.Status) *release.Release {
		return &release.Release{Name: "r", Version: 3, Info: &release.Info{Status: s}}
	}
	tests := []struct {
		name   string
		latest *release.Release
		want   deployer.Action
	}{
		{"no release", nil, deployer.ActionInstall},
		{"record without info", &release.Release{Name: "r"}, deployer.ActionInstall},
		{"uninstalled with history kept", withStatus(release.StatusUninstalled), deployer.ActionInstall},
		{"deployed", withStatus(release.StatusDeployed), deployer.ActionUpgrade},
		{"failed", withStatus(release.StatusFailed), deployer.ActionUpgrade},
		{"superseded", withStatus(release.StatusSuperseded), deployer.ActionUpgrade},
		{"pending-install", withStatus(release.StatusPendingInstall), deployer.ActionUnlockUpgrade},
		{"pending-upgrade", withStatus(release.StatusPendingUpgrade), deployer.ActionUnlockUpgrade},
		{"pending-rollback", withStatus(release.StatusPendingRollback), deployer.ActionUnlockUpgrade},
		{"uninstalling", withStatus(release.StatusUninstalling), deployer.ActionUnlockUpgrade},
		{"unknown", withStatus(release.StatusUnknown), deployer.ActionUnlockUpgrade},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, deployer.ChooseAction(tt.latest))
		})
	}
}
