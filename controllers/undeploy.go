package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/graph"
)

// undeployComponents uninstalls every release in reverse dependency order:
// a component is undeployed only after everything that depends on it. A
// deploy Job still running finishes first. Failed undeploys are retried with
// backoff and reported; the teardown waits for them.
func (r *EphemeralEnvironmentReconciler) undeployComponents(ctx context.Context, env *petriv1.EphemeralEnvironment, p *pass) (bool, error) {
	name := env.Status.TargetNamespace
	if name == "" {
		return true, nil
	}
	ns := &corev1.Namespace{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Name: name}, ns); err != nil {
		if apierrors.IsNotFound(err) {
			// The releases lived in the namespace; nothing is left to undeploy.
			return true, nil
		}
		return false, fmt.Errorf("get namespace %s: %w", name, err)
	}
	if why, err := r.namespaceOwnership(ctx, ns, env); err != nil {
		return false, err
	} else if why != "" {
		// deleteNamespace reports it; nothing runs in a namespace that is
		// not provably ours.
		return true, nil
	}
	for _, c := range env.Spec.Components {
		componentStatus(env, c.Name)
	}
	for i := range env.Status.Components {
		cs := &env.Status.Components[i]
		if cs.Phase != petriv1.ComponentDeploying {
			continue
		}
		st, err := r.observeJobLive(ctx, p, cs.Job)
		if err != nil {
			return false, err
		}
		if st.exists && !st.done {
			cs.Message = "deploy job still running; undeploy waits for it"
			return false, nil
		}
		cs.Phase = petriv1.ComponentDeployed
	}

	// Status entries are the graph: spec components keep their dependencies,
	// components already removed from the spec have none.
	var nodes []graph.Node
	for _, cs := range env.Status.Components {
		n := graph.Node{Name: cs.Name}
		if c := findComponent(env, cs.Name); c != nil {
			n.DependsOn = c.DependsOn
		}
		nodes = append(nodes, n)
	}
	states := map[string]graph.State{}
	var problems []string
	step := func(cs *petriv1.ComponentStatus) error {
		_, err := r.runUndeploy(ctx, env, cs, p)
		var later *retryLater
		if errors.As(err, &later) {
			p.requeueAfter(later.after)
			problems = append(problems, later.msg)
			err = nil
		}
		states[cs.Name] = undeployState(cs.Phase)
		return err
	}
	for i := range env.Status.Components {
		cs := &env.Status.Components[i]
		states[cs.Name] = undeployState(cs.Phase)
		if cs.Phase == petriv1.ComponentUndeploying {
			if err := step(cs); err != nil {
				return false, err
			}
		}
	}
	for _, n := range graph.Undeployable(nodes, states) {
		if err := step(componentStatus(env, n)); err != nil {
			return false, err
		}
	}
	if len(problems) > 0 {
		p.teardownProblem = "undeploy failed, retrying: " + strings.Join(problems, "; ")
	}
	return graph.Complete(nodes, states, graph.Done), nil
}

func undeployState(p petriv1.ComponentPhase) graph.State {
	switch p {
	case petriv1.ComponentUndeployed:
		return graph.Done
	case petriv1.ComponentUndeploying:
		return graph.Running
	}
	return graph.Waiting
}
