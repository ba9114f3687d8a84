package controllers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/api/contract"
	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

// BenchmarkEnvironmentToReady measures, for the 3-component example (a chain
// from an OCI registry and an https repository, a parallel branch from a
// path), the time from create to Ready, the Jobs it took and the operator's
// API writes (status, finalizer, namespace, identity, Secrets, Jobs).
func BenchmarkEnvironmentToReady(b *testing.B) {
	ctx := context.Background()
	var total time.Duration
	var writes, jobCount int64
	for i := range b.N {
		name := fmt.Sprintf("bench-%d-%d", testClock.Now().UnixNano()%100000, i)
		e := newEnv(name,
			component("db", registry.Repository(), "greeter", "0.1.0"),
			component("api", chartRepo.URL, "greeter", "0.1.0", "db"),
			component("cache", imageCharts, "strict", "0.1.0"),
		)
		e.Spec.Values = map[string]apiextensionsv1.JSON{"api": *jsonValues(map[string]any{"message": "bench"})}
		before := operatorWrites.Load()
		start := testClock.Now()
		if err := env.Client.Create(ctx, e); err != nil {
			b.Fatal(err)
		}
		if !eventually(2*time.Minute, func() bool { c := current(name); return c != nil && ready(c) }) {
			b.Fatalf("%s never became ready: %s", name, describe(current(name)))
		}
		total += time.Since(start)
		writes += operatorWrites.Load() - before
		var list batchv1.JobList
		if err := env.Client.List(ctx, &list, client.InNamespace(mgmtNS), client.MatchingLabels{petriv1.LabelEnvironment: name, contract.LabelAction: contract.ActionDeploy}); err != nil {
			b.Fatal(err)
		}
		jobCount += int64(len(list.Items))
		b.StopTimer()
		if err := env.Client.Delete(ctx, e); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(total.Seconds()/float64(b.N), "s-to-ready/op")
	b.ReportMetric(float64(writes)/float64(b.N), "api-writes/op")
	b.ReportMetric(float64(jobCount)/float64(b.N), "jobs/op")
}
