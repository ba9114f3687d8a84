package controllers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/api/contract"
	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers"
)

// The deployer image of these tests is played by tests/cmd/petri-standin:
// each Job's pod asks the test what to do. A Job of an environment or shared
// workload that a test scripted (standIn) ends as its script says, with the
// typed result of api/contract the real deployer writes; every other Job
// runs the real deployer, Helm and all. The tests whose subject is the
// operator's ordering, retries, conditions or teardown script their Jobs;
// those about what the deployer does (releases, values, waits, drift,
// sleep) keep the real one.

// standInJob is what a scripted Job's pod is: its labels and arguments.
type standInJob struct {
	// ctx ends when the pod does (it was killed) or the suite stops.
	ctx context.Context
	// Owner is the environment's or the shared workload's name.
	Owner                                  string
	Component, Action, Generation, PodName string
	Args                                   []string
}

// standInReply is how a scripted Job's pod ends.
type standInReply struct {
	Real     bool             `json:"real,omitempty"`
	Result   *contract.Result `json:"result,omitempty"`
	ExitCode int              `json:"exitCode,omitempty"`
}

// standInScript decides, and may wait for as long as the Job should run
// (until job.ctx ends: the pod was killed).
type standInScript func(job standInJob) standInReply

var standIns struct {
	sync.Mutex
	scripts map[string]standInScript
}

// standIn scripts the Jobs of the environment or shared workload named
// owner until the test ends.
func standIn(t *testing.T, owner string, script standInScript) {
	t.Helper()
	standIns.Lock()
	if standIns.scripts == nil {
		standIns.scripts = map[string]standInScript{}
	}
	standIns.scripts[owner] = script
	standIns.Unlock()
	t.Cleanup(func() {
		standIns.Lock()
		delete(standIns.scripts, owner)
		standIns.Unlock()
	})
}

// serveStandIns answers the stand-in's pods; the suite gives its URL to
// the local node's processes.
func serveStandIns() *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Pod  string   `json:"pod"`
			Args []string `json:"args"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		reply, err := standInReplyFor(r.Context(), req.Pod, req.Args)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_ = json.NewEncoder(w).Encode(reply)
	}))
}

// standInReplyFor reads the pod's labels and runs the script of its owner;
// a pod of no scripted owner runs the real deployer.
func standInReplyFor(ctx context.Context, podName string, args []string) (standInReply, error) {
	pod := &corev1.Pod{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: mgmtNS, Name: podName}, pod); err != nil {
		return standInReply{}, fmt.Errorf("pod %s: %w", podName, err)
	}
	owner := pod.Labels[petriv1.LabelEnvironment]
	if owner == "" {
		owner = pod.Labels[controllers.LabelSharedWorkload]
	}
	standIns.Lock()
	script := standIns.scripts[owner]
	standIns.Unlock()
	if script == nil {
		return standInReply{Real: true}, nil
	}
	return script(standInJob{
		ctx: ctx, Owner: owner, PodName: podName, Args: args,
		Component: pod.Labels[contract.LabelComponent], Action: pod.Labels[contract.LabelAction], Generation: pod.Labels[contract.LabelGeneration],
	}), nil
}

// succeeded is a Job that did what it was asked; a deploy reports
// revision.
func succeeded(job standInJob, revision int) standInReply {
	res := contract.Result{Action: deployerCommand(job), Outcome: contract.OutcomeSucceeded, Message: "Succeeded"}
	if job.Action == contract.ActionDeploy {
		res.Revision = revision
		res.Message = fmt.Sprintf("Deployed: revision %d", revision)
	}
	return standInReply{Result: &res}
}

// failedWith is a Job that failed for reason, with the exit code the real
// deployer gives it (cmd/petri-deployer: 3 for a final reason, 1 for one
// a retry may cure).
func failedWith(job standInJob, reason contract.Reason, detail string) standInReply {
	code := 1
	if reason.Final() {
		code = 3
	}
	return standInReply{ExitCode: code, Result: &contract.Result{
		Action: deployerCommand(job), Outcome: contract.OutcomeFailed, Reason: reason, Retryable: reason.Retryable(),
		Message: string(reason) + ": " + detail,
	}}
}

// deployerCommand is the deployer command the Job runs: its first
// argument.
func deployerCommand(job standInJob) string {
	if len(job.Args) > 0 {
		return job.Args[0]
	}
	return job.Action
}

// blockUntil keeps a Job running until release is closed, then ends it as
// then says; a pod killed meanwhile ends without a result.
func blockUntil(job standInJob, release <-chan struct{}, then func(standInJob) standInReply) standInReply {
	select {
	case <-release:
		return then(job)
	case <-job.ctx.Done():
		return standInReply{ExitCode: 143}
	}
}

// succeedAll succeeds every Job of the owner; deploys report revision 1,
// and the binding's write-secret runs the real deployer (it writes the
// Secret the provision step reads).
func succeedAll(job standInJob) standInReply {
	if job.Action == contract.ActionBind {
		return standInReply{Real: true}
	}
	return succeeded(job, 1)
}

// missingChart is a repository path the deployer image does not carry.
const missingChart = imageCharts + "/missing"

// succeedUnlessMissing is succeedAll, except that a deploy of a chart
// from missingChart fails ChartNotFound, as the deployer's does.
func succeedUnlessMissing(job standInJob) standInReply {
	// The local node gives the stand-in the image's path where its files
	// are here.
	repo := argValue(job.Args, "--chart-repository")
	if job.Action == contract.ActionDeploy && (repo == missingChart || repo == filepath.Join(chartsDir(), "missing")) {
		return failedWith(job, contract.ReasonChartNotFound, "chart greeter not found in "+missingChart)
	}
	return succeedAll(job)
}

// argValue is the value of a flag given as "--name value" or
// "--name=value"; "" when it is not given.
func argValue(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}
