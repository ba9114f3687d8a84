// Command pause is the real node's pod sandbox image (containerd's
// sandbox_image): it holds a pod's namespaces open, reaps the children that
// are re-parented to it, and exits on SIGTERM or SIGINT. No pause image can
// be pulled on an offline machine, so local/realnode builds one from this
// program.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
