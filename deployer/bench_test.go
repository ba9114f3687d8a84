package deployer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/petri-dev/petri/deployer"
)

// BenchmarkDeployUpgrade measures what one component costs the deployer
// in-process against the real API server: an install of greeter, then an
// upgrade with new values (each a Deploy that reads the release state first).
func BenchmarkDeployUpgrade(b *testing.B) {
	ctx := logr.NewContext(context.Background(), logr.Discard())
	ns := namespace(b)
	d := newDeployer(b, ns)
	ch := localChart(b, "greeter")
	var install, upgrade time.Duration
	n := 0
	for ; b.Loop(); n++ {
		name := fmt.Sprintf("bench-%d", n)
		start := time.Now()
		if _, err := d.Deploy(ctx, deployer.DeployRequest{Release: name, Chart: ch, Values: greeterValues("one", "v1")}); err != nil {
			b.Fatal(err)
		}
		mid := time.Now()
		rel, err := d.Deploy(ctx, deployer.DeployRequest{Release: name, Chart: ch, Values: greeterValues("two", "v2")})
		install, upgrade = install+mid.Sub(start), upgrade+time.Since(mid)
		if err != nil {
			b.Fatal(err)
		}
		if rel.Version != 2 {
			b.Fatalf("revision %d after upgrade, want 2", rel.Version)
		}
	}
	b.ReportMetric(install.Seconds()/float64(n), "install-s/op")
	b.ReportMetric(upgrade.Seconds()/float64(n), "upgrade-s/op")
}
