package ui_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

// The page names each environment's cluster: the WorkloadCluster it was
// placed in, the management cluster (bound there, or without a placement),
// or that its placement is pending.
func TestPageShowsTheCluster(t *testing.T) {
	ctx := context.Background()
	placement := &petriv1.Placement{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"region": "eu"}}}
	placed := syncEnvironment("shop-pr-31-aaaa", 31, greeter("web"))
	placed.Spec.Placement = placement.DeepCopy()
	pending := syncEnvironment("shop-pr-32-aaaa", 32, greeter("web"))
	pending.Spec.Placement = placement.DeepCopy()
	unplaced := syncEnvironment("shop-pr-33-aaaa", 33, greeter("web"))
	for _, e := range []client.Object{placed, pending, unplaced} {
		create(t, e)
	}
	t.Cleanup(func() {
		for _, o := range []client.Object{placed, pending, unplaced} {
			_ = cluster.Client.Delete(ctx, o)
		}
	})
	setStatus(t, placed.Name, func(s *petriv1.EphemeralEnvironmentStatus) {
		s.TargetNamespace, s.Cluster = "shop-pr-31-aaaa-1f", "east"
	})
	want := map[string]string{
		placed.Name:   `<dd data-cluster><code>east</code></dd>`,
		pending.Name:  `<dd data-cluster>pending placement</dd>`,
		unplaced.Name: `<dd data-cluster>management cluster</dd>`,
	}
	var body string
	require.Eventually(t, func() bool {
		_, body = get(t, "/")
		for name, cell := range want {
			if !strings.Contains(envSection(body, name), cell) {
				return false
			}
		}
		return true
	}, 10*time.Second, 50*time.Millisecond, "each environment's cluster; the page:\n%s", body)
}

// envSection is the part of the page about one environment.
func envSection(body, name string) string {
	i := strings.Index(body, `id="env-`+name+`"`)
	if i < 0 {
		return ""
	}
	rest := body[i:]
	if j := strings.Index(rest[1:], `<article`); j >= 0 {
		rest = rest[:j+1]
	}
	return rest
}
