package options

import (
	"flag"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

func parseOptions(args ...string) (Options, error) {
	o := Default()
	fs := flag.NewFlagSet("petri-operator", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	return o, o.Validate()
}

// Every Job's container requests CPU and memory by default, so that the
// scheduler queues a burst of Jobs instead of running them all at once; the
// flags change, add or remove each quantity, and refuse nonsense by name.
func TestJobResourcesFlags(t *testing.T) {
	o, err := parseOptions()
	require.NoError(t, err)
	assert.Equal(t, "100m", o.JobResources.Requests.Cpu().String())
	assert.Equal(t, "128Mi", o.JobResources.Requests.Memory().String())
	assert.Empty(t, o.JobResources.Limits)

	o, err = parseOptions("--job-cpu-request=250m", "--job-memory-request=0", "--job-memory-limit=1Gi")
	require.NoError(t, err)
	assert.Equal(t, "250m", o.JobResources.Requests.Cpu().String())
	_, hasMemory := o.JobResources.Requests[corev1.ResourceMemory]
	assert.False(t, hasMemory, "0 removes the request")
	assert.Equal(t, "1Gi", o.JobResources.Limits.Memory().String())
	defaults := Default().JobResources.Requests
	assert.Equal(t, "100m", defaults.Cpu().String(), "the defaults are not changed by parsing")

	_, err = parseOptions("--job-cpu-request=lots")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "job-cpu-request")
	assert.Contains(t, err.Error(), `"lots" is not a quantity`)

	_, err = parseOptions("--job-memory-limit=-1Gi")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "negative")

	_, err = parseOptions("--job-memory-request=2Gi", "--job-memory-limit=1Gi")
	require.Error(t, err)
	assert.Equal(t, "--job-memory-request (2Gi) must not exceed --job-memory-limit (1Gi)", err.Error())
}

// The workloads' Pod Security level is one of the three of the standards,
// baseline unless the installation says otherwise.
func TestWorkloadPodSecurityFlag(t *testing.T) {
	o, err := parseOptions()
	require.NoError(t, err)
	assert.Equal(t, "baseline", o.WorkloadPodSecurity)
	for _, level := range []string{"privileged", "baseline", "restricted"} {
		o, err = parseOptions("--workload-pod-security=" + level)
		require.NoError(t, err)
		assert.Equal(t, level, o.WorkloadPodSecurity)
	}
	for _, bad := range []string{"strict", "", "Baseline"} {
		_, err = parseOptions("--workload-pod-security=" + bad)
		assert.ErrorContains(t, err, "--workload-pod-security must be one of privileged, baseline, restricted", bad)
	}
}

// The leader election is timed to ride out a slow API server (a renewal
// may take 20 s and is retried for 40 s); the flags change it, and timings
// under which a leader could act after its Lease expired, or never retry a
// renewal, are refused naming the flags.
func TestLeaderElectionFlags(t *testing.T) {
	o, err := parseOptions()
	require.NoError(t, err)
	assert.Equal(t, 60*time.Second, o.LeaseDuration)
	assert.Equal(t, 40*time.Second, o.RenewDeadline)
	assert.Equal(t, 5*time.Second, o.RetryPeriod)

	o, err = parseOptions("--leader-election-lease-duration=30s", "--leader-election-renew-deadline=20s", "--leader-election-retry-period=4s")
	require.NoError(t, err)
	assert.Equal(t, 30*time.Second, o.LeaseDuration)
	assert.Equal(t, 20*time.Second, o.RenewDeadline)
	assert.Equal(t, 4*time.Second, o.RetryPeriod)

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--leader-election-renew-deadline=60s"}, "--leader-election-renew-deadline (1m0s) must be shorter than --leader-election-lease-duration (1m0s)"},
		{[]string{"--leader-election-lease-duration=30s"}, "--leader-election-renew-deadline (40s) must be shorter than --leader-election-lease-duration (30s)"},
		{[]string{"--leader-election-retry-period=40s"}, "--leader-election-retry-period (40s) must be shorter than --leader-election-renew-deadline (40s)"},
		{[]string{"--leader-election-lease-duration=0"}, "--leader-election-lease-duration must be positive"},
		{[]string{"--leader-election-renew-deadline=-1s"}, "--leader-election-renew-deadline must be positive"},
		{[]string{"--leader-election-retry-period=0s"}, "--leader-election-retry-period must be positive"},
	} {
		_, err := parseOptions(tc.args...)
		assert.EqualError(t, err, tc.want, tc.args)
	}

	_, err = parseOptions("--leader-election-retry-period=often")
	assert.ErrorContains(t, err, "leader-election-retry-period")
}
