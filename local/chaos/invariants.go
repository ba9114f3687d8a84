package chaos

// Invariant is one property that must hold after every scenario.
type Invariant int

// The invariants, in the order of the table's columns.
const (
	// Converges: every environment reaches its spec: Ready for its current
	// generation, its namespace owned and active, its deployer RoleBinding
	// present, every component's Helm release deployed with the spec's chart
	// and values; a deleted environment is gone with its namespace.
	Converges Invariant = iota
	// NamespaceStable: status.targetNamespace never changes once it is
	// locked: NamespaceBound True on it, or a namespace made there by Petri.
	NamespaceStable
	// NoOrphanNamespace: no workload namespace outlives its environment.
	NoOrphanNamespace
	// NoHelmOverlap: no two Helm operations run on one release at once,
	// judged from the Job pods' container start and finish times.
	NoHelmOverlap
	// NoDuplicateJob: one piece of work (environment, component, action,
	// generation) gets one Job, unless the previous one failed or a fault
	// removed it or its work.
	NoDuplicateJob
	// NoUnjustifiedDeletion: an environment is deleted only by a user or
	// because its pull request is closed.
	NoUnjustifiedDeletion
	// ScenarioChecks: what the scenario itself promises (sync deletes
	// nothing while a forge fails; squatted namespaces are never adopted nor
	// deleted; the sync leader's successor loses no event; nothing a
	// pull-request author writes steers sync; a workload cluster that does
	// not answer or refuses Petri's credentials has nothing deleted or
	// deployed again for it, its environments say so, and another cluster
	// goes on).
	ScenarioChecks
	numInvariants
)

// Invariants lists every invariant in column order.
func Invariants() []Invariant {
	out := make([]Invariant, 0, numInvariants)
	for i := Invariant(0); i < numInvariants; i++ {
		out = append(out, i)
	}
	return out
}

// Column is the invariant's short table heading.
func (i Invariant) Column() string {
	return [...]string{
		"converges",
		"namespace changed",
		"orphan namespace",
		"Helm overlap",
		"duplicate Job",
		"unjustified deletion",
		"scenario checks",
	}[i]
}

// Description says what the invariant demands.
func (i Invariant) Description() string {
	return [...]string{
		"every environment converges to its spec: Ready for its current generation, its namespace present with Petri's ownership marks, its deployer RoleBinding present, and each component's Helm release deployed at the spec's chart and values; a deleted environment is gone, with its namespace",
		"no `status.targetNamespace` ever changes once locked: once `NamespaceBound` was True on it or Petri made a namespace under it (every value is recorded from a watch; a name only reserved, found taken by someone else before the operator could create it, is given up for the next candidate, as the design allows)",
		"no workload namespace is left without its environment, in the management cluster or in a workload cluster",
		"no two Helm operations overlap on one release (workload namespace + component), from the Job pods' `running.startedAt` and `terminated.finishedAt`, recorded by a watch so that deleted pods count too (1-second resolution)",
		"no Job is duplicated: per (environment, component, action, generation) one Job, unless the previous one had failed or a fault removed it or what it deployed",
		"no environment is deleted without a closed pull request, a user's delete or (8) its ttl being up",
		"the scenario's own promises: no environment deleted while a forge fails (GitHub, Gitea or GitLab) and closed pull requests cleaned up within one resync after it recovers (5); squatted or tampered namespaces never adopted and never deleted (6); no pull request event lost and no comment posted twice when the sync leader dies (7); against a hostile author (8): no other pull request's environment changes (spec, UID, sleep, wake or redeploy requests), no command takes effect without its author's write permission and a maintainer's takes effect whatever an author forged, forged state holds nothing back (an environment forged expired is written; one forged kept or extended expires when its ttl is up), rendered values hold the title, branch, labels and author literally (template delimiters `{{`, `}}` broken apart by a space) and sync's comment keeps its shape, no Secret value appears in any pod's log, comment, deployment status or status, neither the operator's nor sync's log says \"panic\", sync edits no comment but its own and posts nothing on a deployment it did not create, and the API server refuses a SharedWorkload step with `valueFrom`; with a workload cluster cut off or its credentials revoked (9): its WorkloadCluster not `Reachable` (`ClusterUnreachable`, `CredentialsRejected`) and each of its environments Ready False `ClusterUnreachable` naming it within 30 s, a teardown there waiting (`Stalled`, naming it) and the environment still present until the cluster answers, the force-delete annotation releasing one within 30 s and its namespace left untouched there, the other workload cluster's environments Ready and a spec change there deployed during the fault, and afterwards every namespace (by UID) and Helm release revision there as before the fault",
	}[i]
}

// Violation is one breach of an invariant.
type Violation struct {
	Invariant Invariant
	// Key identifies the breach, so a check that runs again reports it once.
	Key string
	// Env names the environment concerned, which tells the scenario it
	// belongs to when scenarios run at once.
	Env string
	// Detail says what happened and where to look.
	Detail string
}
