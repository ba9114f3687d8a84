package deployer_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/petri-dev/petri/api/contract"
	"github.com/petri-dev/petri/deployer"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "", errors.New(`User "system:serviceaccount:ns:nobody" cannot list resource "secrets"`))
	tests := []struct {
		name string
		err  error
		want contract.Reason
	}{
		{"nil", nil, ""},
		{"chart not found", fmt.Errorf("load chart: %w: greeter", deployer.ErrChartNotFound), contract.ReasonChartNotFound},
		{"version not found", fmt.Errorf("%w: greeter 9.9.9", deployer.ErrVersionNotFound), contract.ReasonVersionNotFound},
		{"values invalid", fmt.Errorf("%w: install r: bad", deployer.ErrValuesInvalid), contract.ReasonValuesInvalid},
		{"digest mismatch", fmt.Errorf("%w: x", deployer.ErrDigestMismatch), contract.ReasonDigestMismatch},
		{"invalid arguments", fmt.Errorf("%w: --release required", deployer.ErrInvalidArguments), contract.ReasonInvalidArguments},
		{"forbidden status error", fmt.Errorf("read release r: %w", forbidden), contract.ReasonKubernetesRefused},
		{"invalid object", apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "x", nil), contract.ReasonKubernetesRefused},
		{"missing namespace", apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "gone"), contract.ReasonKubernetesRefused},
		{"forbidden flattened by helm", errors.New(`failed to create resource: configmaps is forbidden: User "u" cannot create resource "configmaps"`), contract.ReasonKubernetesRefused},
		{"unauthorized flattened", errors.New("query: failed to query with labels: Unauthorized"), contract.ReasonKubernetesRefused},
		{"deadline", fmt.Errorf("install r: %w", context.DeadlineExceeded), contract.ReasonTimeout},
		{"wait interrupted", wait.ErrorInterrupted(errors.New("x")), contract.ReasonTimeout},
		{"deadline flattened", errors.New("release r failed: context deadline exceeded"), contract.ReasonTimeout},
		{"server timeout", apierrors.NewServerTimeout(schema.GroupResource{Resource: "configmaps"}, "create", 1), contract.ReasonTimeout},
		{"pods at a timeout", fmt.Errorf("install r: %w", &deployer.PodsError{Reason: contract.ReasonUnschedulable, Timeout: time.Minute}), contract.ReasonUnschedulable},
		{"pods given up at once", fmt.Errorf("upgrade r: %w", &deployer.PodsError{Reason: contract.ReasonImagePullFailed}), contract.ReasonImagePullFailed},
		{"sentinel wins over cause", fmt.Errorf("%w: %w", deployer.ErrChartNotFound, context.DeadlineExceeded), contract.ReasonChartNotFound},
		{"kube version incompatible", fmt.Errorf("%w: install r: chart requires kubeVersion: <1.20.0 which is incompatible with Kubernetes v1.37.2", deployer.ErrKubeVersionIncompatible), contract.ReasonKubeVersionIncompatible},
		{"required value missing", fmt.Errorf("%w: install r: execution error at (c/templates/x.yaml:3:11): host is required", deployer.ErrRequiredValueMissing), contract.ReasonRequiredValueMissing},
		{"render failed", fmt.Errorf("%w: upgrade r: parse error at (c/templates/x.yaml:3): unclosed action", deployer.ErrRenderFailed), contract.ReasonRenderFailed},
		// Render failures are recognised where Helm reports them (Deploy,
		// which has the chart); the text alone is not enough.
		{"anything else", errors.New("template: greeter/templates/x.yaml:3: unexpected EOF"), contract.ReasonFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, deployer.Classify(tt.err))
		})
	}
}

// Final failures end their Job at once; the others are worth another pod.
func TestReasonFinal(t *testing.T) {
	t.Parallel()
	final := map[contract.Reason]bool{
		contract.ReasonInvalidArguments:        true,
		contract.ReasonValuesInvalid:           true,
		contract.ReasonKubeVersionIncompatible: true,
		contract.ReasonRequiredValueMissing:    true,
		contract.ReasonRenderFailed:            true,
		// The release's pods: another Job deploys them unchanged while the
		// kubelet keeps pulling and restarting them by itself.
		contract.ReasonImagePullFailed:  true,
		contract.ReasonContainerCrashed: true,
		// A cluster may add nodes.
		contract.ReasonUnschedulable: false,
		// A chart or version may be published a moment later, a refusal may
		// be an RBAC binding not yet in effect, a timeout a slow cluster.
		contract.ReasonChartNotFound:     false,
		contract.ReasonVersionNotFound:   false,
		contract.ReasonKubernetesRefused: false,
		contract.ReasonTimeout:           false,
		contract.ReasonDigestMismatch:    false,
		contract.ReasonFailed:            false,
	}
	for reason, want := range final {
		assert.Equal(t, want, reason.Final(), reason)
	}
}

func TestTerminationMessage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		err     error
		want    string
		notWant string
	}{
		{
			name: "reason prefix replaces the sentinel's text",
			err:  fmt.Errorf("load chart: %w: greeter 0.1.0 from oci://r/charts", deployer.ErrChartNotFound),
			want: "ChartNotFound: load chart: greeter 0.1.0 from oci://r/charts",
		},
		{
			name: "multi-line helm error becomes one line",
			err:  fmt.Errorf("%w: install r: %w", deployer.ErrValuesInvalid, errors.New("values don't meet the specifications of the schema(s) in the following chart(s):\nstrict:\n- at '/replicas': minimum: got 0, want 1\n")),
			want: "ValuesInvalid: install r: values don't meet the specifications of the schema(s) in the following chart(s): strict: - at '/replicas': minimum: got 0, want 1",
		},
		{
			name: "render refusal",
			err:  fmt.Errorf("%w: install r: %w", deployer.ErrRequiredValueMissing, errors.New("execution error at (c/templates/x.yaml:3:11): host is required")),
			want: "RequiredValueMissing: install r: execution error at (c/templates/x.yaml:3:11): host is required",
		},
		{
			name:    "credentials in URLs are redacted",
			err:     errors.New(`Get "https://bob:hunter2@charts.example/index.yaml": dial tcp: lookup charts.example: no such host`),
			want:    `Failed: Get "https://***@charts.example/index.yaml": dial tcp: lookup charts.example: no such host`,
			notWant: "hunter2",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := deployer.TerminationMessage(tt.err)
			assert.Equal(t, tt.want, got)
			if tt.notWant != "" {
				assert.NotContains(t, got, tt.notWant)
			}
		})
	}

	t.Run("long messages are cut at a rune boundary", func(t *testing.T) {
		got := deployer.TerminationMessage(errors.New(strings.Repeat("é", 2000)))
		assert.LessOrEqual(t, len(got), deployer.MaxMessageBytes)
		assert.Greater(t, len(got), deployer.MaxMessageBytes-4)
		assert.True(t, utf8.ValidString(got))
		assert.True(t, strings.HasPrefix(got, "Failed: é"))
		assert.True(t, strings.HasSuffix(got, "..."))
	})
}
