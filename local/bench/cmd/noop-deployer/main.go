// Command noop-deployer is the benchmarks' no-op deployer: it stands in for
// petri-deployer in the Jobs of an operator started with the deployer image
// bench.NoopDeployerImage, and does nothing. It accepts the deployer's
// command line, writes a typed result (api/contract) whose message says it
// did nothing ("NoOp: ...") and exits 0 at once, so every Job completes as soon as its
// pod runs. A verify Job's releases (its --expect name=revision flags) are
// reported verified the same way: nothing is read. make bench uses it to
// measure the operator's own overhead and its scale without Helm; it is
// never part of an installation.
package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/petri-dev/petri/api/contract"
)

func main() {
	args := os.Args[1:]
	command, release, namespace, termLog := "(none)", "", "", "/dev/termination-log"
	var expected []string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		command = args[0]
	}
	for i := 0; i < len(args); i++ {
		name, value, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		if !hasValue && i+1 < len(args) && strings.HasPrefix(args[i], "-") {
			value = args[i+1]
		}
		switch name {
		case "release":
			release = value
		case "namespace":
			namespace = value
		case "termination-log":
			termLog = value
		case "expect":
			name, _, _ := strings.Cut(value, "=")
			expected = append(expected, name)
		}
	}
	msg := fmt.Sprintf("NoOp: %s of release %q in namespace %q skipped by the benchmarks' no-op deployer; nothing was installed or removed", command, release, namespace)
	if command == "verify" {
		msg = fmt.Sprintf("NoOp: verify of releases %s in namespace %q skipped by the benchmarks' no-op deployer; nothing was read", strings.Join(expected, ", "), namespace)
	}
	fmt.Println(msg)
	// A typed result as the deployer writes one, so the operator spends on
	// a no-op Job what it spends on a real one, and no more.
	res := contract.Encode(contract.Result{Action: command, Outcome: contract.OutcomeSucceeded, Message: msg})
	if err := os.WriteFile(termLog, []byte(res), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "noop-deployer: write termination message:", err)
	}
}
