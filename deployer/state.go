package deployer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr"
	"helm.sh/helm/v3/pkg/release"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/utils/ptr"
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
// after fluxcd helm-controller's internal/reconcile/state.go. It is called
// only while the deployer holds the release's lock (see lockRelease): no
// other Helm operation on the release can be running then, so a pending
// record belongs to one that ended without finishing it, and unlocking it
// is safe. Without the lock, a pending record may be a live operation's, and
// unlocking it would run two operations on one release at once.
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

// The release lock.
//
// Helm marks an operation in progress with a pending-* release record and
// refuses to start another while one is pending: the record reads as a lock.
// A deployer pod killed in the middle of an operation leaves that record
// behind for good, and the next operation has to mark it failed ("unlock")
// to go on. That is sound only when the operation that wrote the record can
// no longer be running, and the record cannot tell: Helm writes it once, with
// no owner and no heartbeat. So a deployer holds a Lease in the release's
// namespace, named after the release, for the whole of each Helm operation,
// and renews it while the operation runs:
//
//   - Deploy and Undeploy act on a release only while they hold its Lease.
//     A pending record seen then was written by an operation whose deployer
//     no longer holds the Lease: it ended, or its process died. That is the
//     precondition under which ChooseAction unlocks.
//   - A Lease held by another deployer is taken over only once that holder
//     has not renewed it for the lease duration it wrote, measured on this
//     deployer's own clock from when it first saw the holder's latest
//     renewal, so clocks need not agree (client-go's leader election does
//     the same). A holder tries a renewal that failed or timed out again
//     while the Lease is still its own; one that has not renewed it for
//     lockRenewDeadline, under the duration, cancels its operation's
//     context so that Helm stops before anyone may take over.
//   - A deployer releases the Lease by deleting it, on the condition that
//     it is still the version this deployer last wrote (so a Lease taken
//     over meanwhile is left to its new holder), and the next deployer
//     creates it again: one request to take a free Lease, one to give it
//     back. A Lease left without a holder is taken at once.
//
// The operator never starts two Jobs on one release (it asks the API server,
// not its cache, before it creates one), nor one while a pod of a deleted
// Job of the release still runs, and a Job's replacement pod starts only
// after the previous one terminated. The Lease makes the deployer safe on
// its own as well, whatever starts it.

// Lease timing. A live deployer renews every lockRenewEvery; a dead one's
// Lease is taken over lockDuration after its last renewal was seen.
const (
	lockDuration      = 15 * time.Second
	lockRenewEvery    = 2 * time.Second
	lockRenewDeadline = 12 * time.Second
	lockRetry         = 500 * time.Millisecond
)

// ErrReleaseLockLost means the deployer could not renew its release Lease in
// time, or another deployer took it over; the operation was cancelled.
var ErrReleaseLockLost = errors.New("release lock lost")

// LockName is the Lease that guards Helm operations on a release.
func LockName(release string) string { return "petri-release-" + release }

// releaseLock is one holder's view of a release's Lease.
type releaseLock struct {
	leases  coordinationv1client.LeaseInterface
	release string
	holder  string
	// lease is the Lease as last written by this holder.
	lease *coordinationv1.Lease
	// sent is when the write that took the Lease was sent.
	sent time.Time
}

// lockRelease waits until this deployer holds the release's Lease and keeps
// renewing it until unlock is called. The returned context is cancelled
// (cause ErrReleaseLockLost) if the Lease is lost meanwhile. Waiting ends
// with an error naming the holder when ctx ends first.
func (d *Deployer) lockRelease(ctx context.Context, release string) (context.Context, func(), error) {
	log := logr.FromContextOrDiscard(ctx).WithValues("release", release, "namespace", d.namespace)
	l := &releaseLock{leases: d.cs.CoordinationV1().Leases(d.namespace), release: release, holder: holderIdentity()}
	if err := l.acquire(ctx, log); err != nil {
		return nil, nil, err
	}
	lctx, cancel := context.WithCancelCause(ctx)
	kctx, stop := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		l.keep(kctx, cancel, log)
	}()
	unlock := func() {
		stop()
		<-stopped
		cancel(nil)
		if err := l.giveUp(); err != nil {
			log.Info("Release lock not released; it expires by itself", "lease", LockName(release), "error", err.Error())
		}
	}
	return lctx, unlock, nil
}

// holderIdentity names this deployer in the Lease: its pod (HOSTNAME in a
// pod) and a random suffix, unique per operation.
func holderIdentity() string {
	host := os.Getenv("HOSTNAME")
	if host == "" {
		host, _ = os.Hostname()
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return host + "_" + hex.EncodeToString(b)
}

func (l *releaseLock) acquire(ctx context.Context, log logr.Logger) error {
	name := LockName(l.release)
	var seenVersion string
	var seenAt time.Time
	waiting := false
	// lease is the Lease as last read; nil when there is none to read, so
	// the next try creates it.
	var lease *coordinationv1.Lease
	for {
		if lease == nil {
			l.sent = time.Now()
			created, err := l.leases.Create(ctx, l.fresh(name), metav1.CreateOptions{})
			if err == nil {
				l.lease = created
				return nil
			}
			if !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("lock release %s: create lease %s: %w", l.release, name, err)
			}
			if lease, err = l.get(ctx, name); err != nil {
				return err
			}
			if lease == nil {
				// Given up meanwhile.
				continue
			}
		}
		holder := ptr.Deref(lease.Spec.HolderIdentity, "")
		if holder != "" {
			if lease.ResourceVersion != seenVersion {
				seenVersion, seenAt = lease.ResourceVersion, time.Now()
			}
			duration := time.Duration(ptr.Deref(lease.Spec.LeaseDurationSeconds, int32(lockDuration/time.Second))) * time.Second
			if time.Since(seenAt) < duration {
				if !waiting {
					log.Info("Waiting for the release lock: another Helm operation on the release may be running", "holder", holder)
					waiting = true
				}
				select {
				case <-ctx.Done():
					return fmt.Errorf("release %s is locked by %s, whose Helm operation on it may still be running (lease %s): %w", l.release, holder, name, context.Cause(ctx))
				case <-time.After(lockRetry):
				}
				var err error
				if lease, err = l.get(ctx, name); err != nil {
					return err
				}
				continue
			}
			log.Info("Taking over the release lock from a holder that stopped renewing it", "holder", holder, "leaseDuration", duration)
			lease.Spec.LeaseTransitions = ptr.To(ptr.Deref(lease.Spec.LeaseTransitions, 0) + 1)
		}
		taken := l.fresh(name)
		taken.ObjectMeta = lease.ObjectMeta
		taken.Spec.LeaseTransitions = lease.Spec.LeaseTransitions
		l.sent = time.Now()
		updated, err := l.leases.Update(ctx, taken, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			if lease, err = l.get(ctx, name); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("lock release %s: take lease %s: %w", l.release, name, err)
		}
		l.lease = updated
		return nil
	}
}

// fresh is the Lease as this holder writes it when it takes it.
func (l *releaseLock) fresh(name string) *coordinationv1.Lease {
	now := metav1.NowMicro()
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: &l.holder, LeaseDurationSeconds: ptr.To(int32(lockDuration / time.Second)),
			AcquireTime: &now, RenewTime: &now,
		},
	}
}

// get reads the Lease; nil when there is none.
func (l *releaseLock) get(ctx context.Context, name string) (*coordinationv1.Lease, error) {
	lease, err := l.leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("lock release %s: get lease %s: %w", l.release, name, err)
	}
	return lease, nil
}

// keep renews the Lease until ctx ends (unlock). Renewal does not follow
// the operation's context: a deployer asked to stop (SIGTERM) keeps the
// Lease until its Helm call has returned. It gives the Lease up, and
// cancels the operation, only when the Lease is lost: another holder has
// it, or no renewal has succeeded for lockRenewDeadline, after which
// another deployer may soon take it over. A renewal that fails or times
// out (a slow API server) is tried again meanwhile, each attempt allowed
// the time left until that deadline: a saturated API server that answers
// in five seconds does not cost the release.
func (l *releaseLock) keep(ctx context.Context, lost context.CancelCauseFunc, log logr.Logger) {
	tick := time.NewTicker(lockRenewEvery)
	defer tick.Stop()
	// renewed is when the last renewal that succeeded was sent: another
	// deployer measures the Lease's duration from when it saw that write,
	// which is later.
	renewed := l.sent
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		sent := time.Now()
		err := l.renew(ctx, lockRenewDeadline-sent.Sub(renewed))
		if err == nil {
			renewed = sent
			continue
		}
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, ErrReleaseLockLost) || time.Since(renewed) >= lockRenewDeadline {
			log.Info("Release lock lost, cancelling the Helm operation", "error", err.Error(), "lastRenewal", renewed.Format(time.RFC3339Nano))
			lost(fmt.Errorf("%w: %w", ErrReleaseLockLost, err))
			return
		}
		log.Info("Release lock not renewed; trying again while it is still held", "error", err.Error(), "heldFor", lockRenewDeadline-time.Since(renewed))
	}
}

// renew writes the Lease's renewal, within timeout.
func (l *releaseLock) renew(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, max(timeout, lockRetry))
	defer cancel()
	lease := l.lease.DeepCopy()
	now := metav1.NowMicro()
	lease.Spec.RenewTime = &now
	updated, err := l.leases.Update(ctx, lease, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		cur, gerr := l.leases.Get(ctx, lease.Name, metav1.GetOptions{})
		if gerr != nil {
			return gerr
		}
		if holder := ptr.Deref(cur.Spec.HolderIdentity, ""); holder != l.holder {
			return fmt.Errorf("%w: lease %s is held by %q now", ErrReleaseLockLost, lease.Name, holder)
		}
		l.lease = cur
		return err
	}
	if err != nil {
		return err
	}
	l.lease = updated
	return nil
}

// giveUp releases the Lease by deleting it, so the next deployer takes it
// at once with a create. The delete is conditional on the version this
// holder last wrote: a Lease that another deployer took over meanwhile is
// its own, and is left alone.
func (l *releaseLock) giveUp() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := l.leases.Delete(ctx, l.lease.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{
		UID: ptr.To(l.lease.UID), ResourceVersion: ptr.To(l.lease.ResourceVersion),
	}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		// Gone already, or another holder's now.
		return nil
	}
	return err
}
