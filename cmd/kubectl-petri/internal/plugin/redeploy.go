package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

func newRedeployCommand(o *options) *cobra.Command {
	var wait bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "redeploy ENV",
		Short: "Deploy every component of an environment again, without a spec change",
		Long: `Deploy every component of an environment again, without a spec change.

It sets the annotation petri.dev/redeploy to the current time; the operator
runs one new deploy Job per component (a Helm upgrade, so each release gets a
new revision) once any Job still running for the environment has finished,
and records the request in status.lastRedeploy. --wait waits for the outcome.`,
		Example: `  kubectl petri redeploy shop-pr-42-1a2b3c
  kubectl petri redeploy shop-pr-42-1a2b3c --wait`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			e, err := o.environment(ctx, args[0])
			if err != nil {
				return err
			}
			if !e.DeletionTimestamp.IsZero() {
				return fmt.Errorf("environment %s is being deleted", e.Name)
			}
			value := time.Now().UTC().Format(time.RFC3339Nano)
			patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
				"annotations": map[string]string{petriv1.AnnotationRedeploy: value},
			}})
			if err != nil {
				return err
			}
			if err := o.client.Patch(ctx, e, client.RawPatch(types.MergePatchType, patch)); err != nil {
				return fmt.Errorf("annotate environment %s: %w", e.Name, err)
			}
			fmt.Fprintf(o.streams.Out, "environment %s: redeploy requested (%s=%s)\n", e.Name, petriv1.AnnotationRedeploy, value)
			if !wait {
				return nil
			}
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			final, err := o.waitRedeployed(ctx, e.Name, value)
			if err != nil {
				return err
			}
			fmt.Fprintf(o.streams.Out, "environment %s: %s\n", e.Name, final.Status.Phase)
			if final.Status.Phase != petriv1.EnvironmentReady {
				return fmt.Errorf("environment %s is %s after the redeploy: kubectl petri get %s shows why", e.Name, final.Status.Phase, e.Name)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the redeploy's outcome is final")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "longest wait with --wait")
	return cmd
}

// waitRedeployed watches the environment until the operator honoured the
// request and the outcome is final: Ready, Degraded, Failed or Stalled.
func (o *options) waitRedeployed(ctx context.Context, name, value string) (*petriv1.EphemeralEnvironment, error) {
	return o.waitUntil(ctx, name, "the redeploy", func(e *petriv1.EphemeralEnvironment) bool {
		return e.Status.LastRedeploy == value && outcomeFinal(e)
	})
}

// outcomeFinal reports whether the environment's current generation has a
// final outcome: Ready, Failed or Stalled, or Degraded (deployed, but a
// workload stopped running: nothing is deployed for it, so nothing the
// wait could see changes it).
func outcomeFinal(e *petriv1.EphemeralEnvironment) bool {
	if e.Status.ObservedGeneration != e.Generation {
		return false
	}
	switch e.Status.Phase {
	case petriv1.EnvironmentReady, petriv1.EnvironmentDegraded, petriv1.EnvironmentFailed, petriv1.EnvironmentStalled:
		return true
	}
	return false
}

// waitUntil watches the environment until done holds; what names the wait
// in the timeout's error.
func (o *options) waitUntil(ctx context.Context, name, what string, done func(*petriv1.EphemeralEnvironment) bool) (*petriv1.EphemeralEnvironment, error) {
	wc, err := client.NewWithWatch(o.config, client.Options{Scheme: o.client.Scheme()})
	if err != nil {
		return nil, err
	}
	for {
		var list petriv1.EphemeralEnvironmentList
		if err := wc.List(ctx, &list, client.InNamespace(o.namespace), client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", name)}); err != nil {
			return nil, fmt.Errorf("read environment %s: %w", name, err)
		}
		if len(list.Items) == 0 {
			return nil, fmt.Errorf("environment %s was deleted", name)
		}
		if e := &list.Items[0]; done(e) {
			return e, nil
		}
		w, err := wc.Watch(ctx, &petriv1.EphemeralEnvironmentList{}, client.InNamespace(o.namespace),
			client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", name)},
			&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
		if err != nil {
			return nil, fmt.Errorf("watch environment %s: %w", name, err)
		}
		e, err := untilDone(ctx, w, what, done)
		w.Stop()
		if e != nil || err != nil {
			return e, err
		}
		// The watch ended early (a timeout of the API server): list again.
	}
}

func untilDone(ctx context.Context, w watch.Interface, what string, done func(*petriv1.EphemeralEnvironment) bool) (*petriv1.EphemeralEnvironment, error) {
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("timed out waiting for %s (it goes on; kubectl petri get shows it)", what)
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil, nil
			}
			switch ev.Type {
			case watch.Deleted:
				return nil, errors.New("the environment was deleted")
			case watch.Added, watch.Modified:
				if e, ok := ev.Object.(*petriv1.EphemeralEnvironment); ok && done(e) {
					return e, nil
				}
			}
		}
	}
}
