package stack

import (
	"context"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// SetSyncFlags changes flags of the installed petri-sync (such as
// "-resync-interval=5s") and waits until sync runs with them: a flag already
// on the command line is replaced, any other is added. The fault-injection
// suite (local/chaos) uses it to make sync's periodic work fit its time.
func (s *Stack) SetSyncFlags(ctx context.Context, flags ...string) error {
	return s.setFlags(ctx, client.ObjectKey{Namespace: SyncNamespace, Name: "petri-sync"}, flags)
}

// SetOperatorFlags changes flags of the installed petri-operator (such as
// "--verify-interval=30s") the same way.
func (s *Stack) SetOperatorFlags(ctx context.Context, flags ...string) error {
	return s.setFlags(ctx, client.ObjectKey{Namespace: ManagementNamespace, Name: "petri-operator"}, flags)
}

// setFlags changes the first container's flags of a Deployment and waits
// for its rollout.
func (s *Stack) setFlags(ctx context.Context, key client.ObjectKey, flags []string) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var d appsv1.Deployment
		if err := s.Client.Get(ctx, key, &d); err != nil {
			return err
		}
		cs := d.Spec.Template.Spec.Containers
		if len(cs) == 0 {
			return fmt.Errorf("deployment %s has no container", key)
		}
		cs[0].Args = withFlags(cs[0].Args, flags)
		return s.Client.Update(ctx, &d)
	})
	if err != nil {
		return fmt.Errorf("set flags of %s: %w", key, err)
	}
	return s.waitDeployments(ctx, 3*time.Minute, key.String())
}

// withFlags replaces or appends "-name=value" flags in args.
func withFlags(args, flags []string) []string {
	out := append([]string{}, args...)
	for _, f := range flags {
		name, _, _ := strings.Cut(strings.TrimLeft(f, "-"), "=")
		replaced := false
		for i, a := range out {
			if n, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "="); n == name {
				out[i], replaced = f, true
			}
		}
		if !replaced {
			out = append(out, f)
		}
	}
	return out
}

// WaitRollouts waits until the operator's and sync's Deployments have
// every replica updated and available and no old pod left, stopping or
// not.
func (s *Stack) WaitRollouts(ctx context.Context) error {
	return s.waitDeployments(ctx, 3*time.Minute, ManagementNamespace+"/petri-operator", SyncNamespace+"/petri-sync")
}
