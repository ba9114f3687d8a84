package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

func newSleepCommand(o *options) *cobra.Command {
	var wait bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "sleep ENV",
		Short: "Scale an environment's workloads to zero until it is woken",
		Long: `Scale an environment's workloads to zero until it is woken.

It sets the annotation petri.dev/sleep-requested to the current time. Once the
environment's deploy has an outcome, the operator runs a Job as the
environment's deployer identity that scales every Deployment and StatefulSet
of its namespace to zero and records each one's replica count on it; the
environment's phase becomes Sleeping. kubectl petri wake, a new commit (a new
generation) or a redeploy wakes it. --wait waits until it is asleep.`,
		Example: `  kubectl petri sleep shop-pr-42-1a2b3c
  kubectl petri sleep shop-pr-42-1a2b3c --wait`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			name, value, err := o.request(ctx, args[0], petriv1.AnnotationSleepRequested, "sleep")
			if err != nil || !wait {
				return err
			}
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			final, err := o.waitUntil(ctx, name, "the sleep", func(e *petriv1.EphemeralEnvironment) bool {
				s := e.Status.Sleep
				return s != nil && s.SleepRequested == value && s.FinishedAt != nil
			})
			if err != nil {
				return err
			}
			s := final.Status.Sleep
			switch {
			case s.Action == petriv1.SleepActionWake:
				return fmt.Errorf("environment %s was woken again (a newer wake request, a new generation or a redeploy)", name)
			case s.LastError != "":
				return fmt.Errorf("environment %s: sleep failed (attempt %d, job %s): %s; the operator tries again", name, s.Attempt, s.Job, s.LastError)
			}
			fmt.Fprintf(o.streams.Out, "environment %s: asleep\n", name)
			return nil
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the environment is asleep")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "longest wait with --wait")
	return cmd
}

func newWakeCommand(o *options) *cobra.Command {
	var wait bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "wake ENV",
		Short: "Wake a sleeping environment: restore its workloads' replicas",
		Long: `Wake a sleeping environment: restore its workloads' replicas.

It sets the annotation petri.dev/wake-requested to the current time; the
operator runs a Job as the environment's deployer identity that restores
every Deployment and StatefulSet of its namespace to exactly the replica count
it had before the sleep. An environment that is awake stays as it is. --wait
waits until the environment's outcome is final again (Ready, or the Failed or
Stalled it had before the sleep).`,
		Example: `  kubectl petri wake shop-pr-42-1a2b3c
  kubectl petri wake shop-pr-42-1a2b3c --wait`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			name, value, err := o.request(ctx, args[0], petriv1.AnnotationWakeRequested, "wake")
			if err != nil || !wait {
				return err
			}
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			final, err := o.waitUntil(ctx, name, "the wake", func(e *petriv1.EphemeralEnvironment) bool {
				s := e.Status.Sleep
				if s != nil && s.Action == petriv1.SleepActionWake && s.WakeRequested == value && s.FinishedAt != nil && s.LastError != "" {
					return true // failed; reported below
				}
				return (s == nil || s.Action == petriv1.SleepActionWake && s.FinishedAt != nil && s.LastError == "") && outcomeFinal(e)
			})
			if err != nil {
				return err
			}
			if s := final.Status.Sleep; s != nil && s.LastError != "" {
				return fmt.Errorf("environment %s: wake failed (attempt %d, job %s): %s; the operator tries again", name, s.Attempt, s.Job, s.LastError)
			}
			fmt.Fprintf(o.streams.Out, "environment %s: %s\n", name, final.Status.Phase)
			if final.Status.Phase != petriv1.EnvironmentReady {
				return fmt.Errorf("environment %s is %s after the wake: kubectl petri get %s shows why", name, final.Status.Phase, name)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the environment is awake and its outcome final")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "longest wait with --wait")
	return cmd
}

// request sets a request annotation of the environment to the current time
// and says so; it returns the environment's name and the value.
func (o *options) request(ctx context.Context, name, annotation, what string) (string, string, error) {
	e, err := o.environment(ctx, name)
	if err != nil {
		return "", "", err
	}
	if !e.DeletionTimestamp.IsZero() {
		return "", "", fmt.Errorf("environment %s is being deleted", e.Name)
	}
	value := time.Now().UTC().Format(time.RFC3339Nano)
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"annotations": map[string]string{annotation: value},
	}})
	if err != nil {
		return "", "", err
	}
	if err := o.client.Patch(ctx, e, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return "", "", fmt.Errorf("annotate environment %s: %w", e.Name, err)
	}
	fmt.Fprintf(o.streams.Out, "environment %s: %s requested (%s=%s)\n", e.Name, what, annotation, value)
	return e.Name, value, nil
}
