package releasebusy

import (
	"context"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/api/contract"
	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

// LabelSharedWorkload names the SharedWorkload an object belongs to (its
// Jobs and their pods, its instance Secret); the release index reads it.
const LabelSharedWorkload = "petri.dev/shared-workload"

// PodsIndex indexes cached pods of deploy and undeploy Jobs by the release
// they operate on, as JobsIndex does their Jobs.
const PodsIndex = "releasePods"

// IndexPods adds PodsIndex to indexer.
func IndexPods(ctx context.Context, indexer client.FieldIndexer) error {
	return indexer.IndexField(ctx, &corev1.Pod{}, PodsIndex, Of)
}

// JobsIndex indexes cached deploy and undeploy Jobs by the release they
// operate on: the environment's UID and the component.
const JobsIndex = "releaseJobs"

// Key is the JobsIndex and PodsIndex key of an environment's release.
func Key(envUID, component string) string { return envUID + "/" + component }

// IndexJobs adds JobsIndex to indexer.
func IndexJobs(ctx context.Context, indexer client.FieldIndexer) error {
	return indexer.IndexField(ctx, &batchv1.Job{}, JobsIndex, Of)
}

// SharedKey is the JobsIndex and PodsIndex key of a shared workload's
// release, by the shared workload's label value.
func SharedKey(sharedWorkload string) string { return "shared/" + sharedWorkload }

// Of is the release a deploy or undeploy Job, or its pod, operates on (by
// their labels): an environment's component, or a shared workload; none for
// every other object.
func Of(obj client.Object) []string {
	l := obj.GetLabels()
	if a := l[contract.LabelAction]; a != contract.ActionDeploy && a != contract.ActionUndeploy {
		return nil
	}
	switch {
	case l[petriv1.LabelEnvironmentUID] != "":
		return []string{Key(l[petriv1.LabelEnvironmentUID], l[contract.LabelComponent])}
	case l[LabelSharedWorkload] != "":
		return []string{SharedKey(l[LabelSharedWorkload])}
	}
	return nil
}
