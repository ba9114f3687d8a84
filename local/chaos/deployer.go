package chaos

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"helm.sh/helm/v3/pkg/release"
	"k8s.io/apimachinery/pkg/types"

	"github.com/petri-dev/petri/local/stack"
)

// pendingStatuses are the release states of a Helm operation in progress.
var pendingStatuses = map[release.Status]bool{
	release.StatusPendingInstall: true, release.StatusPendingUpgrade: true,
	release.StatusPendingRollback: true, release.StatusUninstalling: true,
}

// runningHelmPods lists the Helm operation pods that have started and not
// ended, with their release, from the recorder.
func (r *recorder) runningHelmPods() []podRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []podRecord
	for _, p := range r.pods {
		if !p.start.IsZero() && p.end.IsZero() && p.deleted.IsZero() {
			out = append(out, *p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// playDeployerKills kills deployer pods in the middle of their Helm
// operation: a pod is killed (as an out-of-memory kill does) the moment its
// release is seen in a pending state, so the release is left locked for
// the Job's next pod to recover. Each Job loses at most one pod, which its
// backoffLimit absorbs.
func playDeployerKills(ctx context.Context, sc *scene) error {
	target := sc.size(20, 2)
	minEnvs := sc.size(8, 2)
	inFlight := sc.size(4, 2)
	timeout := stepTimeout

	killCtx, stopKills := context.WithCancel(ctx)
	defer stopKills()
	var mu sync.Mutex
	killed := 0
	byStatus := map[release.Status]int{}
	watching := map[types.UID]bool{}
	killedJobs := map[string]bool{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for killCtx.Err() == nil {
			mu.Lock()
			enough := killed >= target
			mu.Unlock()
			if enough {
				return
			}
			for _, p := range sc.rec.runningHelmPods() {
				mu.Lock()
				skip := watching[p.uid] || killedJobs[p.job] || !strings.HasPrefix(p.job, "s2-")
				watching[p.uid] = true
				mu.Unlock()
				if skip {
					continue
				}
				go func(p podRecord) {
					ns, rel, _ := strings.Cut(p.release, "/")
					// Kill the moment the release is pending: mid-Helm.
					deadline := time.Now().Add(30 * time.Second)
					for time.Now().Before(deadline) && killCtx.Err() == nil {
						latest, err := sc.latestRelease(killCtx, ns, rel)
						if err == nil && latest != nil && latest.Info != nil && pendingStatuses[latest.Info.Status] {
							mu.Lock()
							if killed >= target || killedJobs[p.job] {
								mu.Unlock()
								return
							}
							killedJobs[p.job] = true
							mu.Unlock()
							if err := sc.st.Node.Kill(stack.ManagementNamespace, p.name); err != nil {
								return
							}
							mu.Lock()
							killed++
							byStatus[latest.Info.Status]++
							n := killed
							mu.Unlock()
							sc.logf("deployer pod %s killed mid-Helm (release %s %s) (%d/%d)", p.name, p.release, latest.Info.Status, n, target)
							return
						}
						if !sc.rec.podRunning(p.uid) {
							return
						}
						sleep(killCtx, 20*time.Millisecond)
					}
				}(p)
			}
			sleep(killCtx, 50*time.Millisecond)
		}
	}()

	lifeErr := sc.lives(ctx, "s2-e", minEnvs, 4*minEnvs+41, inFlight, done, func(name string) error {
		return sc.lifecycle(ctx, name, waiting, nil, timeout, nil)
	})
	if errors.Is(lifeErr, ctx.Err()) && ctx.Err() != nil {
		return lifeErr
	}
	stopKills()
	<-done
	mu.Lock()
	defer mu.Unlock()
	var parts []string
	for _, st := range []release.Status{release.StatusPendingInstall, release.StatusPendingUpgrade, release.StatusUninstalling, release.StatusPendingRollback} {
		if byStatus[st] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", st, byStatus[st]))
		}
	}
	sc.row.Faults = fmt.Sprintf("%d deployer pods killed mid-Helm (release was %s)", killed, strings.Join(parts, ", "))
	if lifeErr == nil && killed < target {
		return fmt.Errorf("only %d of %d deployer pods could be killed mid-Helm", killed, target)
	}
	return lifeErr
}

// podRunning reports whether a recorded Helm pod has not ended.
func (r *recorder) podRunning(uid types.UID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.pods[uid]
	return p != nil && p.end.IsZero() && p.deleted.IsZero()
}
