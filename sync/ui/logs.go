package ui

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/api/contract"
	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/sync/render"
)

// Which logs the page shows. sync may read every pod's log in the
// management namespace (config/sync/logs_role.yaml), the operator's
// included; the page shows only the log of a Job that an environment sync
// wrote names in its status, and only of the Jobs that run Petri's own
// deployer (deploy, undeploy, bind). Provision and deprovision Jobs run a
// shared workload's own image with the binding's credentials in their
// environment; what they print is never shown.

// deployerActions are the Jobs that run Petri's deployer.
var deployerActions = map[string]bool{contract.ActionDeploy: true, contract.ActionUndeploy: true, contract.ActionBind: true}

// maxLogBytes bounds one log tail.
const maxLogBytes = 64 * 1024

// logReader reads log tails through the API server, a few at a time, and
// keeps those of pods that have finished (they no longer change). Each
// Job's tail is read once however many ask at once, and served again for
// reuse: the viewers of one Job cost one pods list and one log read per
// reuse, and only Jobs an environment names are read at all.
type logReader struct {
	pods      corev1client.PodsGetter
	namespace string
	tail      int64
	slots     chan struct{}
	reuse     time.Duration
	now       func() time.Time
	reads     singleflight.Group

	mu       sync.Mutex
	finished map[string][]byte
	recent   map[string]recentTail
}

// recentTail is a Job's tail as last read: its text, or that it is not
// shown (which is as costly to find out again).
type recentTail struct {
	at   time.Time
	text []byte
	err  error
}

func newLogReader(pods corev1client.PodsGetter, namespace string, tail int64, reuse time.Duration, now func() time.Time) *logReader {
	return &logReader{pods: pods, namespace: namespace, tail: tail, slots: make(chan struct{}, 4), reuse: reuse, now: now,
		finished: map[string][]byte{}, recent: map[string]recentTail{}}
}

// tailOf returns the last lines of the newest pod of the Job: the one read
// less than reuse ago, else one read now, shared by all who ask while it
// is read. A caller that gives up returns at once; the read goes on for
// the others, within its own deadline.
func (l *logReader) tailOf(ctx context.Context, env, job string) ([]byte, error) {
	key := env + "/" + job
	if t, ok := l.fresh(key); ok {
		return t.text, t.err
	}
	ch := l.reads.DoChan(key, func() (any, error) {
		// A read that ended between the look above and this one is fresh.
		if t, ok := l.fresh(key); ok {
			return t, nil
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		defer cancel()
		at := l.now()
		text, err := l.read(rctx, env, job)
		if err != nil && !errors.Is(err, errNotShown) {
			return nil, err
		}
		t := recentTail{at: at, text: text, err: err}
		l.mu.Lock()
		if len(l.recent) >= 512 {
			clear(l.recent)
		}
		l.recent[key] = t
		l.mu.Unlock()
		return t, nil
	})
	select {
	case res := <-ch:
		if res.Err != nil {
			return nil, res.Err
		}
		t := res.Val.(recentTail)
		return t.text, t.err
	case <-ctx.Done():
		return nil, fmt.Errorf("read the log of job %s: %w", job, ctx.Err())
	}
}

// fresh is the Job's tail if it was read less than reuse ago.
func (l *logReader) fresh(key string) (recentTail, bool) {
	now := l.now()
	l.mu.Lock()
	t, ok := l.recent[key]
	l.mu.Unlock()
	return t, ok && !now.Before(t.at) && now.Sub(t.at) < l.reuse
}

// errNotShown is a log the page does not show.
var errNotShown = errors.New("not shown")

// jobOf reports whether the environment names job in its status, as a
// component's or a binding's latest Job.
func jobOf(e *petriv1.EphemeralEnvironment, job string) bool {
	for _, c := range e.Status.Components {
		if c.Job == job {
			return true
		}
	}
	for _, b := range e.Status.SharedWorkloads {
		if b.Job == job {
			return true
		}
	}
	return false
}

func (u *UI) serveLog(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if u.logs == nil {
		http.Error(w, "logs are not shown here", http.StatusNotFound)
		return
	}
	envName, job := r.PathValue("env"), r.PathValue("job")
	e := &petriv1.EphemeralEnvironment{}
	err := u.opts.Cache.Get(r.Context(), client.ObjectKey{Namespace: u.opts.Namespace, Name: envName}, e)
	if err != nil || !render.Owned(e.Labels) || !jobOf(e, job) {
		http.Error(w, fmt.Sprintf("environment %s has no job %s", envName, job), http.StatusNotFound)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
	defer cancel()
	text, err := u.logs.tailOf(ctx, envName, job)
	switch {
	case errors.Is(err, errNotShown):
		http.Error(w, "the log of a provision or deprovision step is not shown here: it runs the shared workload's own image, with credentials; read it with kubectl logs", http.StatusForbidden)
		return
	case err != nil:
		u.opts.Log.Info("Read a job's log", "job", job, "error", err.Error())
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	_, _ = w.Write(text)
}

// read reads the last lines of the newest pod of the Job.
func (l *logReader) read(ctx context.Context, env, job string) ([]byte, error) {
	select {
	case l.slots <- struct{}{}:
		defer func() { <-l.slots }()
	case <-ctx.Done():
		return nil, fmt.Errorf("too many log reads at once: %w", ctx.Err())
	}
	pods, err := l.pods.Pods(l.namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{batchv1.JobNameLabel: job, petriv1.LabelEnvironment: env}).String(),
	})
	if err != nil {
		return nil, fmt.Errorf("list the pods of job %s: %w", job, err)
	}
	var pod *corev1.Pod
	for i := range pods.Items {
		p := &pods.Items[i]
		if pod == nil || pod.CreationTimestamp.Before(&p.CreationTimestamp) {
			pod = p
		}
	}
	if pod == nil {
		return []byte("(the job has no pod: not started yet, or removed after it finished)\n"), nil
	}
	if !deployerActions[pod.Labels[contract.LabelAction]] {
		return nil, errNotShown
	}
	done := pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
	key := string(pod.UID)
	if done {
		l.mu.Lock()
		text, ok := l.finished[key]
		l.mu.Unlock()
		if ok {
			return text, nil
		}
	}
	text, err := l.pods.Pods(l.namespace).GetLogs(pod.Name, &corev1.PodLogOptions{
		Container: contract.ContainerName, TailLines: &l.tail, LimitBytes: ptr(int64(maxLogBytes)),
	}).DoRaw(ctx)
	if err != nil {
		if pod.Status.Phase == corev1.PodPending {
			return []byte("(the pod has not started yet)\n"), nil
		}
		return nil, fmt.Errorf("read the log of pod %s: %w", pod.Name, err)
	}
	if len(text) == 0 {
		text = []byte("(no output yet)\n")
	}
	if done {
		l.mu.Lock()
		if len(l.finished) >= 512 {
			clear(l.finished)
		}
		l.finished[key] = text
		l.mu.Unlock()
	}
	return text, nil
}

func ptr[T any](v T) *T { return &v }
