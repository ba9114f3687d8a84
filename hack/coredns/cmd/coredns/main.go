// Command coredns is CoreDNS with the plugins the real node's cluster DNS
// uses (local/realnode serves it as the kube-system Deployment): the
// kubernetes plugin for Services and pods, forward, cache, health and ready
// for its probes, errors and log. Linking only these keeps its build short;
// the server is CoreDNS's own (coremain).
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
	_ "github.com/coredns/coredns/plugin/whoami"
)

func main() { coremain.Run() }
