package deployer

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/petri-dev/petri/api/contract"
)

// A crashed container's last log line goes into the environment's status
// and the pull request's comment: it is the application's own output, so
// what reads like a credential is replaced and the line is cut.
func TestLogLine(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		"starting\nlistening\npanic: boom\n\n":                          "panic: boom",
		"dial postgres://app:s3cret@db:5432/shop: connection refused\n": "dial postgres://***@db:5432/shop: connection refused",
		"auth failed password=s3cret user=app\n":                        "auth failed password=*** user=app",
		`config: {"token": "abc123", "Api_Key":'xyz'}`:                  `config: {"token": ***, "Api_Key":***}`,
		`{"password":"s3cret","user":"app"}`:                            `{"password":***,"user":"app"}`,
		"SECRET: hunter2, retrying\n":                                   "SECRET: ***, retrying",
		"\ttabs   and\r\nspaces  ":                                      "spaces",
		"":                                                              "",
		strings.Repeat("x", 1000):                                       strings.Repeat("x", maxLogLine-3) + "...",
		"error: credentials=AKIA123 rejected; access_key: AKIA456 rejected too\n": "error: credentials=*** rejected; access_key: *** rejected too",
		// Terminal escapes and bidirectional overrides of the application's
		// output never reach a status, a comment or a terminal.
		"\x1b[2J\x1b]52;c;Zm9v\x07 crashed \u202eexe.txt\u009b31m\n": "[2J]52;c;Zm9v crashed exe.txt31m",
	}
	for in, want := range tests {
		assert.Equal(t, want, logLine(in), "%q", in)
	}
}

func TestProblemsMessage(t *testing.T) {
	t.Parallel()
	pull := PodProblem{Reason: contract.ReasonImagePullFailed, Object: "pod web-a", Container: "app", Detail: `image "x" cannot be pulled: ErrImagePull`}
	var problems []PodProblem
	problems = append(problems, pull)
	for _, name := range []string{"b", "c", "d", "e", "f"} {
		problems = append(problems, PodProblem{Reason: contract.ReasonTimeout, Object: "pod web-" + name, Detail: "not scheduled yet"})
	}
	problems[2].Reason, problems[2].Detail = contract.ReasonUnschedulable, "cannot be scheduled: 0/1 nodes are available"
	assert.Equal(t, `pod web-a container app image "x" cannot be pulled: ErrImagePull; also pod web-b (not scheduled yet), pod web-c (Unschedulable), pod web-d (not scheduled yet), 2 more`,
		problemsMessage(problems))
	assert.Equal(t, pull.String(), problemsMessage(problems[:1]))
}

// A crashed container's line comes from its latest run when it is down
// (the run before may be gone), from the previous run when it runs again;
// kubelet's "unable to retrieve container logs" (inside a 200 answer, for a
// run it no longer has) is no log line: the other run is read instead.
func TestLastLogLineReadsTheCrashedRun(t *testing.T) {
	assert.False(t, (&PodProblem{restarts: 3}).crashedRunIsPrevious(), "down after its restarts: its latest run crashed")
	assert.True(t, (&PodProblem{restarts: 3, running: true}).crashedRunIsPrevious(), "up again: the previous run crashed")
	assert.False(t, (&PodProblem{running: true}).crashedRunIsPrevious())

	logs := map[bool][]byte{
		true:  []byte(kubeletLogGone + "containerd://a6b509f1"),
		false: []byte("listening\npetri-example-app: cannot reach the database\n"),
	}
	var asked []bool
	read := func(previous bool) ([]byte, error) {
		asked = append(asked, previous)
		return logs[previous], nil
	}
	assert.Equal(t, `last log line: "petri-example-app: cannot reach the database"`, logLineOf(read, false))
	assert.Equal(t, []bool{false}, asked)
	asked = nil
	assert.Equal(t, `last log line: "petri-example-app: cannot reach the database"`, logLineOf(read, true), "the previous run's log is gone: the latest one is read")
	assert.Equal(t, []bool{true, false}, asked)

	logs[false] = logs[true]
	assert.Equal(t, "no log line read (kubelet no longer has the container's log)", logLineOf(read, true))
}
