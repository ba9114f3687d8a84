package chaos

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"
)

// cell is a row's entry for one invariant.
func (r *Row) cell(i Invariant) string {
	if r.NotRun != "" {
		return "-"
	}
	return fmt.Sprint(r.Count(i))
}

// faultsText is what the table says was injected.
func (r *Row) faultsText() string {
	switch {
	case r.NotRun != "":
		return "not run: " + r.NotRun
	case r.Err != nil:
		return r.Faults + " (the suite could not finish it: " + r.Err.Error() + ")"
	}
	return r.Faults
}

// WriteTable prints the result as a table: scenario, faults injected,
// environments, and the violations of each invariant.
func WriteTable(w io.Writer, res *Result) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := []string{"SCENARIO", "ENVIRONMENTS"}
	for _, i := range Invariants() {
		head = append(head, strings.ToUpper(i.Column()))
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, r := range res.Rows {
		cells := []string{fmt.Sprintf("%d. %s", r.Number, r.Name), fmt.Sprint(r.Environments)}
		for _, i := range Invariants() {
			cells = append(cells, r.cell(i))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Faults injected:")
	for _, r := range res.Rows {
		fmt.Fprintf(w, "  %d. %s (%s)\n", r.Number, r.faultsText(), r.Duration.Round(time.Second))
	}
	if res.Violations() > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Violations:")
		for _, r := range res.Rows {
			for _, i := range Invariants() {
				for _, v := range r.Violations[i] {
					fmt.Fprintf(w, "  scenario %d, %s: %s\n", r.Number, i.Column(), v.Detail)
				}
			}
		}
	}
	fmt.Fprintf(w, "\n%d violations; %s size, seed %d, %s, on %s\n", res.Violations(), res.Size, res.Seed, res.Duration.Round(time.Second), res.Machine)
}

// WriteDoc writes docs/reliability.md from a result.
func WriteDoc(path string, res *Result) error {
	var b strings.Builder
	b.WriteString(docIntro)
	writeLastRun(&b, res)
	b.WriteString(docInvariantsHead)
	for _, i := range Invariants() {
		fmt.Fprintf(&b, "- **%s**: %s.\n", i.Column(), i.Description())
	}
	b.WriteString(docScenarios)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// docIntro opens docs/reliability.md, up to the last run's heading.
const docIntro = `# Reliability

Petri keeps its promises when the machinery around it fails. ` + "`" + `make chaos` + "`" + ` proves it: the
program ` + "`" + `cmd/petri-chaos` + "`" + ` (package ` + "`" + `local/chaos` + "`" + `) starts Petri on the local control plane as
` + "`" + `make demo` + "`" + ` does (the operator and sync as the Deployments of ` + "`" + `config/` + "`" + `, the local node
running every pod, the GitHub stand-in) and two workload clusters (` + "`" + `east` + "`" + ` and ` + "`" + `west` + "`" + `, each its
own control plane and node, [clusters.md](clusters.md#on-this-machine)), with sync also serving
a real Gitea and the GitLab stand-in (` + "`" + `local/gitlabapi` + "`" + `), injects faults scenario by scenario, and after each
scenario checks every invariant below. A short version of every scenario runs in ` + "`" + `make test` + "`" + `
(` + "`" + `tests/chaos` + "`" + `, a few minutes) and fails on any violation; scenario 5's short version plays
on all three forges there.

This page is written by ` + "`" + `make chaos` + "`" + `; the table is the last run's. At full size every
scenario plays alone. The short version plays the scenarios that can share the machine (1, 2,
4, 5, 6) at once and gives each violation to the scenario whose environment it concerns; 3, 7,
8, 9 and 10 play alone.

## Last run

`

// writeLastRun writes the last run's facts, its table and its violations.
func writeLastRun(b *strings.Builder, res *Result) {
	fmt.Fprintf(b, "- date: %s\n", res.Started.UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(b, "- machine: %s\n", res.Machine)
	fmt.Fprintf(b, "- size: %s, seed %d (`bin/petri-chaos -size %s -seed %d` repeats the choices; the machine's timing decides the rest)\n", res.Size, res.Seed, res.Size, res.Seed)
	fmt.Fprintf(b, "- duration: %s\n", res.Duration.Round(time.Second))
	for _, s := range res.Settings {
		fmt.Fprintf(b, "- changed for the run: `%s`\n", s)
	}
	fmt.Fprintf(b, "- violations: **%d**\n\n", res.Violations())

	head := []string{"scenario", "faults injected", "environments"}
	for _, i := range Invariants() {
		head = append(head, i.Column())
	}
	b.WriteString("| " + strings.Join(head, " | ") + " |\n")
	b.WriteString("|" + strings.Repeat("---|", len(head)) + "\n")
	for _, r := range res.Rows {
		cells := []string{fmt.Sprintf("%d. %s", r.Number, r.Name), escape(r.faultsText()), fmt.Sprint(r.Environments)}
		for _, i := range Invariants() {
			cells = append(cells, r.cell(i))
		}
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	if res.Violations() > 0 {
		b.WriteString("\n### Violations\n\n")
		for _, r := range res.Rows {
			for _, i := range Invariants() {
				for _, v := range r.Violations[i] {
					fmt.Fprintf(b, "- scenario %d, %s: %s\n", r.Number, i.Column(), escape(v.Detail))
				}
			}
		}
	}

}

// docInvariantsHead opens the list of invariants.
const docInvariantsHead = `
## Invariants

Checked after every scenario; each column of the table counts one invariant's violations.

`

// docScenarios describes the scenarios and how to run them.
const docScenarios = `
## Scenarios

Sizes are full (` + "`" + `make chaos` + "`" + `) / short (` + "`" + `make test` + "`" + `, ` + "`" + `-size short` + "`" + `).

1. **Operator SIGKILLed at random moments.** Environments (two components each, one depending
   on the other) are created, get a new spec, and are deleted, several at a time. The operator's
   process is killed with SIGKILL a random 0.5-6 s after each restarted process took the leader
   lease again (the local node restarts it, as a kubelet restarts a killed container): at
   least 50 kills over at least 20 environments / 2 kills over 3.
2. **Deployer pods killed mid-Helm.** The pod of a deploy or undeploy Job is killed the moment
   its release is seen pending (` + "`" + `pending-install` + "`" + `, ` + "`" + `pending-upgrade` + "`" + `, ` + "`" + `uninstalling` + "`" + `), so the
   Job's next pod finds the release locked: 20 / 2 kills, at most one per Job. The web
   component waits for its pod to be ready, so the operations last long enough to be caught.
3. **kube-apiserver restarted.** Killed, kept down 1-4 s and started again on the same etcd,
   port and keys, a random moment after environments were created, changed and deleted: 6
   restarts (two rounds of every phase) / 1 (during a redeploy).
4. **Deleted behind Petri's back.** From Ready environments: the workload namespace, a Helm
   release (` + "`" + `helm uninstall` + "`" + ` as cluster administrator), the deployer RoleBinding, a finished
   deploy Job; during a redeploy, the running deploy Job; during teardown, the running undeploy
   Job (` + "`" + `kubectl delete job` + "`" + ` semantics: pods go in the background). 12 / 4 environments.
5. **Forge API failing.** On each forge at the same time, pull requests get environments
   through sync: GitHub's stand-in fails by itself; Gitea (a real server, which cannot be told
   to fail) and the GitLab stand-in fail through a fault proxy between sync and them
   (` + "`" + `stack.FaultProxy` + "`" + `). Each answers 500, times out, answers 403 (GitHub), 429 (Gitea and
   GitLab) and 403 (Gitea, as a proxy in front of it may) with ` + "`" + `Retry-After` + "`" + `, lists no pull
   request (while every other call fails), and answers 404 for the pull requests it does not
   list (GitLab's listing of what changed, which would name them closed, then lists open
   merge requests only): 3 / 1 resync rounds each. Meanwhile pull requests are closed with
   their webhooks lost (GitHub's never sent, Gitea's refused on the way by a proxy in front of
   sync, GitLab's muted). No environment may be deleted during the outage; after it, each
   closed pull request's environment must be deleted within one resync (plus 10 s). This
   scenario found that a GitLab listing answered during an outage moved sync's
   ` + "`" + `updated_after` + "`" + ` cursor past the merge requests closed meanwhile; the listing after a failed
   call is now a full one.
6. **Namespace squatting and tampered ownership.** While the operator is down, new
   environments' first namespace names are squatted, plainly or with forged ownership marks
   (every label and annotation Petri puts on the environment's namespace, bar the ownership
   proof no one else can make); a
   bound namespace's UID label is tampered with and its environment deleted; a Ready
   environment's namespace is deleted and its name squatted the moment it is free, then the
   environment deleted. Squats are never adopted (no mark changed, no RoleBinding, no release)
   and never deleted; stuck environments leave with the force-delete annotation.
7. **Sync leader killed while webhooks arrive.** With sync running two replicas under leader
   election, the leader is SIGKILLed (5 / 1 times; its whole pod first, then its process and
   the pod in turn) while pull requests are opened,
   pushed to and closed, each with its webhook (60 / 10 deliveries): a live process must renew
   the lease within 30 s of each kill, every pull request must end with the environment of its
   head commit (or none once closed), and none may get a second comment. Without leader
   election in the installation, the scenario reports that it did not run.
8. **Hostile author.** Pull requests of a repository of its own (` + "`" + `petri-dev/hostile` + "`" + `; the
   application ` + "`" + `hostile` + "`" + ` templates title, branch, labels and author into its values and its
   URL, as the example configuration repository does, and makes GitHub deployments;
   ` + "`" + `hostile-ttl` + "`" + ` expires after 20 s) are attacked by their authors. Forged marker comments with
   a state line, before sync's comment exists (a draft, or before the trigger label) and after
   it: the last handled command set so that a maintainer's ` + "`" + `/petri redeploy` + "`" + ` would be
   ignored, the environment kept or extended to 2099, its head commit marked expired so that
   it would never be written, and production's deployment (made by a release pipeline) named
   as its own so that sync would mark it inactive. ` + "`" + `/petri` + "`" + ` commands from people with read,
   triage or no access, from a fork's author, edited into a comment, posted and deleted (each
   with its ` + "`" + `issue_comment` + "`" + ` delivery), and in a signed delivery that names a maintainer as
   the author; a maintainer's command delivered and replayed (5 / 3 times with the same
   GUID). Titles, branches and labels of template syntax, YAML (newlines, ` + "`" + `: ` + "`" + `, anchors),
   shell metacharacters, sync's own markup, bytes that are not UTF-8 and 64 KiB of text (one
   pull request per kind / one with all). A SharedWorkload whose provision step reads the
   ownership key through ` + "`" + `valueFrom.secretKeyRef` + "`" + `. A bystander pull request is never touched.
   Checks: the invariants of the scenario-checks column above (8), with the Helm release of each
   hostile environment deployed at its values (converges).
   On GitLab the short version runs in ` + "`" + `tests/forges/gitlab` + "`" + ` (` + "`" + `TestHostileAuthorOnGitLab` + "`" + `, in
   ` + "`" + `make test` + "`" + `): notes with sync's marker and a forged state before and after sync's, ` + "`" + `/petri
   redeploy` + "`" + ` from a Guest posted, edited into a note and posted and deleted, a Developer's
   command replayed three times with the same ` + "`" + `X-Gitlab-Event-UUID` + "`" + `, and a title, branch and
   labels of template syntax, YAML, shell metacharacters, bytes that are not UTF-8 and 64 KiB;
   sync keeps one note of its own, leaves the forged ones alone, honours no Guest's command
   and the replayed one once. On Gitea it runs against the real server in ` + "`" + `tests/forges` + "`" + `
   (` + "`" + `TestHostileAuthorOnGitea` + "`" + `, in ` + "`" + `make test` + "`" + `): a stranger's fork opens the pull request;
   comments with sync's marker and a forged state (last command, kept, extended to 2099, head
   commit expired) before and after sync's; the stranger's ` + "`" + `/petri redeploy` + "`" + `, ` + "`" + `keep` + "`" + ` and
   ` + "`" + `extend` + "`" + ` posted, edited into a comment and posted and deleted; a writer's command whose
   signed delivery the proxy in front of sync sends again three times; a title, branch and
   labels of template syntax, YAML, shell metacharacters and sync's markup, a 64 KiB label.
   Gitea refuses the rest: git takes no ` + "`" + `: ` + "`" + `, ` + "`" + `*` + "`" + `, space or newline in a branch, Gitea lists no
   branch that is not UTF-8, cuts titles at 255 characters and turns bytes that are not UTF-8
   into U+FFFD. Sync keeps one comment of its own and edits no forged one; its
   PullRequestState is neither kept, extended nor expired and names the newest command it
   handled; no command of the stranger takes effect, the replayed one once (one Helm
   revision); the values hold the text as Gitea holds it; the bystander's environment does
   not change; no Secret value is in a comment, a status or an environment's status; sync and
   the operator never restart and log no panic. Scenario 8 in ` + "`" + `local/chaos` + "`" + ` plays on GitHub.
9. **Workload cluster unreachable or its credentials revoked.** Environments (the two light
   components) are placed by name in the workload clusters ` + "`" + `east` + "`" + ` (6 / 3) and ` + "`" + `west` + "`" + ` (4 / 1),
   the operator probing them every second. East's kube-apiserver is killed and kept down 10-30 /
   12 s, then started again on the same etcd (3 / 1 times); Petri's credentials there are
   revoked by deleting the ServiceAccount ` + "`" + `petri-operator` + "`" + ` in east (which invalidates the token of
   the management cluster's Secret ` + "`" + `petri-cluster-east` + "`" + `), then given back as the registration
   gives them: the ServiceAccount created again and a kubeconfig with a new TokenRequest token
   written into the Secret (2 / 1 times). During each fault the WorkloadCluster ` + "`" + `east` + "`" + ` must be
   ` + "`" + `Reachable` + "`" + ` False (` + "`" + `ClusterUnreachable` + "`" + `, ` + "`" + `CredentialsRejected` + "`" + `) and every east environment
   Ready False ` + "`" + `ClusterUnreachable` + "`" + ` with a message naming east, within 30 s; a spec change of
   a west environment must be deployed and every west environment stay Ready. During each cut
   an east environment is deleted: its teardown must wait (` + "`" + `Stalled` + "`" + `, naming east) and the
   environment must not be gone before east answers, then end with its namespace gone from
   east; during the last cut another is deleted and given ` + "`" + `petri.dev/force-delete` + "`" + `: it must be
   released within 30 s, and once east answers its namespace must still be there, untouched
   (the suite then deletes it). After each fault the east environments must be Ready again with
   the namespace (by UID) and the Helm release revisions, read from east's own API server, of
   before the fault: nothing deleted, nothing deployed again. The orphan check lists the
   namespaces of every workload cluster, and the Job and Helm invariants watch their Jobs and
   pods. Without workload clusters in the stack, the scenario reports that it did not run.
10. **kube-apiserver saturated.** The operator runs at its own leader election timings
   (60 s lease, 40 s renew deadline, 5 s retry; the rest of the suite uses 15 s, 10 s and 2 s
   so that its SIGKILLs wait less for the Lease). From the first create, 48 / 12 clients, each
   a ServiceAccount of its own (so at the ` + "`" + `workload-low` + "`" + ` priority level with the deployer Jobs,
   as every ServiceAccount's requests are), list every pod and ConfigMap of the cluster as fast
   as kube-apiserver answers, for 60 / 20 s, while 100 / 8 environments deploy. The operator
   must keep its Lease (the same holder, no transition: a restarted process would be a new
   one), no deployer pod may end saying ` + "`" + `release lock lost` + "`" + ` (a Helm operation cancelled
   because a renewal of its release Lease did not get through), and every environment must be
   Ready after, and gone after its delete.

## Running it

` + "`" + `` + "`" + `` + "`" + `
make chaos                      # full size: builds Petri, runs every scenario, rewrites this page
bin/petri-chaos -size short     # the short version, printed only
bin/petri-chaos -scenarios 1,4  # some scenarios
bin/petri-chaos -size short -scenarios 8  # the hostile author alone
` + "`" + `` + "`" + `` + "`" + `

The program exits non-zero on any violation; the log of every pod stays in the run's directory
(` + "`" + `-dir` + "`" + `, printed at the end).
`

// escape keeps a text inside one Markdown table cell.
func escape(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}

// logf prints one line of progress with the time since the run began.
func (r *run) logf(format string, args ...any) {
	if r.opts.Log == nil {
		return
	}
	r.logMu.Lock()
	defer r.logMu.Unlock()
	fmt.Fprintf(r.opts.Log, "[%6.1fs] %s\n", time.Since(r.start).Seconds(), fmt.Sprintf(format, args...))
}

// machine describes the processors and memory of this machine.
func machine() string {
	mem := ""
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(l, "MemTotal:"); ok {
				var kb int64
				if _, err := fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb); err == nil {
					mem = fmt.Sprintf(", %.1f GiB memory", float64(kb)/(1<<20))
				}
			}
		}
	}
	return fmt.Sprintf("%d processors (nproc)%s, %s/%s", runtime.NumCPU(), mem, runtime.GOOS, runtime.GOARCH)
}
