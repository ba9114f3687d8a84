package realnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// crictl runs crictl against the node's containerd and returns its output.
func (n *Node) crictl(ctx context.Context, args ...string) (string, error) {
	cmd := command(ctx, filepath.Join(n.bin, "crictl"), append([]string{"--runtime-endpoint", "unix://" + n.containerdSocket(), "--timeout", "20s"}, args...)...)
	cmd.Env = append(os.Environ(), "CRI_CONFIG_FILE=/dev/null")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("crictl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// Containers lists what containerd holds of a namespace's pods, as
// "sandbox <id>" and "container <id> <name>" lines: every pod sandbox and
// container, running or exited, kubelet made for the namespace. Empty once
// kubelet has removed them all.
func (n *Node) Containers(ctx context.Context, namespace string) ([]string, error) {
	var out []string
	pods, err := n.crictl(ctx, "pods", "--namespace", namespace, "-q")
	if err != nil {
		return nil, err
	}
	for _, id := range strings.Fields(pods) {
		out = append(out, "sandbox "+id)
	}
	ctrs, err := n.crictl(ctx, "ps", "-a", "--label", "io.kubernetes.pod.namespace="+namespace, "-o", "table")
	if err != nil {
		return nil, err
	}
	for i, line := range strings.Split(strings.TrimSpace(ctrs), "\n") {
		if f := strings.Fields(line); i > 0 && len(f) > 0 {
			out = append(out, "container "+strings.Join(f, " "))
		}
	}
	return out, nil
}
