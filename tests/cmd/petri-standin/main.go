// Command petri-standin plays the deployer image in the operator's tests
// (package controllers): the tests of ordering, retries, conditions and
// teardown need a Job's outcome, not Helm. It asks the test what this Job's
// pod does, then either runs the real deployer in its place or ends the way
// the test says, writing the typed result of api/contract to the termination
// log as the deployer does (the operator reads nothing else of a Job).
//
// The test answers on PETRI_STANDIN_URL, a local HTTP endpoint (pods are
// local processes on the test's node): it gets the pod's name (HOSTNAME) and
// arguments and replies with a reply as JSON. It may hold its reply for as
// long as the Job should run; a SIGTERM meanwhile ends the pod as a killed
// container ends (exit 143), without a result.
//
// Without PETRI_STANDIN_URL, or when the reply says so, the real deployer
// (petri-deployer beside this binary) runs with the same arguments and
// environment: every Job the test did not script is the real thing.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/petri-dev/petri/api/contract"
)

// Request is what the stand-in tells the test of its pod.
type Request struct {
	Pod  string   `json:"pod"`
	Args []string `json:"args"`
}

// Reply is what the test answers: run the real deployer, or end with
// Result (written to the termination log) and ExitCode.
type Reply struct {
	Real     bool             `json:"real,omitempty"`
	Result   *contract.Result `json:"result,omitempty"`
	ExitCode int              `json:"exitCode,omitempty"`
}

func main() {
	url := os.Getenv("PETRI_STANDIN_URL")
	if url == "" {
		runReal()
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, syscall.SIGINT)
	replies := make(chan Reply, 1)
	go func() { replies <- ask(url) }()
	select {
	case <-term:
		fmt.Println("SIGTERM received: stopping")
		os.Exit(143)
	case r := <-replies:
		if r.Real {
			runReal()
		}
		if r.Result != nil {
			writeTerminationLog(contract.Encode(*r.Result))
			fmt.Println(r.Result.Message)
		}
		os.Exit(r.ExitCode)
	}
}

// ask posts the pod's name and arguments to the test and returns its reply;
// a test that cannot be asked fails the pod as a retryable failure would.
func ask(url string) Reply {
	body, _ := json.Marshal(Request{Pod: os.Getenv("HOSTNAME"), Args: os.Args[1:]})
	resp, err := http.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return failed("ask the test: " + err.Error())
	}
	defer resp.Body.Close()
	var r Reply
	if resp.StatusCode != http.StatusOK {
		return failed("ask the test: " + resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return failed("read the test's reply: " + err.Error())
	}
	return r
}

func failed(msg string) Reply {
	return Reply{Result: &contract.Result{Outcome: contract.OutcomeFailed, Reason: contract.ReasonFailed, Retryable: true, Message: "Failed: " + msg}, ExitCode: 1}
}

// runReal replaces this process with the real deployer.
func runReal() {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	real := filepath.Join(filepath.Dir(self), "petri-deployer")
	err = syscall.Exec(real, append([]string{real}, os.Args[1:]...), os.Environ())
	fmt.Fprintln(os.Stderr, "run", real+":", err)
	os.Exit(1)
}

// writeTerminationLog writes msg where --termination-log says, as the
// deployer does.
func writeTerminationLog(msg string) {
	path := "/dev/termination-log"
	args := os.Args[1:]
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--termination-log="); ok {
			path = v
		} else if a == "--termination-log" && i+1 < len(args) {
			path = args[i+1]
		}
	}
	if err := os.WriteFile(path, []byte(msg), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "write the termination log:", err)
	}
}
