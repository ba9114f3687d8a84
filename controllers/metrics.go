package controllers

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

var phaseDesc = prometheus.NewDesc("petri_environments", "EphemeralEnvironments by phase.", []string{"phase"}, nil)

// phaseCollector counts environments by phase from the cache at scrape time,
// so the figure is right after a restart and after deletions.
type phaseCollector struct {
	reader    client.Reader
	namespace string
}

func (c phaseCollector) Describe(ch chan<- *prometheus.Desc) { ch <- phaseDesc }

func (c phaseCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var list petriv1.EphemeralEnvironmentList
	// Read only, so the cache's objects are not copied: every
	// environment, on every scrape.
	if err := c.reader.List(ctx, &list, client.InNamespace(c.namespace), client.UnsafeDisableDeepCopy); err != nil {
		return
	}
	counts := map[petriv1.EnvironmentPhase]float64{}
	for _, p := range []petriv1.EnvironmentPhase{petriv1.EnvironmentPending, petriv1.EnvironmentDeploying, petriv1.EnvironmentReady, petriv1.EnvironmentDegraded, petriv1.EnvironmentFailed, petriv1.EnvironmentStalled, petriv1.EnvironmentDeleting, petriv1.EnvironmentSleeping} {
		counts[p] = 0
	}
	for _, e := range list.Items {
		if e.Status.Phase != "" {
			counts[e.Status.Phase]++
		}
	}
	for p, n := range counts {
		ch <- prometheus.MustNewConstMetric(phaseDesc, prometheus.GaugeValue, n, string(p))
	}
}
