package render

import petriv1 "github.com/petri-dev/petri/api/v1alpha1"

// How an environment's cluster is named wherever sync and kubectl petri
// show it (the pull request's comment, the web page, the read API, the
// plugin's tree), so that all of them say the same. Both hold a space,
// which no WorkloadCluster's name (a DNS label) can: neither is ever
// mistaken for a cluster of that name.
const (
	// ClusterManagement is the management cluster: status.cluster is
	// empty once the environment is bound, or it has no spec.placement.
	ClusterManagement = "management cluster"
	// ClusterPending is an environment with a placement that the operator
	// has not placed yet: no cluster is committed.
	ClusterPending = "pending placement"
)

// Cluster names the cluster an environment runs in. The operator commits
// status.cluster together with status.targetNamespace, once, so a bound
// environment's cluster is final: the WorkloadCluster it names, or the
// management cluster when it names none. Before binding, an environment
// without a placement is certain to run in the management cluster; one
// with a placement is pending.
func Cluster(ee *petriv1.EphemeralEnvironment) string {
	switch {
	case ee.Status.Cluster != "":
		return ee.Status.Cluster
	case ee.Status.TargetNamespace != "" || ee.Spec.Placement == nil:
		return ClusterManagement
	}
	return ClusterPending
}
