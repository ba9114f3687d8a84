package bench

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Markers around the generated parts of docs/benchmarks.md; the rest of
// the file (the history of optimisations) is kept as it is. The at-rest
// figures (most of an hour to measure) have a part of their own, rewritten
// only by a run that measured them.
const (
	BeginMarker       = "<!-- petri-bench:begin (make bench rewrites up to the end marker) -->"
	EndMarker         = "<!-- petri-bench:end -->"
	AtRestBeginMarker = "<!-- petri-bench-atrest:begin (rewritten by a make bench that measures at rest) -->"
	AtRestEndMarker   = "<!-- petri-bench-atrest:end -->"
)

// Targets. The first round's absolute ones for scale (1,000 no-op
// environments Ready within 60 s, 500 real ones within 1.3 times the
// deployer floor) proved to lie below this machine's floor and are restated
// as ratios measured in one run: the operator over the raw-write floor, a
// deploy Job's whole cost over its own process's, and GitHub requests per
// webhook event.
const (
	TargetSyncP99        = 25 * time.Millisecond
	TargetOverheadRatio  = 2.0
	TargetFloorRatio     = 1.3
	TargetJobCPUFactor   = 2.5
	TargetJobRequests    = 30
	TargetGitHubPerEvent = 2
	TargetNoopRSS        = 256 << 20
	targetNoopSize       = 1000
	componentsPerEnviron = 3
)

// DeployerFloor is the time n environments of three components need at
// least with the real deployer: every deploy Job's CPU time spread over
// every core.
func (r *Results) DeployerFloor(n int) time.Duration {
	if r.Deployer == nil || r.Machine.CPUs == 0 {
		return 0
	}
	return time.Duration(float64(n*componentsPerEnviron) * float64(r.Deployer.ProcessInstallCPU.Median) / float64(r.Machine.CPUs))
}

type row struct{ name, median, p99, target, met string }

func yesNo(ok bool) string {
	if ok {
		return "yes"
	}
	return "no"
}

func (r *Results) rows() []row {
	var rows []row
	if s := r.SyncLoad; s != nil {
		rows = append(rows, row{
			fmt.Sprintf("sync: webhook → environment written (%d/s, %d repos, %s; %d events, %d lost, %d superseded)", s.Rate, s.Repos, s.Duration, s.Events, s.Lost, s.Superseded),
			ms(s.Latency.Median), ms(s.Latency.P99), "p99 ≤ 25 ms", yesNo(s.Latency.P99 <= TargetSyncP99 && s.Lost == 0),
		})
		rows = append(rows, row{
			fmt.Sprintf("sync: repository reconciles during the load (%.0f for %d events), mean duration", s.Reconciles, s.Events),
			ms(s.ReconcileTime), "", "", "",
		})
		charged := float64(s.GitHubRequests-s.NotModified) / float64(max(s.Events, 1))
		sustained := "-"
		if charged > 0 {
			sustained = fmt.Sprintf("%.2f events/s", 5000/3600.0/charged)
		}
		rows = append(rows, row{
			fmt.Sprintf("sync: GitHub requests during the load (%d, %d answered 304; stand-in limit %s/h; reconciles held for the rate limit: %.0f)", s.GitHubRequests, s.NotModified, limitText(s.RateLimit), s.RateLimited),
			fmt.Sprintf("%.2f charged per event", charged), "", fmt.Sprintf("≤ %d per event (a 5,000/h token sustains %s)", TargetGitHubPerEvent, sustained),
			yesNo(s.Events > 0 && charged <= TargetGitHubPerEvent),
		})
	}
	if s := r.Resync; s != nil {
		rows = append(rows, row{
			fmt.Sprintf("sync: GitHub requests per unchanged resync (%d repos × %d open PRs)", s.Repos, s.PullRequests),
			fmt.Sprintf("%.0f (%.0f × 304)", s.Requests.Median, s.NotModified.Median),
			fmt.Sprintf("max %.0f", s.Requests.Max), "only 304 answers", yesNo(s.Charged.Max == 0),
		})
	}
	if o := r.Overhead; o != nil {
		rows = append(rows,
			row{"operator: create → Ready, 3 components, no-op deployer", ms(o.Operator.Median), ms(o.Operator.P99), "", ""},
			row{fmt.Sprintf("floor: the same %d API writes by a plain client, same Jobs", o.FloorWrites), ms(o.Floor.Median), ms(o.Floor.P99), "", ""},
			row{"operator overhead: operator ÷ floor (medians)", fmt.Sprintf("%.2fx", o.Ratio), "", "≤ 2x", yesNo(o.Ratio <= TargetOverheadRatio)},
			row{"operator: delete → gone, no-op deployer", ms(o.Teardown.Median), ms(o.Teardown.P99), "", ""},
		)
	}
	if d := r.Deployer; d != nil {
		rows = append(rows,
			row{"deployer: one deploy Job process, install (wall)", ms(d.ProcessInstall.Median), ms(d.ProcessInstall.P99), "", ""},
			row{"deployer: one deploy Job process, install (CPU)", ms(d.ProcessInstallCPU.Median), ms(d.ProcessInstallCPU.P99), "", ""},
			row{"deployer: one deploy Job process, no-op upgrade (wall)", ms(d.ProcessUpgrade.Median), ms(d.ProcessUpgrade.P99), "", ""},
			row{"deployer: one deploy Job process, no-op upgrade (CPU)", ms(d.ProcessUpgradeCPU.Median), ms(d.ProcessUpgradeCPU.P99), "", ""},
			row{"Helm in-process: install (wall / CPU)", ms(d.InProcessInstall.Median) + " / " + ms(d.InProcessInstallCPU.Median), ms(d.InProcessInstall.P99), "", ""},
			row{"Helm in-process: no-op upgrade (wall / CPU)", ms(d.InProcessUpgrade.Median) + " / " + ms(d.InProcessUpgradeCPU.Median), ms(d.InProcessUpgrade.P99), "", ""},
		)
		if d.BareInstallMachineCPU > 0 {
			rows = append(rows, row{"deploy process without a Job, install: the machine's CPU / kube-apiserver requests", fmt.Sprintf("%s / %.0f", ms(d.BareInstallMachineCPU), d.BareInstallRequests), "", "", ""})
		}
	}
	if x, ok := r.atRestSummary(); ok {
		rows = append(rows, x)
	}
	return rows
}

func (r *Results) scaleTarget(s ScaleResult) (string, string) {
	switch {
	case s.Mode == ModeNoop && s.Environments == targetNoopSize:
		return "RSS < 256 MiB", yesNo(s.NotReady == 0 && s.PeakRSS < TargetNoopRSS)
	case s.Mode == ModeReal:
		factor, requests, ok := r.jobCost(s)
		if !ok {
			return "", ""
		}
		text := fmt.Sprintf("per deploy Job: machine CPU %.1fx its process's (≤ %.1fx), %.0f kube-apiserver requests (≤ %d)", factor, TargetJobCPUFactor, requests, TargetJobRequests)
		if f, q, ok := r.jobFloor(); ok {
			text += fmt.Sprintf("; its floor, Helm without a Job plus a Job with nothing in it: %.1fx, %.0f requests", f, q)
		}
		return text, yesNo(s.NotReady == 0 && factor <= TargetJobCPUFactor && requests <= TargetJobRequests)
	}
	return "", ""
}

// jobCost is what one deploy Job of a real scale run cost from the first
// create to the last Ready: the machine's CPU (every process of the run)
// over one deploy Job process's own (the deployer measurement's install),
// and kube-apiserver's requests from every client.
func (r *Results) jobCost(s ScaleResult) (factor, requests float64, ok bool) {
	jobs := float64(s.Environments * componentsPerEnviron)
	if r.Deployer == nil || r.Deployer.ProcessInstallCPU.Median <= 0 || len(s.CPUToReady) == 0 || jobs == 0 {
		return 0, 0, false
	}
	var cpu time.Duration
	for _, d := range s.CPUToReady {
		cpu += d
	}
	perJob := float64(cpu) / jobs
	for _, v := range s.APIServerByResource {
		requests += v
	}
	return perJob / float64(r.Deployer.ProcessInstallCPU.Median), requests / componentsPerEnviron, true
}

// jobFloor is the least a deploy Job can cost on this machine, whoever
// runs it: the deploy process's install with no Job around it (the
// machine's CPU and kube-apiserver's requests, the deployer measurement's
// bare installs) plus a Job with nothing in it (the largest no-op floor
// run's machine CPU and requests per Job). The CPU is given as a factor of
// the process's own, as jobCost's.
func (r *Results) jobFloor() (factor, requests float64, ok bool) {
	d := r.Deployer
	if d == nil || d.ProcessInstallCPU.Median <= 0 || d.BareInstallMachineCPU <= 0 {
		return 0, 0, false
	}
	var floor *ScaleResult
	for i, s := range r.Scale {
		if s.Mode == ModeFloor && s.NotReady == 0 && (floor == nil || s.Environments > floor.Environments) {
			floor = &r.Scale[i]
		}
	}
	if floor == nil || floor.Environments == 0 {
		return 0, 0, false
	}
	jobs := float64(floor.Environments * componentsPerEnviron)
	var cpu time.Duration
	for _, v := range floor.CPUToReady {
		cpu += v
	}
	var emptyRequests float64
	for _, v := range floor.APIServerByResource {
		emptyRequests += v
	}
	perJob := float64(d.BareInstallMachineCPU) + float64(cpu)/jobs
	return perJob / float64(d.ProcessInstallCPU.Median), d.BareInstallRequests + emptyRequests/componentsPerEnviron, true
}

// WriteTable prints the figures as a table.
func (r *Results) WriteTable(w io.Writer) {
	m := r.Machine
	fmt.Fprintf(w, "Petri benchmarks%s: %d CPUs (%s), %d MiB, %s, %s, load average at start %s\n\n",
		map[bool]string{true: " (smoke run: tiny sizes, figures not comparable)"}[r.Smoke],
		m.CPUs, m.CPUModel, m.MemoryMiB, m.GoVersion, m.Date.Format(time.RFC3339), m.LoadAverage)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "measurement\tmedian\tp99\ttarget\tmet")
	for _, x := range r.rows() {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", x.name, x.median, x.p99, x.target, x.met)
	}
	tw.Flush()
	if len(r.Scale) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "scale\tcreates\tall Ready\tall gone\toperator peak RSS\toperator CPU\tAPI requests per environment\ttarget\tmet")
		for i, s := range r.Scale {
			t, met := r.scaleTarget(s)
			if s.Mode == ModeFloor {
				ratio, met := r.floorRatio(i)
				fmt.Fprintf(tw, "%d × 3 components, %s\t-\t%s\t-\t-\t-\t-\t%s\t%s\n", s.Environments, s.Mode, s.readyCell(), ratio, met)
				continue
			}
			fmt.Fprintf(tw, "%d × 3 components, %s\t%s\t%s\t%s\t%d MiB\t%s\t%s\t%s\t%s\n", s.Environments, s.Mode, secs(s.Created),
				s.readyCell(), readyCell(s.AllGone, s.NotGone), s.PeakRSS>>20, secs(s.CPU), verbs(s.Requests), t, met)
		}
		tw.Flush()
		for _, s := range r.Scale {
			if s.Error != "" {
				fmt.Fprintf(w, "  %d %s: %s\n", s.Environments, s.Mode, s.Error)
			}
		}
	}
	r.writeAtRestTable(w)
	r.writeHealthTable(w)
	fmt.Fprintf(w, "\ntook %s\n", secs(r.Took))
}

func sortedByCount(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] || m[keys[i]] == m[keys[j]] && keys[i] < keys[j] })
	return keys
}

func limitText(n int) string {
	if n == 0 {
		return "5,000"
	}
	return fmt.Sprintf("%d", n)
}

// readyCell is the run's time to all Ready, with the environments that
// missed it and the operator's restarts on the way.
func (s ScaleResult) readyCell() string {
	c := readyCell(s.AllReady, s.NotReady)
	if s.OperatorRestarts > 0 {
		c += fmt.Sprintf(" (operator restarted %d×)", s.OperatorRestarts)
	}
	return c
}

func readyCell(d time.Duration, missing int) string {
	if missing > 0 {
		return fmt.Sprintf("%s (%d missing)", secs(d), missing)
	}
	return secs(d)
}

// verbs writes requests per environment by verb, largest first.
func verbs(m map[string]float64) string {
	type kv struct {
		k string
		v float64
	}
	var l []kv
	total := 0.0
	for k, v := range m {
		l = append(l, kv{k, v})
		total += v
	}
	sort.Slice(l, func(i, j int) bool { return l[i].v > l[j].v || l[i].v == l[j].v && l[i].k < l[j].k })
	parts := []string{fmt.Sprintf("%.1f:", total)}
	for _, x := range l {
		parts = append(parts, fmt.Sprintf("%s %.1f", x.k, x.v))
	}
	return strings.Join(parts, " ")
}

// Markdown is the generated part of docs/benchmarks.md.
func (r *Results) Markdown() string {
	var b strings.Builder
	m := r.Machine
	fmt.Fprintln(&b, BeginMarker)
	fmt.Fprintf(&b, "\n## Latest run\n\n")
	fmt.Fprintf(&b, "| machine | |\n|---|---|\n| CPUs | %d (%s) |\n| memory | %d MiB |\n| Go | %s |\n| date | %s |\n| load average (1, 5, 15 min) at the start | %s |\n| run took | %s |\n\n",
		m.CPUs, m.CPUModel, m.MemoryMiB, m.GoVersion, m.Date.Format("2006-01-02 15:04 MST"), m.LoadAverage, secs(r.Took))
	if r.Smoke {
		fmt.Fprintf(&b, "Smoke run: tiny sizes, the figures say only that every measurement works.\n\n")
	}
	fmt.Fprintln(&b, "| measurement | median | p99 | target | met |")
	fmt.Fprintln(&b, "|---|---|---|---|---|")
	for _, x := range r.rows() {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", x.name, x.median, x.p99, x.target, x.met)
	}
	if s := r.SyncLoad; s != nil && len(s.ByKind) > 0 {
		fmt.Fprintf(&b, "\nGitHub requests of sync during the load, per event (%d events):\n\n| request | per event |\n|---|---|\n", s.Events)
		for _, k := range sortedByCount(s.ByKind) {
			fmt.Fprintf(&b, "| `%s` | %.2f |\n", k, float64(s.ByKind[k])/float64(max(s.Events, 1)))
		}
	}
	if len(r.Scale) > 0 {
		r.scaleMarkdown(&b)
	}
	if d := r.Deployer; d != nil && len(r.Scale) > 0 {
		fmt.Fprintf(&b, "\nA real run's cost per deploy Job: the CPU time of every process of the run (the control plane, the operator, the node and the pods) from the first create to the last Ready, over the run's 3 × N deploy Jobs, beside one deploy Job process's own (the deployer measurement's install: %s); and kube-apiserver's requests per environment from every client over 3. The deployer floor of N environments, every deploy Job's process alone spread over the %d cores, is N × 3 × %s ÷ %d; for 500: %s.\n",
			ms(d.ProcessInstallCPU.Median), m.CPUs, ms(d.ProcessInstallCPU.Median), m.CPUs, secs(r.DeployerFloor(500)))
	}
	if len(r.AtRest) == 0 {
		fmt.Fprintf(&b, "\nAt rest was not measured in this run; the at-rest part below is from the last run that measured it, on the machine and at the date it names.\n")
	}
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, EndMarker)
	return b.String()
}

// AtRestMarkdown is the generated at-rest part of docs/benchmarks.md;
// empty when the run did not measure at rest.
func (r *Results) AtRestMarkdown() string {
	if len(r.AtRest) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintln(&b, AtRestBeginMarker)
	r.atRestMarkdown(&b)
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, AtRestEndMarker)
	return b.String()
}

// scaleMarkdown writes the scale runs' tables of the generated part.
func (r *Results) scaleMarkdown(b *strings.Builder) {
	fmt.Fprintln(b)
	fmt.Fprintln(b, "| scale (created at once) | creates | all Ready | all gone | operator peak RSS | operator CPU | load before → after | target | met |")
	fmt.Fprintln(b, "|---|---|---|---|---|---|---|---|---|")
	for i, s := range r.Scale {
		t, met := r.scaleTarget(s)
		if s.Mode == ModeFloor {
			ratio, met := r.floorRatio(i)
			fmt.Fprintf(b, "| %d × 3 components, %s | - | %s | - | - | - | %s → %s | %s | %s |\n", s.Environments, s.Mode,
				s.readyCell(), s.LoadBefore, s.LoadAfter, ratio, met)
			continue
		}
		fmt.Fprintf(b, "| %d × 3 components, %s | %s | %s | %s | %d MiB | %s | %s → %s | %s | %s |\n", s.Environments, s.Mode, secs(s.Created),
			s.readyCell(), readyCell(s.AllGone, s.NotGone), s.PeakRSS>>20, secs(s.CPU), s.LoadBefore, s.LoadAfter, t, met)
	}
	if r.hasFloor() {
		fmt.Fprintln(b)
		fmt.Fprintln(b, "A floor run follows each no-op run: the writes the operator makes for each environment (the environment, namespace, ServiceAccount, RoleBinding, values Secrets, Jobs in graph order, status) issued raw by a plain client, every environment at once, the same Jobs completed by the same Job controller and node. Its time to all Ready is what this machine needs for the environments' Jobs alone; the ratio beside it is the no-op operator's all Ready over it.")
	}
	fmt.Fprintln(b)
	fmt.Fprintln(b, "Where the time went: the operator's reconciles per environment (with errors), their mean duration and the longest work queue seen; a deploy Job's creation to completion (Job controller and local node); kube-apiserver's mean request duration (watches excluded) and requests.")
	fmt.Fprintln(b)
	fmt.Fprintln(b, "| scale | reconciles per environment | errors | mean reconcile | longest queue | deploy Job created → complete, median / p99 | kube-apiserver mean request | kube-apiserver requests |")
	fmt.Fprintln(b, "|---|---|---|---|---|---|---|---|")
	for _, s := range r.Scale {
		if s.Mode == ModeFloor {
			fmt.Fprintf(b, "| %d, %s | - | - | - | - | %s / %s | %s | %.0f (to all Ready) |\n", s.Environments, s.Mode,
				secs(s.JobLatency.Median), secs(s.JobLatency.P99), ms(s.APIServerLatency), s.APIServerRequests)
			continue
		}
		fmt.Fprintf(b, "| %d, %s | %.1f | %.2f | %s | %.0f | %s / %s | %s | %.0f |\n", s.Environments, s.Mode, s.Reconciles, s.Errors, ms(s.ReconcileTime), s.MaxQueue,
			secs(s.JobLatency.Median), secs(s.JobLatency.P99), ms(s.APIServerLatency), s.APIServerRequests)
	}
	fmt.Fprintln(b)
	writeStages(b, r.Scale)
	fmt.Fprintln(b, "kube-apiserver's requests per environment from the first create to the last Ready, from every client (the operator, the Job controller, the node, a namespace's own controllers), by verb and resource (`apiserver_request_total`, watches left out):")
	fmt.Fprintln(b)
	fmt.Fprintln(b, "| scale | total | largest by resource |")
	fmt.Fprintln(b, "|---|---|---|")
	for _, s := range r.Scale {
		if len(s.APIServerByResource) == 0 {
			continue
		}
		total := 0.0
		for _, v := range s.APIServerByResource {
			total += v
		}
		fmt.Fprintf(b, "| %d, %s | %.1f | %s |\n", s.Environments, s.Mode, total, topResources(s.APIServerByResource, 10))
	}
	fmt.Fprintln(b)
	fmt.Fprintln(b, "Where the machine's CPU went from the first create to the last Ready, in cores on average, by process (read from /proc; the benchmark's own process runs the local node, waits for the pods' processes and watches):")
	fmt.Fprintln(b)
	fmt.Fprintln(b, "| scale | cores by process |")
	fmt.Fprintln(b, "|---|---|")
	for _, s := range r.Scale {
		if len(s.CPUToReady) > 0 {
			fmt.Fprintf(b, "| %d, %s | %s |\n", s.Environments, s.Mode, s.CPUToReady.cores(s.AllReady))
		}
	}
	fmt.Fprintln(b)
	fmt.Fprintln(b, "Operator API requests per environment lifecycle (create, deploy, Ready, delete, gone), by verb, counted by the operator (`petri_api_requests_total`):")
	fmt.Fprintln(b)
	fmt.Fprintln(b, "| scale | total | by verb | largest by resource |")
	fmt.Fprintln(b, "|---|---|---|---|")
	for _, s := range r.Scale {
		if s.Mode == ModeFloor {
			continue
		}
		total := 0.0
		for _, v := range s.Requests {
			total += v
		}
		fmt.Fprintf(b, "| %d, %s | %.1f | %s | %s |\n", s.Environments, s.Mode, total, byVerb(verbs(s.Requests)), topResources(s.ByResource, 6))
	}
	for _, s := range r.Scale {
		if s.Error != "" {
			fmt.Fprintf(b, "\n%d environments, %s: %s\n", s.Environments, s.Mode, s.Error)
		}
	}
	for _, s := range r.Scale {
		if s.NoopMessage != "" {
			fmt.Fprintf(b, "\nNo-op mode: every Job's pod reports `%s`.\n", s.NoopMessage)
			break
		}
	}
}

func (r *Results) hasFloor() bool {
	for _, s := range r.Scale {
		if s.Mode == ModeFloor {
			return true
		}
	}
	return false
}

// floorRatio is the no-op operator's all Ready over the floor's: the
// floor run at index i of r.Scale against the no-op run of its size that
// came just before it (each floor run follows its no-op run; with the same
// size run several times, each floor is paired with its own).
func (r *Results) floorRatio(i int) (string, string) {
	f := r.Scale[i]
	for j := i - 1; j >= 0; j-- {
		s := r.Scale[j]
		if s.Mode != ModeNoop || s.Environments != f.Environments {
			continue
		}
		if s.NotReady != 0 || f.NotReady != 0 || f.AllReady <= 0 {
			return "", ""
		}
		ratio := float64(s.AllReady) / float64(f.AllReady)
		return fmt.Sprintf("operator ÷ floor %.2fx (≤ %.1fx)", ratio, TargetFloorRatio), yesNo(ratio <= TargetFloorRatio)
	}
	return "", ""
}

func topResources(m map[[2]string]float64, n int) string {
	type kv struct {
		k [2]string
		v float64
	}
	var l []kv
	for k, v := range m {
		l = append(l, kv{k, v})
	}
	sort.Slice(l, func(i, j int) bool { return l[i].v > l[j].v || l[i].v == l[j].v && l[i].k[1] < l[j].k[1] })
	var parts []string
	for i, x := range l {
		if i == n {
			break
		}
		parts = append(parts, fmt.Sprintf("%s %s %.1f", x.k[0], x.k[1], x.v))
	}
	return strings.Join(parts, ", ")
}

// UpdateDoc replaces the generated parts of the document at path with the
// results, keeping everything else: the part between BeginMarker and
// EndMarker, and the at-rest part when the run measured at rest (a run
// that did not keeps the one there). A document without the markers gets
// the parts appended.
func (r *Results) UpdateDoc(path string) error {
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	doc := string(old)
	if doc == "" {
		doc = "# Benchmarks\n"
	}
	doc = replacePart(doc, BeginMarker, EndMarker, r.Markdown(), len(doc))
	if atRest := r.AtRestMarkdown(); atRest != "" {
		// A new at-rest part goes right after the main one.
		after := strings.Index(doc, EndMarker) + len(EndMarker) + 1
		doc = replacePart(doc, AtRestBeginMarker, AtRestEndMarker, atRest, min(after, len(doc)))
	}
	return os.WriteFile(path, []byte(doc), 0o644)
}

// replacePart replaces what lies between begin and end (both included,
// and the newline after end) with gen; without them gen is inserted at
// offset at.
func replacePart(doc, begin, end, gen string, at int) string {
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if i >= 0 && j > i {
		return doc[:i] + gen + strings.TrimPrefix(doc[j+len(end):], "\n")
	}
	return strings.TrimRight(doc[:at], "\n") + "\n\n" + gen + doc[at:]
}

// byVerb is verbs' text without its leading total ("54.1: ").
func byVerb(v string) string {
	if _, rest, ok := strings.Cut(v, ": "); ok {
		return rest
	}
	return v
}
