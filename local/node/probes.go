package node

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Probe timing. The node probes faster than a kubelet's defaults so that
// local runs do not wait ten seconds for a pod that answers in ten
// milliseconds; thresholds are the pod's own.
const (
	probeIntervalUntilReady = 200 * time.Millisecond
	probeIntervalMax        = 2 * time.Second
)

// probeOnce runs one httpGet or tcpSocket check against the pod's local
// ports. Exec probes cannot run outside a container and count as passing.
func probeOnce(ctx context.Context, pod *corev1.Pod, p *corev1.Probe, ports map[int32]int32) bool {
	timeout := time.Duration(p.TimeoutSeconds) * time.Second
	if timeout <= 0 {
		timeout = time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch {
	case p.HTTPGet != nil:
		cp, ok := containerPort(pod, p.HTTPGet.Port)
		if !ok {
			return false
		}
		local, ok := ports[cp]
		if !ok {
			return false
		}
		scheme := "http"
		if p.HTTPGet.Scheme == corev1.URISchemeHTTPS {
			scheme = "https"
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s://127.0.0.1:%d%s", scheme, local, p.HTTPGet.Path), nil)
		if err != nil {
			return false
		}
		for _, h := range p.HTTPGet.HTTPHeaders {
			req.Header.Add(h.Name, h.Value)
		}
		resp, err := probeClient.Do(req)
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode >= 200 && resp.StatusCode < 400
	case p.TCPSocket != nil:
		cp, ok := containerPort(pod, p.TCPSocket.Port)
		if !ok {
			return false
		}
		local, ok := ports[cp]
		if !ok {
			return false
		}
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", local))
		if err != nil {
			return false
		}
		_ = conn.Close()
		return true
	}
	return true
}

// probeClient never uses a proxy and, like the kubelet, does not verify
// certificates of HTTPS probes.
var probeClient = &http.Client{Transport: &http.Transport{
	Proxy:           nil,
	TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the kubelet does not verify probe certificates either
}}

// watchReadiness probes one container until ctx ends and writes its
// readiness (and the pod's) whenever the thresholds flip it.
func (n *Node) watchReadiness(ctx context.Context, pod *corev1.Pod, i int, p *corev1.Probe, ports map[int32]int32) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(time.Duration(p.InitialDelaySeconds) * time.Second):
	}
	period := min(time.Duration(max(p.PeriodSeconds, 1))*time.Second, probeIntervalMax)
	success, failure := max(p.SuccessThreshold, 1), p.FailureThreshold
	if failure <= 0 {
		failure = 3
	}
	ready := false
	var passed, failed int32
	for {
		if probeOnce(ctx, pod, p, ports) {
			passed, failed = passed+1, 0
		} else {
			passed, failed = 0, failed+1
		}
		if ctx.Err() != nil {
			return
		}
		switch {
		case !ready && passed >= success:
			ready = true
			n.setContainerReady(ctx, pod, i, true)
		case ready && failed >= failure:
			ready = false
			n.setContainerReady(ctx, pod, i, false)
		}
		wait := period
		if !ready {
			wait = probeIntervalUntilReady
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// setContainerReady records one container's readiness and derives the
// pod's Ready and ContainersReady conditions from all of them.
func (n *Node) setContainerReady(ctx context.Context, pod *corev1.Pod, i int, ready bool) {
	n.updateStatus(ctx, pod, func(p *corev1.Pod) {
		if i < len(p.Status.ContainerStatuses) {
			p.Status.ContainerStatuses[i].Ready = ready && p.Status.ContainerStatuses[i].State.Running != nil
		}
		setReady(p, allContainersReady(p))
	})
}

func allContainersReady(p *corev1.Pod) bool {
	if len(p.Status.ContainerStatuses) < len(p.Spec.Containers) {
		return false
	}
	for _, cs := range p.Status.ContainerStatuses {
		if !cs.Ready {
			return false
		}
	}
	return true
}

// restarts reports whether a container that exited with code is started
// again under the pod's restartPolicy.
func restarts(policy corev1.RestartPolicy, code int32) bool {
	switch policy {
	case corev1.RestartPolicyAlways, "":
		return true
	case corev1.RestartPolicyOnFailure:
		return code != 0
	}
	return false
}

// Restart back-off: doubled after each quick exit, reset after a run that
// lasted longer than the cap.
const (
	restartBackoffInitial = 500 * time.Millisecond
	restartBackoffMax     = 10 * time.Second
)

// superviseContainer runs one container under the pod's restartPolicy and
// returns its last terminated state. A container that exits while its
// policy says restart is started again after a back-off, with the restart
// counted and the exit kept as its last state, the way the kubelet does.
func (n *Node) superviseContainer(ctx context.Context, pod *corev1.Pod, i int, dir string, env podEnv, run *podRun) corev1.ContainerStateTerminated {
	c := &pod.Spec.Containers[i]
	backoff := restartBackoffInitial
	var count int32
	for {
		cctx, cancel := context.WithCancel(ctx)
		if c.ReadinessProbe != nil {
			go n.watchReadiness(cctx, pod, i, c.ReadinessProbe, env.ports)
		}
		res := n.runContainer(ctx, pod, c, dir, env, run)
		cancel()
		if ctx.Err() != nil || run.isKilled() || !restarts(pod.Spec.RestartPolicy, res.ExitCode) {
			return res
		}
		count++
		if res.FinishedAt.Sub(res.StartedAt.Time) > restartBackoffMax {
			backoff = restartBackoffInitial
		}
		last := res
		n.updateStatus(ctx, pod, func(p *corev1.Pod) {
			setContainerState(p, i, c.Name, corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
				Reason: "CrashLoopBackOff", Message: fmt.Sprintf("back-off %s restarting failed container", backoff),
			}}, false)
			p.Status.ContainerStatuses[i].RestartCount = count
			p.Status.ContainerStatuses[i].LastTerminationState = corev1.ContainerState{Terminated: &last}
			setReady(p, false)
		})
		select {
		case <-ctx.Done():
			return res
		case <-run.stop:
			return res
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, restartBackoffMax)
		now := metav1.Now()
		n.updateStatus(ctx, pod, func(p *corev1.Pod) {
			setContainerState(p, i, c.Name, corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}, c.ReadinessProbe == nil)
			p.Status.ContainerStatuses[i].RestartCount = count
			setReady(p, allContainersReady(p))
		})
	}
}

// Tokens are requested for an hour and renewed well before they expire, as
// the kubelet renews projected tokens; clients re-read the token file.
const (
	tokenLifetime = time.Hour
	tokenRenewal  = 40 * time.Minute
)

// renewTokens rewrites the pod's token files until ctx ends.
func (n *Node) renewTokens(ctx context.Context, pod *corev1.Pod, files []string) {
	if len(files) == 0 {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(tokenRenewal):
		}
		token, err := n.requestToken(ctx, pod)
		if err != nil {
			if ctx.Err() == nil {
				fmt.Fprintf(os.Stderr, "local node: renew token of pod %s/%s: %v\n", pod.Namespace, pod.Name, err)
			}
			continue
		}
		for _, f := range files {
			if err := writeFileAtomic(f, []byte(token)); err != nil {
				fmt.Fprintf(os.Stderr, "local node: renew token of pod %s/%s: %v\n", pod.Namespace, pod.Name, err)
			}
		}
	}
}

func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		_ = os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}
