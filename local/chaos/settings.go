package chaos

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/petri-dev/petri/local/stack"
)

// SyncFlags are the settings of petri-sync the suite runs with: a short
// resync, so that many resync rounds fit into a scenario, short forge
// timeouts, so that a timing-out forge costs seconds per round, and leader
// election timings of 15 s, 10 s and 2 s instead of sync's 30 s, 20 s and
// 4 s: each SIGKILL of sync's leader pod (scenario 7) waits for its Lease
// to expire, and what is checked after a kill (no event lost, no comment
// twice) does not depend on how long that takes.
var SyncFlags = []string{"-resync-interval=" + resyncInterval.String(), "-github-timeout=" + githubTimeout.String(),
	"-gitea-timeout=" + forgeTimeout.String(), "-gitlab-timeout=" + forgeTimeout.String(),
	"-leader-election-lease-duration=15s", "-leader-election-renew-deadline=10s", "-leader-election-retry-period=2s"}

// OperatorFlags are the settings of petri-operator the suite runs with: a
// short release verification period, so that a release deleted behind
// Petri's back is found within a scenario (the default is ten minutes),
// a short workload cluster probe, so that a cluster going away and
// coming back is seen within a second (the default is 30 seconds), and
// controller-runtime's leader election timings (15 s lease, 10 s renew
// deadline, 2 s retry) instead of the operator's (60 s, 40 s, 5 s): every
// SIGKILL of the operator (scenarios 1 and 6) waits for the killed leader's
// Lease to expire, and at 60 s scenario 1's 50 kills alone would take 50
// minutes. What is checked after a kill does not depend on how long the
// Lease is; the defaults' hold through slow renewals is shown by the
// operator's TestLeaderKeepsLeaseThroughSlowRenewals.
var OperatorFlags = []string{"--verify-interval=30s", "--cluster-probe-interval=1s",
	"--leader-election-lease-duration=15s", "--leader-election-renew-deadline=10s", "--leader-election-retry-period=2s"}

// Clusters is the stack's Options.Clusters the suite runs with: the
// management cluster and the workload clusters east and west (scenario 9).
const Clusters = 3

const (
	resyncInterval = 5 * time.Second
	githubTimeout  = 2 * time.Second
	// forgeTimeout is Gitea's and GitLab's, for the same reason.
	forgeTimeout = 2 * time.Second
)

// ConfigRepo writes the configuration repository the suite's stack runs
// with into dir (pass it as stack.Options.ConfigSource): one application on
// the demo repository whose pull requests labelled "preview" get an
// environment of one light component, its values carrying the head commit,
// and the same on each of forges (the stack's Options.Forges: Gitea's
// petri-dev/hello, GitLab's stack.GitLabProject).
func ConfigRepo(dir string, forges ...string) error {
	app := chaosApplicationFile(chaosApplication, "", stack.DemoRepository)
	if err := os.MkdirAll(filepath.Join(dir, "applications"), 0o755); err != nil {
		return err
	}
	files := hostileApplications()
	files["chaos.yaml"] = app
	for _, f := range forges {
		switch f {
		case stack.ForgeGitea:
			files[chaosGiteaApp+".yaml"] = chaosApplicationFile(chaosGiteaApp, f, stack.DemoRepository)
		case stack.ForgeGitLab:
			files[chaosGitLabApp+".yaml"] = chaosApplicationFile(chaosGitLabApp, f, stack.GitLabProject)
		}
	}
	for file, text := range files {
		if err := os.WriteFile(filepath.Join(dir, "applications", file), []byte(text), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// chaosApplicationFile is the application of scenarios 1-7 on a forge
// (GitHub when empty).
func chaosApplicationFile(name, forge, repository string) string {
	forgeLine := ""
	if forge != "" {
		forgeLine = "forge: " + forge + "\n"
	}
	return fmt.Sprintf(`# Environments for the fault-injection suite (local/chaos): every open pull
# request of %[1]s labelled %[2]q gets one light component (the greeter
# chart with no replicas), its values carrying the pull request's head commit.
apiVersion: petri.dev/v1alpha1
kind: Application
name: %[5]s
%[6]srepository: %[1]s
trigger:
  labels: [%[2]s]
components:
  - name: app
    chart:
      repository: %[3]s
      name: greeter
      version: 0.1.0
    values:
      replicas: 0
    pullRequestValues:
      message: "pull request #{{ .Number }}"
      commit: "{{ .SHA }}"
maxEnvironments: 100
url: "http://%[4]s/{{ .Environment }}/"
`, repository, stack.DemoLabel, stack.DeployerCharts, stack.DefaultIngressAddress, name, forgeLine)
}

// hostileApplications are scenario 8's applications, on a repository of
// their own (HostileRepository) so that its pull requests meet no other
// scenario's: "hostile" templates the pull request's title, branch,
// labels and author into its values and its URL, as the example
// configuration repository's applications do, and makes each environment
// a GitHub deployment; "hostile-ttl" expires its environments hostileTTL
// after their first Ready.
func hostileApplications() map[string]string {
	return map[string]string{
		"hostile.yaml": fmt.Sprintf(`# Scenario 8 (hostile author): pull requests of %[1]s labelled %[2]q get one
# light component whose values carry what the author wrote.
apiVersion: petri.dev/v1alpha1
kind: Application
name: %[2]s
repository: %[1]s
trigger:
  labels: [%[2]s]
deployments: true
components:
  - name: app
    chart:
      repository: %[3]s
      name: greeter
      version: 0.1.0
    values:
      replicas: 0
    pullRequestValues:
      message: "PR #{{ .Number }}: {{ .Title }} ({{ join \", \" .Labels }})"
      commit: "{{ .SHA }}"
      env:
        PR_TITLE: "{{ .Title }}"
        PR_BRANCH: "{{ .Branch }}"
        PR_AUTHOR: "{{ .Author }}"
maxEnvironments: 100
url: "http://{{ .BranchSlug }}.hostile.preview.example.com/"
`, HostileRepository, hostileApp, stack.DeployerCharts),
		"hostile-ttl.yaml": fmt.Sprintf(`# Scenario 8 (hostile author): pull requests of %[1]s labelled %[2]q get one
# light component that expires %[4]s after its first Ready.
apiVersion: petri.dev/v1alpha1
kind: Application
name: %[2]s
repository: %[1]s
trigger:
  labels: [%[2]s]
components:
  - name: app
    chart:
      repository: %[3]s
      name: greeter
      version: 0.1.0
    values:
      replicas: 0
    pullRequestValues:
      commit: "{{ .SHA }}"
ttl: %[4]s
maxEnvironments: 100
`, HostileRepository, hostileTTLApp, stack.DeployerCharts, hostileTTL),
	}
}
