package controllers

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

// scope is one pass over one environment (cluster-api's shape): the
// environment the phases change, the copy its status patch is computed
// against, what the pass learnt, and the reconciler with its clients,
// recorder and clock (Options.Clock).
type scope struct {
	*EphemeralEnvironmentReconciler
	key    types.NamespacedName
	env    *petriv1.EphemeralEnvironment
	before *petriv1.EphemeralEnvironment
	pass   *pass
	// deployStartedBefore is whether the current generation's deploy had
	// started before this pass (sleepFirst finds it, sleepLast uses it).
	deployStartedBefore bool
}

// newScope starts a pass of r over the environment env, named key.
func newScope(r *EphemeralEnvironmentReconciler, key types.NamespacedName, env *petriv1.EphemeralEnvironment) *scope {
	return &scope{EphemeralEnvironmentReconciler: r, key: key, env: env, before: env.DeepCopy(), pass: &pass{}}
}

// step is what a phase tells the path: go on, or stop this pass (waiting, or
// done), with the pass's result or one of its own.
type step struct {
	stop bool
	// result, when set, is the pass's result instead of the one collected.
	result *reconcile.Result
}

var (
	proceed = step{}
	halt    = step{stop: true}
)

func haltWith(res reconcile.Result) step { return step{stop: true, result: &res} }

// phase is one named step of the normal path.
type phase struct {
	name string
	run  func(context.Context, *scope) (step, error)
}

// waiting makes a phase of a step that says it waits through the pass
// (pass.stop).
func waiting(f func(context.Context, *petriv1.EphemeralEnvironment, *pass) error) func(context.Context, *scope) (step, error) {
	return func(ctx context.Context, s *scope) (step, error) {
		err := f(ctx, s.env, s.pass)
		return step{stop: s.pass.stop || err != nil}, err
	}
}

// run runs the phases in order until one stops the pass or fails.
func (s *scope) run(ctx context.Context, phases []phase) (reconcile.Result, error) {
	for _, ph := range phases {
		st, err := ph.run(ctx, s)
		if err != nil || st.stop {
			if err != nil {
				log.FromContext(ctx).V(1).Info("Phase failed", "phase", ph.name, "error", err.Error())
			}
			if st.result != nil {
				return *st.result, err
			}
			return s.pass.result(), err
		}
	}
	return s.pass.result(), nil
}

// close ends the pass: it summarises the status, writes it once when it
// changed, remembers the write for the cache guard, records the transitions
// as Events, and logs a failure that is retried.
func (s *scope) close(ctx context.Context, err error) error {
	s.pass.unhealthy = s.unhealthyWorkloads(ctx, s.env)
	s.finishStatus(s.before, s.env, s.pass, err)
	if !equality.Semantic.DeepEqual(s.before.Status, s.env.Status) {
		if perr := s.Status().Patch(ctx, s.env, client.MergeFrom(s.before)); perr != nil && !apierrors.IsNotFound(perr) {
			err = errors.Join(err, fmt.Errorf("patch status: %w", perr))
		}
	}
	if s.env.ResourceVersion != s.before.ResourceVersion {
		s.written.Remember(s.key, s.env.ResourceVersion)
	}
	s.recordTransitions(s.before, s.env)
	if err != nil && !errors.Is(err, reconcile.TerminalError(nil)) {
		log.FromContext(ctx).Info("Reconcile failed, retrying with backoff", "error", err.Error())
	}
	return err
}
