package controllers

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

func TestRetryableFailures(t *testing.T) {
	tests := map[string]bool{
		"KubernetesRefused: services \"web\" is forbidden: exceeded quota":  true,
		"Timeout: install web: not ready within 5m0s":                       true,
		"Failed: repository https://charts.example.com answered 500":        true,
		"BackoffLimitExceeded: Job has reached the specified backoff limit": true,
		"DigestMismatch: web-1.0.0.tgz":                                     true,
		"":                                                                  true,
		"ChartNotFound: web is not in https://charts.example.com":           false,
		"VersionNotFound: web 9.9.9":                                        false,
		"ValuesInvalid: values don't meet the specifications":               false,
		"RenderFailed: template: web/templates/x.yaml":                      false,
		"RequiredValueMissing: host is required":                            false,
		"KubeVersionIncompatible: chart requires kubeVersion: <1.20":        false,
		"InvalidArguments: --release required":                              false,
	}
	for msg, want := range tests {
		assert.Equal(t, want, retryableFailure(msg), msg)
	}
}

func TestRetryPolicy(t *testing.T) {
	p := policyOf(nil)
	assert.Equal(t, retryPolicy{attempts: 3, backoff: 10 * time.Second, maxBackoff: 5 * time.Minute}, p)
	assert.Equal(t, []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second}, []time.Duration{p.delay(1), p.delay(2), p.delay(3)})
	assert.Equal(t, 5*time.Minute, p.delay(10), "capped")

	c := &petriv1.Component{Retry: &petriv1.RetryPolicy{Attempts: ptr.To[int32](5), Backoff: &metav1.Duration{Duration: time.Second}, MaxBackoff: &metav1.Duration{Duration: 3 * time.Second}}}
	p = policyOf(c)
	assert.Equal(t, int32(5), p.attempts)
	assert.Equal(t, []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 3 * time.Second}, []time.Duration{p.delay(1), p.delay(2), p.delay(3), p.delay(4)})
}

func TestVerificationResults(t *testing.T) {
	assert.Equal(t, int32(4), deployedRevision("Deployed: revision 4"))
	assert.Equal(t, int32(0), deployedRevision(""))
	assert.Equal(t, int32(0), deployedRevision("Deployed"))
	assert.Equal(t, []string{"web", "api"}, driftedComponents("ReleaseMissing: web; RevisionMismatch: api 3 != 4"))
	assert.Equal(t, []string{"api"}, driftedComponents("RevisionMismatch: api 2 failed"))
	assert.Empty(t, driftedComponents("KubernetesRefused: secrets is forbidden"))
}
