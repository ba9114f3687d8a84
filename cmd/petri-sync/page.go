package main

import (
	"flag"
	"net/http"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/petri-dev/petri/sync/ui"
)

// pageFlags are the settings of the web page. The page answers anyone who
// reaches the port, so its costs are bounded per client; which address a
// client has is the connection's unless a trusted proxy says otherwise.
type pageFlags struct {
	serve        *bool
	clientHeader *string
	streamsPerIP *int
}

func bindPage(fs *flag.FlagSet) pageFlags {
	return pageFlags{
		serve: fs.Bool("ui", true, "Serve the read-only web page of the environments at / (docs/ui.md)."),
		clientHeader: fs.String("ui-client-address-header", "", "Header in which the proxy in front of sync passes the client's address (X-Forwarded-For); its last address bounds the page's streams per client. "+
			"Set it only when a proxy you trust sets that header on every request: a client reaching sync directly chooses it freely. Empty: the connection's address."),
		streamsPerIP: fs.Int("ui-max-streams-per-client", 8, "Live page streams one client address may hold open; one more is answered 429 (all clients together hold at most 256; more get 503)."),
	}
}

// register serves the page on mux; nil when it is not served.
func (p pageFlags) register(mux *http.ServeMux, cache ui.Cache, namespace string, cfg *rest.Config, log logr.Logger) (*ui.UI, error) {
	if !*p.serve {
		return nil, nil
	}
	pods, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	page, err := ui.New(ui.Options{
		Cache: cache, Namespace: namespace, Pods: pods.CoreV1(), Log: log.WithName("ui"),
		ClientAddressHeader: *p.clientHeader, MaxStreamsPerClient: *p.streamsPerIP,
	})
	if err != nil {
		return nil, err
	}
	page.Register(mux)
	return page, nil
}
