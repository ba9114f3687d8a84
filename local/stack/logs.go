package stack

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// LogDir holds one log file per container of every pod the node ran:
// <namespace>_<pod>_<container>.log on the process node; on the real node,
// the node's logs (containerd, kubelet; the pods' logs are kubectl logs').
func (s *Stack) LogDir() string {
	if s.RealNode != nil {
		return filepath.Join(s.RealNode.Dir, "logs")
	}
	return s.Node.LogDir()
}

// ControlPlaneLog is kube-controller-manager's log.
func (s *Stack) ControlPlaneLog() string {
	return filepath.Join(s.Cluster.Dir, "kube-controller-manager.log")
}

// WriteLogIndex tells where the logs of every process and every pod are.
func (s *Stack) WriteLogIndex(w io.Writer) {
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Logs")
	if s.RealNode != nil {
		fmt.Fprintf(w, "  the real node (containerd, kubelet, kube-scheduler, kube-proxy): %s\n", s.LogDir())
		fmt.Fprintf(w, "  every pod's containers: kubectl --kubeconfig %s logs -n NAMESPACE POD (while the node runs)\n", s.Kubeconfig())
		s.writeInstallLog(w)
		return
	}
	fmt.Fprintf(w, "  every pod's containers (operator, sync, every Job, the applications): %s\n", s.LogDir())
	fmt.Fprintln(w, "  one file per container, <namespace>_<pod>_<container>.log:")
	entries, _ := os.ReadDir(s.LogDir())
	groups := map[string][]string{}
	var order []string
	for _, e := range entries {
		name := e.Name()
		ns, rest, _ := strings.Cut(name, "_")
		var g string
		switch {
		case ns == ManagementNamespace && strings.HasPrefix(rest, "petri-operator-"):
			g = "operator"
		case ns == SyncNamespace && strings.HasPrefix(rest, "petri-sync-"):
			g = "sync"
		case ns == ManagementNamespace:
			g = "Jobs (deploy, bind, provision, undeploy, deprovision)"
		case ns == SharedNamespace:
			g = "shared workloads"
		default:
			g = "applications"
		}
		if _, ok := groups[g]; !ok {
			order = append(order, g)
		}
		groups[g] = append(groups[g], name)
	}
	for _, g := range order {
		fmt.Fprintf(w, "    %s:\n", g)
		for _, f := range groups[g] {
			fmt.Fprintf(w, "      %s\n", f)
		}
	}
	s.writeInstallLog(w)
}

// writeInstallLog tells where the control plane's log and the
// installation are.
func (s *Stack) writeInstallLog(w io.Writer) {
	fmt.Fprintf(w, "  kube-controller-manager: %s\n", s.ControlPlaneLog())
	if s.opts.Install == InstallChart {
		fmt.Fprintf(w, "  the installation (helm release %s of charts/petri, values): %s\n", ChartRelease, filepath.Join(s.Overlay, "values.yaml"))
	} else {
		fmt.Fprintf(w, "  the installation (kustomize overlay of config/default): %s\n", s.Overlay)
	}
}
