package plugin

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/spf13/cobra"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

// jobContainer is the one container of every Petri Job
// (controllers/internal/jobs.ContainerName).
const jobContainer = "main"

// step is one component or binding whose latest Job has logs.
type step struct {
	kind, name, job string
}

func newLogsCommand(o *options) *cobra.Command {
	var follow bool
	var tail int64
	cmd := &cobra.Command{
		Use:   "logs ENV [COMPONENT]",
		Short: "Print the log of the latest Job pod of a component or shared-workload binding",
		Long: `Print the log of the latest Job pod of a component or shared-workload binding.

COMPONENT names a component or a shared workload the environment binds to.
Without it, the logs of every component and binding follow one another; with
-f they are followed together, each line prefixed with its name.`,
		Example: `  kubectl petri logs shop-pr-42-1a2b3c web
  kubectl petri logs shop-pr-42-1a2b3c web -f
  kubectl petri logs shop-pr-42-1a2b3c postgres`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			e, err := o.environment(ctx, args[0])
			if err != nil {
				return err
			}
			steps, err := logSteps(e, args[1:])
			if err != nil {
				return err
			}
			out := o.streams.Out
			if len(steps) == 1 {
				return o.streamLog(ctx, steps[0], follow, tail, out)
			}
			if !follow {
				var errs []error
				for i, s := range steps {
					if i > 0 {
						fmt.Fprintln(out)
					}
					fmt.Fprintf(out, "==> %s %s (job %s) <==\n", s.kind, s.name, s.job)
					if err := o.streamLog(ctx, s, false, tail, out); err != nil {
						fmt.Fprintf(out, "(%v)\n", err)
						errs = append(errs, err)
					}
				}
				if len(errs) == len(steps) {
					return errors.Join(errs...)
				}
				return nil
			}
			return o.followAll(ctx, steps, tail, out)
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "stream the log until the pod ends")
	cmd.Flags().Int64Var(&tail, "tail", -1, "lines of the end of the log to show; -1 shows all")
	return cmd
}

// logSteps picks the components and bindings to show: the one named, or
// every one that started a Job.
func logSteps(e *petriv1.EphemeralEnvironment, names []string) ([]step, error) {
	var all []step
	for _, c := range e.Status.Components {
		all = append(all, step{"component", c.Name, c.Job})
	}
	for _, b := range e.Status.SharedWorkloads {
		all = append(all, step{"shared workload", b.Name, b.Job})
	}
	if len(names) == 1 {
		for _, s := range all {
			if s.name != names[0] {
				continue
			}
			if s.job == "" {
				return nil, fmt.Errorf("%s %s of %s has not started a Job yet", s.kind, s.name, e.Name)
			}
			return []step{s}, nil
		}
		var known []string
		for _, c := range e.Spec.Components {
			known = append(known, c.Name)
		}
		known = append(known, e.Spec.SharedWorkloads...)
		for _, c := range e.Spec.Components {
			if c.Name == names[0] {
				return nil, fmt.Errorf("component %s of %s has not started a Job yet", c.Name, e.Name)
			}
		}
		return nil, fmt.Errorf("environment %s has no component or shared workload %s (it has: %s)", e.Name, names[0], strings.Join(known, ", "))
	}
	var out []step
	for _, s := range all {
		if s.job != "" {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("environment %s has not started a Job yet", e.Name)
	}
	return out, nil
}

// latestJobPod finds the newest pod of a Job.
func (o *options) latestJobPod(ctx context.Context, s step) (*corev1.Pod, error) {
	var pods corev1.PodList
	if err := o.client.List(ctx, &pods, client.InNamespace(o.namespace), client.MatchingLabels{batchv1.JobNameLabel: s.job}); err != nil {
		return nil, fmt.Errorf("list the pods of job %s: %w", s.job, err)
	}
	p := latestPod(pods.Items)
	if p == nil {
		var job batchv1.Job
		if err := o.client.Get(ctx, client.ObjectKey{Namespace: o.namespace, Name: s.job}, &job); err != nil {
			return nil, fmt.Errorf("job %s of %s %s is gone (finished Jobs and their pods are removed after a while): %w", s.job, s.kind, s.name, err)
		}
		return nil, fmt.Errorf("job %s of %s %s has no pod yet", s.job, s.kind, s.name)
	}
	return p, nil
}

func (o *options) streamLog(ctx context.Context, s step, follow bool, tail int64, out io.Writer) error {
	p, err := o.latestJobPod(ctx, s)
	if err != nil {
		return err
	}
	opts := &corev1.PodLogOptions{Container: jobContainer, Follow: follow}
	if tail >= 0 {
		opts.TailLines = &tail
	}
	r, err := o.clientset.CoreV1().Pods(p.Namespace).GetLogs(p.Name, opts).Stream(ctx)
	if err != nil {
		return fmt.Errorf("log of pod %s (job %s): %w", p.Name, s.job, err)
	}
	defer r.Close()
	if _, err := io.Copy(out, r); err != nil && ctx.Err() == nil {
		return fmt.Errorf("read the log of pod %s: %w", p.Name, err)
	}
	return nil
}

// followAll follows several logs at once, each line prefixed with its name.
func (o *options) followAll(ctx context.Context, steps []step, tail int64, out io.Writer) error {
	width := 0
	for _, s := range steps {
		width = max(width, len(s.name))
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make([]error, len(steps))
	for i, s := range steps {
		pr, pw := io.Pipe()
		wg.Add(2)
		go func() {
			defer wg.Done()
			err := o.streamLog(ctx, s, true, tail, pw)
			errs[i] = err
			pw.CloseWithError(err)
		}()
		go func() {
			defer wg.Done()
			lines := bufio.NewScanner(pr)
			for lines.Scan() {
				mu.Lock()
				fmt.Fprintf(out, "[%-*s] %s\n", width, s.name, lines.Text())
				mu.Unlock()
			}
			_ = pr.Close()
		}()
	}
	wg.Wait()
	var failed []error
	for _, err := range errs {
		if err != nil {
			failed = append(failed, err)
		}
	}
	if len(failed) == len(steps) {
		return errors.Join(failed...)
	}
	for _, err := range failed {
		fmt.Fprintln(o.streams.ErrOut, "warning:", err)
	}
	return nil
}
