package objects

import (
	"context"
	"fmt"
	"strconv"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/api/contract"
)

// What an environment keeps at rest.
//
// A deployed environment that nobody touches still gets a verify Job every
// --verify-interval. Kept for --job-ttl-after-finished with its pod, those
// would pile up: at the defaults 144 Jobs and 144 pods per environment
// (a day over ten minutes), all in the operator's cache. So a verify Job
// whose releases were verified is deleted as soon as its outcome is in
// status.verification, and one that failed is kept (its log says why)
// until the next verify Job starts. An environment at rest therefore keeps
// at most one finished verify Job.
//
// Each generation's deploy writes the merged values of each component into
// a Secret of its own. Once a component is deployed at a generation, the
// values Secrets of its older generations have no Job left to read them and
// are deleted, so an environment keeps one values Secret per component (two
// while a new generation's deploy has not succeeded yet), however often it
// was pushed to.

// DeleteFinishedJob deletes a finished Job of the operator's and its pods;
// one already gone is fine.
func DeleteFinishedJob(ctx context.Context, c client.Client, namespace, name string) error {
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if err := c.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete finished job %s: %w", name, err)
	}
	return nil
}

// DeleteKeptJob deletes a finished Job that was kept for its log, if the
// cache still has it: a verified one was deleted already, and its DELETE
// is not sent twice.
func DeleteKeptJob(ctx context.Context, c client.Client, namespace, name string) error {
	err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &batchv1.Job{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("get kept job %s: %w", name, err)
	}
	return DeleteFinishedJob(ctx, c, namespace, name)
}

// PruneOlderValues deletes the values Secrets, selected by match (one
// component of one environment, or one shared workload), that deploys of
// generations before keep wrote.
func PruneOlderValues(ctx context.Context, c client.Client, namespace string, match client.MatchingLabels, keep int64) error {
	var list corev1.SecretList
	sel := client.MatchingLabels{contract.LabelAction: contract.ActionDeploy}
	for k, v := range match {
		sel[k] = v
	}
	if err := c.List(ctx, &list, client.InNamespace(namespace), sel); err != nil {
		return fmt.Errorf("list values secrets: %w", err)
	}
	for i := range list.Items {
		s := &list.Items[i]
		gen, err := strconv.ParseInt(s.Labels[contract.LabelGeneration], 10, 64)
		if err != nil || gen >= keep {
			continue
		}
		uid := s.UID
		if err := c.Delete(ctx, s, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete values secret %s of generation %d: %w", s.Name, gen, err)
		}
	}
	return nil
}
