package controllers_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/metrics"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

// BenchmarkOpenToReadyByCluster measures create → Ready of one environment
// (two components in a chain) placed in the management cluster and in a
// workload cluster (its own control plane and node on this machine), one
// after the other, and the API requests of the operator for each, both
// clusters counted.
func BenchmarkOpenToReadyByCluster(b *testing.B) {
	wl := workloadCluster(b)
	register(b, "bench-east", wl.Config.Host, 1000, nil)
	for _, where := range []string{"management", "workload"} {
		b.Run(where, func(b *testing.B) {
			ctx := context.Background()
			var total time.Duration
			var requests float64
			for i := range b.N {
				e := newEnv(fmt.Sprintf("open-%s-%d-%d", where[:4], testClock.Now().UnixNano()%100000, i), greeter("db"), greeter("web", "db"))
				if where == "workload" {
					e.Spec.Placement = &petriv1.Placement{Cluster: "bench-east"}
				}
				before := counterSum(b, "petri_api_requests_total", nil)
				start := time.Now()
				if err := env.Client.Create(ctx, e); err != nil {
					b.Fatal(err)
				}
				waitFor(b, e.Name, "Ready", ready)
				total += time.Since(start)
				requests += counterSum(b, "petri_api_requests_total", nil) - before
				b.StopTimer()
				if err := env.Client.Delete(ctx, e); err != nil {
					b.Fatal(err)
				}
				waitGone(b, e)
				b.StartTimer()
			}
			b.ReportMetric(total.Seconds()*1000/float64(b.N), "ms-to-ready/op")
			b.ReportMetric(requests/float64(b.N), "api-requests/op")
		})
	}
}

// BenchmarkUnreachableClusterCost measures what a workload cluster that
// does not answer costs the operator: with environments settled in a
// cluster, a window while it answers, then a window while a proxy in front
// of it refuses every connection. For each window: the operator's process
// CPU (the suite runs it in this process; the control plane is apart), its
// API requests and its environment passes, per minute. The suite probes
// every 300 ms (--cluster-probe-interval; 30 s by default), and an
// environment of a cluster away is looked at every 30 s.
func BenchmarkUnreachableClusterCost(b *testing.B) {
	const envs, window = 5, 65 * time.Second
	wl := workloadCluster(b)
	p := newProxy(b, backendOf(b, wl))
	register(b, "bench-away", p.url(), 1000, nil)
	ctx := context.Background()
	var names []*petriv1.EphemeralEnvironment
	for i := range envs {
		e := placedIn("bench-away", greeter("app"))(fmt.Sprintf("away-%d-%d", testClock.Now().UnixNano()%100000, i))
		if err := env.Client.Create(ctx, e); err != nil {
			b.Fatal(err)
		}
		names = append(names, e)
	}
	for _, e := range names {
		waitFor(b, e.Name, "Ready", ready)
	}
	b.ResetTimer()
	for range b.N {
		report(b, "answering", measureWindow(b, window))
		p.setCut(true)
		waitCluster(b, "bench-away", "unreachable", func(wc *petriv1.WorkloadCluster) bool {
			return conditionFalse(wc.Status.Conditions, petriv1.ConditionReachable)
		})
		report(b, "away", measureWindow(b, window))
		p.setCut(false)
		waitCluster(b, "bench-away", "reachable again", func(wc *petriv1.WorkloadCluster) bool {
			return !conditionFalse(wc.Status.Conditions, petriv1.ConditionReachable)
		})
	}
	b.StopTimer()
	for _, e := range names {
		if err := env.Client.Delete(ctx, e); err != nil {
			b.Fatal(err)
		}
	}
	for _, e := range names {
		waitGone(b, e)
	}
}

// usage is what the operator spent over a window, per minute.
type usage struct{ cpu, requests, passes float64 }

func measureWindow(b *testing.B, d time.Duration) usage {
	b.Helper()
	cpu0 := processCPU(b)
	req0 := counterSum(b, "petri_api_requests_total", nil)
	pass0 := counterSum(b, "controller_runtime_reconcile_total", map[string]string{"controller": "ephemeralenvironment"})
	start := time.Now()
	// The window is the measurement itself: the operator is left alone.
	<-time.After(d)
	perMinute := time.Minute.Seconds() / time.Since(start).Seconds()
	return usage{
		cpu:      (processCPU(b) - cpu0).Seconds() * perMinute,
		requests: (counterSum(b, "petri_api_requests_total", nil) - req0) * perMinute,
		passes:   (counterSum(b, "controller_runtime_reconcile_total", map[string]string{"controller": "ephemeralenvironment"}) - pass0) * perMinute,
	}
}

func report(b *testing.B, label string, u usage) {
	b.ReportMetric(u.cpu*1000, label+"-cpu-ms/min")
	b.ReportMetric(u.requests, label+"-requests/min")
	b.ReportMetric(u.passes, label+"-passes/min")
}

// processCPU is this process's user and system CPU time.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// counterSum adds up a counter of the operator's metrics registry over the
// series whose labels include match.
func counterSum(tb testing.TB, name string, match map[string]string) float64 {
	tb.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	sum := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range match {
				if labels[k] != v {
					continue series
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}
