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
