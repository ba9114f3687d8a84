package deployer

import "k8s.io/cli-runtime/pkg/genericclioptions"

// FlagsOf is the ConfigFlags under a loader of NewRESTClientGetter, for
// tests that wrap its transport.
func FlagsOf(g genericclioptions.RESTClientGetter) *genericclioptions.ConfigFlags {
	return g.(*restClientGetter).ConfigFlags
}
