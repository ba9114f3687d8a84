package deployer_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/release"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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

// holdLease makes the release's Lease look held by another deployer that
// renews it every half second until the returned function stops it.
func holdLease(t *testing.T, ns, name, holder string, duration int32) (stop func()) {
	t.Helper()
	ctx := context.Background()
	leases := env.Clientset.CoordinationV1().Leases(ns)
	now := metav1.NowMicro()
	lease, err := leases.Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "petri-release-" + name},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: &holder, LeaseDurationSeconds: &duration,
			AcquireTime: &now, RenewTime: &now,
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				now := metav1.NowMicro()
				lease.Spec.RenewTime = &now
				if l, err := leases.Update(ctx, lease, metav1.UpdateOptions{}); err == nil {
					lease = l
				}
			}
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { close(done); <-stopped }) }
	t.Cleanup(stop)
	return stop
}

// A pending record whose operation may still run (its deployer holds the
// release's lock and renews it) is left alone: Deploy waits instead of
// unlocking it, and says who holds the release. Once the lock is released,
// Deploy recovers the record.
func TestDeployLeavesAPendingReleaseAloneWhileItsLockIsHeld(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ns := namespace(t)
	d := newDeployer(t, ns)
	stuck := plantPending(t, ns, "web", release.StatusPendingInstall, greeterValues("in flight", "v1"))
	stop := holdLease(t, ns, "web", "deployer-in-flight", 30)

	short, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err := d.Deploy(short, deployer.DeployRequest{Release: "web", Chart: localChart(t, "greeter"), Values: greeterValues("second", "v2")})
	require.Error(t, err, "a release whose lock is held is not touched")
	assert.Contains(t, err.Error(), "deployer-in-flight")
	last, err := actionConfig(t, ns).Releases.Last("web")
	require.NoError(t, err)
	assert.Equal(t, stuck.Version, last.Version)
	assert.Equal(t, release.StatusPendingInstall, last.Info.Status, "the running operation's record is not unlocked")

	// The holder finishes and releases the lock.
	stop()
	lease, err := env.Clientset.CoordinationV1().Leases(ns).Get(ctx, "petri-release-web", metav1.GetOptions{})
	require.NoError(t, err)
	lease.Spec.HolderIdentity = nil
	_, err = env.Clientset.CoordinationV1().Leases(ns).Update(ctx, lease, metav1.UpdateOptions{})
	require.NoError(t, err)
	rel, err := d.Deploy(ctx, deployer.DeployRequest{Release: "web", Chart: localChart(t, "greeter"), Values: greeterValues("second", "v2")})
	require.NoError(t, err)
	assert.Equal(t, release.StatusDeployed, rel.Info.Status)
	assert.Equal(t, "second", configMapData(ctx, ns, "web-greeter")["message"])
}

// A lock whose holder stopped renewing it (its pod was killed) is taken over
// once the holder's lease duration has passed without a renewal, and the
// pending record it left is recovered.
func TestDeployTakesOverTheLockOfAStoppedDeployer(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ns := namespace(t)
	d := newDeployer(t, ns)
	plantPending(t, ns, "web", release.StatusPendingInstall, greeterValues("killed", "v1"))
	stop := holdLease(t, ns, "web", "deployer-killed", 2)
	stop()

	start := time.Now()
	rel, err := d.Deploy(ctx, deployer.DeployRequest{Release: "web", Chart: localChart(t, "greeter"), Values: greeterValues("recovered", "v2")})
	require.NoError(t, err)
	assert.GreaterOrEqual(t, time.Since(start), 2*time.Second, "waited out the stopped holder's lease")
	assert.Equal(t, release.StatusDeployed, rel.Info.Status)
	_, err = env.Clientset.CoordinationV1().Leases(ns).Get(ctx, "petri-release-web", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "released after the deploy: the lease is deleted, got %v", err)
}

// Two deploys of one release at once run one after the other: both succeed
// and neither unlocks the other's record.
func TestConcurrentDeploysOfOneReleaseTakeTurns(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ns := namespace(t)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = newDeployer(t, ns).Deploy(ctx, deployer.DeployRequest{
				Release: "web", Chart: localChart(t, "greeter"),
				Values: map[string]any{"replicas": 0, "message": fmt.Sprint("deploy ", i)},
				Wait:   true, Timeout: 30 * time.Second,
			})
		}()
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	history, err := actionConfig(t, ns).Releases.History("web")
	require.NoError(t, err)
	statuses := map[int]release.Status{}
	for _, r := range history {
		statuses[r.Version] = r.Info.Status
	}
	assert.Equal(t, map[int]release.Status{1: release.StatusSuperseded, 2: release.StatusDeployed}, statuses)
}
