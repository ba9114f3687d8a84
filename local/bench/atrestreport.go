package bench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// What the at-rest figures say at the production interval and TTL.
//
// The simulated day runs faster than a real one by speedup (10 minutes over
// the short verify interval): everything an idle environment does follows
// its verify Jobs, so a rate read in the window is divided by speedup, and
// scaled to 1,000 environments. What is kept follows Little's law: the
// objects kept are the rate they are made at times how long each is kept.
// An object kept for the TTL (it lives at least half of it on average) is
// kept 24 hours in production, so its count grows with TTL/interval: ×
// 144/Ratio. One kept for seconds (a verified verify Job until its outcome
// is recorded) is kept as long in production, where it is made speedup
// times less often: ÷ speedup.

// speedup is how much faster the simulated day runs than a real one.
func (r AtRestResult) speedup() float64 {
	return float64(production.VerifyInterval) / float64(r.Options.VerifyInterval)
}

// productionRatio is the production TTL over the production interval.
func productionRatio() float64 {
	return float64(production.JobTTLAfterFinished) / float64(production.VerifyInterval)
}

// per1000 scales a count of the run's environments to 1,000.
func (r AtRestResult) per1000(v float64) float64 {
	return v * 1000 / float64(max(r.Options.Environments, 1))
}

// keptForTTL reports whether objects counted kept, made started times in
// the window, are kept for the TTL (Little's law: kept = rate × time kept).
func (r AtRestResult) keptForTTL(kept, started float64) bool {
	if started <= 0 {
		return false
	}
	keptFor := kept * r.Options.Window.Seconds() / started
	return keptFor >= r.Options.JobTTL.Seconds()/2
}

// keptAtProduction extrapolates objects kept per 1,000 environments to the
// production interval and TTL.
func (r AtRestResult) keptAtProduction(kept, started float64) float64 {
	if r.keptForTTL(kept, started) {
		return r.per1000(kept) * productionRatio() / r.Options.Ratio()
	}
	return r.per1000(kept) / r.speedup()
}

// productionSeconds is how long the window stands for in production.
func (r AtRestResult) productionSeconds() float64 {
	return r.Options.Window.Seconds() * r.speedup()
}

// PodsPerHour is the pods started per hour per 1,000 environments at the
// production interval.
func (r AtRestResult) PodsPerHour() float64 {
	return r.per1000(r.PodsStarted) * 3600 / r.productionSeconds()
}

func (r AtRestResult) totalRequests() float64 {
	total := 0.0
	for _, v := range r.Requests {
		total += v
	}
	return total
}

// RequestsPerSecond is kube-apiserver's requests per second per 1,000
// environments at the production interval (Lease and Node requests left
// out).
func (r AtRestResult) RequestsPerSecond() float64 {
	return r.per1000(r.totalRequests()) / r.productionSeconds()
}

// JobsAtProduction and PodsAtProduction are the Jobs and pods kept per
// 1,000 environments at the production interval and TTL.
func (r AtRestResult) JobsAtProduction() float64 { return r.keptAtProduction(r.Jobs, r.JobsStarted) }

// PodsAtProduction: see JobsAtProduction.
func (r AtRestResult) PodsAtProduction() float64 { return r.keptAtProduction(r.Pods, r.PodsStarted) }

// rssAtProduction extrapolates the before side's operator RSS to the
// objects production would keep, linearly in the Jobs and pods cached: the
// after side gives the base, the difference between the two the cost of
// one Job with its pod. Zero without both sides.
func rssAtProduction(results []AtRestResult) (rss int64, perObject float64) {
	var before, after *AtRestResult
	for i := range results {
		switch results[i].Side {
		case SideBefore:
			before = &results[i]
		case SideAfter:
			after = &results[i]
		}
	}
	if before == nil || after == nil || before.Options.Environments != after.Options.Environments {
		return 0, 0
	}
	measured := (before.Jobs + before.Pods) - (after.Jobs + after.Pods)
	if measured <= 0 {
		return 0, 0
	}
	perObject = float64(before.RSS-after.RSS) / measured
	// Objects of the run's environments at the production TTL.
	scale := float64(before.Options.Environments) / 1000
	prod := (before.JobsAtProduction()+before.PodsAtProduction())*scale - (after.JobsAtProduction()+after.PodsAtProduction())*scale
	return after.RSS + int64(perObject*prod), perObject
}

// count writes a count per 1,000 environments.
func count(v float64) string {
	switch {
	case v >= 100:
		return thousands(int64(v + 0.5))
	case v >= 10:
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

func thousands(n int64) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func mib(b int64) string { return fmt.Sprintf("%d MiB", b>>20) }

// atRestRows are the at-rest figures, one row per figure and a column per
// side.
func (r *Results) atRestRows() (header []string, rows [][]string) {
	a := r.AtRest
	if len(a) == 0 {
		return nil, nil
	}
	o := a[0].Options
	n := o.Environments
	header = []string{"at rest, per 1,000 idle environments"}
	for _, s := range a {
		header = append(header, fmt.Sprintf("%s (%s)", s.Side, s.Revision))
	}
	ratio, prodRatio := fmt.Sprintf("%.0f", o.Ratio()), fmt.Sprintf("%.0f", productionRatio())
	add := func(name string, cell func(AtRestResult) string) {
		row := []string{name}
		for _, s := range a {
			row = append(row, cell(s))
		}
		rows = append(rows, row)
	}
	add("Jobs kept, measured at TTL/interval "+ratio+" (largest sample)", func(s AtRestResult) string {
		return fmt.Sprintf("%s (%s)", count(s.per1000(s.Jobs)), count(s.per1000(float64(s.MaxJobs))))
	})
	add("Jobs kept at TTL/interval "+prodRatio+", extrapolated", func(s AtRestResult) string {
		return count(s.JobsAtProduction()) + keptHow(s, s.Jobs, s.JobsStarted)
	})
	add("pods kept, measured (largest sample)", func(s AtRestResult) string {
		return fmt.Sprintf("%s (%s)", count(s.per1000(s.Pods)), count(s.per1000(float64(s.MaxPods))))
	})
	add("pods kept at TTL/interval "+prodRatio+", extrapolated", func(s AtRestResult) string {
		return count(s.PodsAtProduction()) + keptHow(s, s.Pods, s.PodsStarted)
	})
	add("Secrets kept, measured (largest sample)", func(s AtRestResult) string {
		return fmt.Sprintf("%s (%s)", count(s.per1000(s.Secrets)), count(s.per1000(float64(s.MaxSecrets))))
	})
	add("pods started per hour, scaled from the simulated hour", func(s AtRestResult) string { return count(s.PodsPerHour()) })
	add("kube-apiserver requests per second, every client, at the production interval (Lease and Node requests left out)", func(s AtRestResult) string {
		return fmt.Sprintf("%.1f", s.RequestsPerSecond())
	})
	add("kube-apiserver requests per verify Job (of them the operator's)", func(s AtRestResult) string {
		j := max(s.JobsStarted, 1)
		return fmt.Sprintf("%.1f (%.1f)", s.totalRequests()/j, s.OperatorRequests/j)
	})
	add("operator CPU at the production interval, cores", func(s AtRestResult) string {
		return fmt.Sprintf("%.3f", s.per1000(s.CPU.Seconds())/s.productionSeconds())
	})
	add(fmt.Sprintf("operator RSS at the end of the window, %d environments (peak since its start)", n), func(s AtRestResult) string {
		return fmt.Sprintf("%s (%s)", mib(s.RSS), mib(s.PeakRSS))
	})
	if rss, per := rssAtProduction(a); rss > 0 {
		add(fmt.Sprintf("operator RSS at TTL/interval %s, %d environments, extrapolated linearly in the Jobs and pods cached", prodRatio, n), func(s AtRestResult) string {
			if s.Side != SideBefore {
				return mib(s.RSS) + " (as measured)"
			}
			return fmt.Sprintf("%s (%.1f KiB per Job or pod)", mib(rss), per/1024)
		})
	}
	add("verify Job created → finished, median / p99 (whole seconds)", func(s AtRestResult) string {
		return fmt.Sprintf("%s / %s", secs(s.VerifyTook.Median), secs(s.VerifyTook.P99))
	})
	add("environments whose releases a verify Job verified (WorkloadsIntact)", func(s AtRestResult) string {
		return fmt.Sprintf("%d of %d", s.Verified, n)
	})
	add("all Ready after create", func(s AtRestResult) string { return secs(s.AllReady) })
	add("load average before → after", func(s AtRestResult) string { return s.LoadBefore + " → " + s.LoadAfter })
	add("machine CPU over the window, cores by process", func(s AtRestResult) string { return s.Cores.cores(s.Options.Window) })
	return header, rows
}

// keptHow says which way keptAtProduction extrapolated.
func keptHow(s AtRestResult, kept, started float64) string {
	if s.keptForTTL(kept, started) {
		return fmt.Sprintf(" (kept for the TTL: × %.0f/%.0f)", productionRatio(), s.Options.Ratio())
	}
	return fmt.Sprintf(" (kept seconds: ÷ %.0f)", s.speedup())
}

// atRestSummary is the at-rest row of the main table: Jobs, pods and
// Secrets kept per 1,000 environments at the production interval and TTL.
func (r *Results) atRestSummary() (row, bool) {
	if len(r.AtRest) == 0 {
		return row{}, false
	}
	var cells []string
	after := r.AtRest[len(r.AtRest)-1]
	for _, s := range r.AtRest {
		cells = append(cells, fmt.Sprintf("%s %s / %s / %s", s.Side, count(s.JobsAtProduction()), count(s.PodsAtProduction()), count(s.per1000(s.Secrets))))
	}
	o := after.Options
	bounded := after.JobsAtProduction() <= 1000 && after.PodsAtProduction() <= 1000
	return row{
		fmt.Sprintf("at rest: Jobs / pods / Secrets kept per 1,000 idle environments at TTL/interval %.0f (%d environments, simulated at %.0f; table below)", productionRatio(), o.Environments, o.Ratio()),
		strings.Join(cells, "; "), "", "≤ 1 Job and 1 pod per environment", yesNo(bounded),
	}, true
}

// atRestIntro says what the at-rest table measured.
func (r *Results) atRestIntro() string {
	o := r.AtRest[0].Options
	s := r.AtRest[0]
	return fmt.Sprintf("At rest (%s, %d CPUs (%s), %d MiB): %d environments of 3 components (no-op deployer) created, all Ready, then left idle for a simulated day: a verify Job every %s and finished Jobs kept %s (TTL/interval %.0f; production %s and %s, %.0f), each operator on a fresh control plane. "+
		"The steady state is read over %s, %d samples, starting %s after the last Ready (an interval and a TTL). "+
		"Per 1,000 environments; the simulated day runs %.0f times faster than a real one, so rates are divided by %.0f (a simulated hour is %s). "+
		"Extrapolated figures follow Little's law (kept = made per second × time kept): what is kept for the TTL grows with TTL/interval, what is kept seconds does not. "+
		"The environments are not pushed to, so the values Secrets of older generations do not show here (`controllers/atrest_test.go` covers them).",
		r.Machine.Date.Format("2006-01-02 15:04 MST"), r.Machine.CPUs, r.Machine.CPUModel, r.Machine.MemoryMiB, o.Environments, o.VerifyInterval, o.JobTTL, o.Ratio(), production.VerifyInterval, production.JobTTLAfterFinished, productionRatio(),
		o.Window, s.Samples, o.VerifyInterval+o.JobTTL, s.speedup(), s.speedup(), secs(time.Duration(float64(time.Hour)/s.speedup())))
}

// writeAtRestTable prints the at-rest figures.
func (r *Results) writeAtRestTable(w io.Writer) {
	header, rows := r.atRestRows()
	if header == nil {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, x := range rows {
		fmt.Fprintln(tw, strings.Join(x, "\t"))
	}
	tw.Flush()
}

// atRestMarkdown writes the at-rest section of the generated part.
func (r *Results) atRestMarkdown(b *strings.Builder) {
	header, rows := r.atRestRows()
	if header == nil {
		return
	}
	fmt.Fprintf(b, "\n%s\n\n", r.atRestIntro())
	fmt.Fprintf(b, "| %s |\n|%s\n", strings.Join(header, " | "), strings.Repeat("---|", len(header)))
	for _, x := range rows {
		fmt.Fprintf(b, "| %s |\n", strings.Join(x, " | "))
	}
	fmt.Fprintf(b, "\nkube-apiserver's requests per verify Job at rest, by verb and resource, every client (Lease and Node requests left out):\n\n| side | largest by resource |\n|---|---|\n")
	for _, s := range r.AtRest {
		per := map[[2]string]float64{}
		for k, v := range s.Requests {
			per[k] = v / max(s.JobsStarted, 1)
		}
		fmt.Fprintf(b, "| %s (%s) | %s |\n", s.Side, s.Revision, topResources(per, 10))
	}
	if m := r.AtRest[len(r.AtRest)-1].VerifyMessage; m != "" {
		fmt.Fprintf(b, "\nAt rest every verify Job's pod reports `%s`.\n", m)
	}
}
