package deployer_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/storage/driver"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/api/contract"
	"github.com/petri-dev/petri/deployer"
)

func greeterValues(message, tag string) map[string]any {
	return map[string]any{"message": message, "image": map[string]any{"tag": tag}}
}

func TestDeployInstallsThenUpgrades(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ns := namespace(t)
	d := newDeployer(t, ns)
	ch := localChart(t, "greeter")

	rel, err := d.Deploy(ctx, deployer.DeployRequest{Release: "web", Chart: ch, Values: greeterValues("first", "v1")})
	require.NoError(t, err)
	assert.Equal(t, 1, rel.Version)
	assert.Equal(t, release.StatusDeployed, rel.Info.Status)
	assert.Equal(t, map[string]string{"message": "first", "imageTag": "v1"}, configMapData(ctx, ns, "web-greeter"))
	var dep appsv1.Deployment
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-greeter"}, &dep))
	assert.Equal(t, "petri.dev/example-app:v1", dep.Spec.Template.Spec.Containers[0].Image)

	// A second deploy upgrades, with the new values replacing the old ones:
	// the tag falls back to the chart's default.
	rel, err = d.Deploy(ctx, deployer.DeployRequest{Release: "web", Chart: ch, Values: map[string]any{"message": "second"}})
	require.NoError(t, err)
	assert.Equal(t, 2, rel.Version)
	assert.Equal(t, release.StatusDeployed, rel.Info.Status)
	assert.Equal(t, map[string]string{"message": "second", "imageTag": "latest"}, configMapData(ctx, ns, "web-greeter"))

	// Empty values mean the chart's defaults, not "keep the last values".
	rel, err = d.Deploy(ctx, deployer.DeployRequest{Release: "web", Chart: ch})
	require.NoError(t, err)
	assert.Equal(t, 3, rel.Version)
	assert.Equal(t, map[string]string{"message": "Hello from Petri", "imageTag": "latest"}, configMapData(ctx, ns, "web-greeter"))

	history, err := actionConfig(t, ns).Releases.History("web")
	require.NoError(t, err)
	statuses := map[int]release.Status{}
	for _, r := range history {
		statuses[r.Version] = r.Info.Status
	}
	assert.Equal(t, map[int]release.Status{1: release.StatusSuperseded, 2: release.StatusSuperseded, 3: release.StatusDeployed}, statuses)
}

func TestDeployChartWithVendoredDependency(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ns := namespace(t)
	_, err := newDeployer(t, ns).Deploy(ctx, deployer.DeployRequest{
		Release: "shop", Chart: localChart(t, "stack"),
		Values: map[string]any{"tier": "backend", "greeter": map[string]any{"message": "from values"}},
	})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"tier": "backend", "greeterMessage": "from values"}, configMapData(ctx, ns, "shop-stack"))
	assert.Equal(t, "from values", configMapData(ctx, ns, "shop-greeter")["message"], "the subchart got its values")
}

func TestDeployRejectsSchemaViolation(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ns := namespace(t)
	d := newDeployer(t, ns)
	ch := localChart(t, "strict")

	_, err := d.Deploy(ctx, deployer.DeployRequest{Release: "api", Chart: ch, Values: map[string]any{
		"replicas": 0, "message": 42, "image": map[string]any{"tag": "s3cr3t tag"},
	}})
	require.Error(t, err)
	assert.Equal(t, contract.ReasonValuesInvalid, deployer.Classify(err), err.Error())
	msg := deployer.TerminationMessage(err)
	assert.NotContains(t, msg, "\n")
	assert.Contains(t, msg, "at '/replicas': minimum: got 0, want 1")
	assert.Contains(t, msg, "at '/message': got number, want string")
	assert.Contains(t, msg, "at '/image/tag': the value does not match pattern")
	assert.NotContains(t, err.Error(), "s3cr3t", "values quoted by the validator are redacted")
	_, err = actionConfig(t, ns).Releases.Last("api")
	assert.ErrorIs(t, err, driver.ErrReleaseNotFound, "nothing was recorded")

	rel, err := d.Deploy(ctx, deployer.DeployRequest{Release: "api", Chart: ch, Values: map[string]any{"replicas": 2, "message": "ok"}})
	require.NoError(t, err)
	assert.Equal(t, 1, rel.Version)
}

// plantPending stores a release record the way a deployer pod killed in the
// middle of an install or upgrade leaves it: rendered by Helm, status pending,
// and (for an install) the first object already applied.
func plantPending(t *testing.T, ns, name string, status release.Status, vals map[string]any) *release.Release {
	t.Helper()
	cfg := actionConfig(t, ns)
	ch := localChart(t, "greeter")
	var rel *release.Release
	var err error
	if status == release.StatusPendingInstall {
		in := action.NewInstall(cfg)
		in.ReleaseName, in.Namespace, in.DryRun = name, ns, true
		rel, err = in.Run(ch, vals)
		require.NoError(t, err)
		rel.SetStatus(status, "Initial install underway")
	} else {
		up := action.NewUpgrade(cfg)
		up.Namespace, up.DryRun = ns, true
		rel, err = up.Run(name, ch, vals)
		require.NoError(t, err)
		rel.SetStatus(status, "Preparing upgrade")
	}
	require.NoError(t, cfg.Releases.Create(rel))
	return rel
}

func TestDeployRecoversPendingRelease(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status release.Status
		// installed first, before the interrupted operation
		installed bool
		// what the unlocked record ends as: an upgrade supersedes the
		// revision it started from, which is the unlocked one when nothing
		// was ever deployed
		after release.Status
	}{
		{status: release.StatusPendingInstall, after: release.StatusSuperseded},
		{status: release.StatusPendingUpgrade, installed: true, after: release.StatusFailed},
		{status: release.StatusPendingRollback, installed: true, after: release.StatusFailed},
	}
	for _, tt := range tests {
		t.Run(string(tt.status), func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			ns := namespace(t)
			d := newDeployer(t, ns)
			if tt.installed {
				_, err := d.Deploy(ctx, deployer.DeployRequest{Release: "web", Chart: localChart(t, "greeter"), Values: greeterValues("before", "v1")})
				require.NoError(t, err)
			}
			stuck := plantPending(t, ns, "web", tt.status, greeterValues("interrupted", "v2"))
			if !tt.installed {
				// The killed install had applied its ConfigMap already.
				require.NoError(t, env.Client.Create(ctx, &corev1.ConfigMap{
					ObjectMeta: metav1.ObjectMeta{
						Namespace: ns, Name: "web-greeter",
						Labels:      map[string]string{"app.kubernetes.io/managed-by": "Helm"},
						Annotations: map[string]string{"meta.helm.sh/release-name": "web", "meta.helm.sh/release-namespace": ns},
					},
					Data: map[string]string{"message": "interrupted"},
				}))
			}
			// Helm alone refuses to act on the stuck release.
			_, err := action.NewUpgrade(actionConfig(t, ns)).Run("web", localChart(t, "greeter"), nil)
			require.ErrorContains(t, err, "another operation")

			rel, err := d.Deploy(ctx, deployer.DeployRequest{Release: "web", Chart: localChart(t, "greeter"), Values: greeterValues("recovered", "v3")})
			require.NoError(t, err)
			assert.Equal(t, release.StatusDeployed, rel.Info.Status)
			assert.Equal(t, stuck.Version+1, rel.Version)
			assert.Equal(t, "recovered", configMapData(ctx, ns, "web-greeter")["message"])

			old, err := actionConfig(t, ns).Releases.Get("web", stuck.Version)
			require.NoError(t, err)
			assert.Equal(t, tt.after, old.Info.Status)
			assert.Contains(t, old.Info.Description, "Recovered by petri-deployer from stale "+string(tt.status))
		})
	}
}

func TestDeployWait(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ns := namespace(t)
	d := newDeployer(t, ns)
	ch := localChart(t, "greeter")

	// No node runs the pods here, so one replica never becomes ready.
	start := time.Now()
	_, err := d.Deploy(ctx, deployer.DeployRequest{Release: "slow", Chart: ch, Values: map[string]any{"replicas": 1}, Wait: true, Timeout: time.Second})
	require.Error(t, err)
	assert.Equal(t, contract.ReasonTimeout, deployer.Classify(err), err.Error())
	assert.Contains(t, err.Error(), "install slow: release.timeout 1s elapsed; ", "the wait names its timeout and what was not ready")
	assert.Less(t, time.Since(start), 30*time.Second)
	last, err := actionConfig(t, ns).Releases.Last("slow")
	require.NoError(t, err)
	assert.Equal(t, release.StatusFailed, last.Info.Status)

	// Zero replicas are ready as soon as the Deployment controller has seen
	// the Deployment.
	rel, err := d.Deploy(ctx, deployer.DeployRequest{Release: "idle", Chart: ch, Values: map[string]any{"replicas": 0}, Wait: true, Timeout: 30 * time.Second})
	require.NoError(t, err)
	assert.Equal(t, release.StatusDeployed, rel.Info.Status)
	var dep appsv1.Deployment
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "idle-greeter"}, &dep))
	assert.Equal(t, dep.Generation, dep.Status.ObservedGeneration, "the wait saw the controller's status")

	// The failed install is upgraded, though no revision was ever deployed.
	rel, err = d.Deploy(ctx, deployer.DeployRequest{Release: "slow", Chart: ch, Values: map[string]any{"replicas": 0}, Wait: true, Timeout: 30 * time.Second})
	require.NoError(t, err)
	assert.Equal(t, 2, rel.Version)
	assert.Equal(t, release.StatusDeployed, rel.Info.Status)
}

func TestUndeploy(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ns := namespace(t)
	d := newDeployer(t, ns)
	_, err := d.Deploy(ctx, deployer.DeployRequest{Release: "web", Chart: localChart(t, "greeter"), Values: greeterValues("bye", "v1")})
	require.NoError(t, err)
	require.NotNil(t, configMapData(ctx, ns, "web-greeter"))

	require.NoError(t, d.Undeploy(ctx, "web", 30*time.Second))
	_, err = actionConfig(t, ns).Releases.History("web")
	assert.ErrorIs(t, err, driver.ErrReleaseNotFound, "no release records are left")
	err = env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-greeter"}, &corev1.ConfigMap{})
	assert.True(t, apierrors.IsNotFound(err), "ConfigMap removed: %v", err)
	err = env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-greeter"}, &appsv1.Deployment{})
	assert.True(t, apierrors.IsNotFound(err), "Deployment removed: %v", err)

	// Absent is success, so a repeated teardown Job passes.
	require.NoError(t, d.Undeploy(ctx, "web", 30*time.Second))
	require.NoError(t, d.Undeploy(ctx, "never-installed", 30*time.Second))
}

func TestUndeployRecoversInterruptedUninstall(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ns := namespace(t)
	d := newDeployer(t, ns)
	_, err := d.Deploy(ctx, deployer.DeployRequest{Release: "web", Chart: localChart(t, "greeter"), Values: greeterValues("x", "v1")})
	require.NoError(t, err)
	cfg := actionConfig(t, ns)
	rel, err := cfg.Releases.Last("web")
	require.NoError(t, err)
	rel.SetStatus(release.StatusUninstalling, "Deletion in progress (or silently failed)")
	require.NoError(t, cfg.Releases.Update(rel))

	require.NoError(t, d.Undeploy(ctx, "web", 30*time.Second))
	_, err = cfg.Releases.History("web")
	assert.ErrorIs(t, err, driver.ErrReleaseNotFound)
}

func TestDeployWithoutRightsIsRefused(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ns := namespace(t)
	require.NoError(t, env.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nobody"}}))
	cfg, err := env.ServiceAccountConfig(ctx, ns, "nobody")
	require.NoError(t, err)
	d, err := deployer.New(deployer.NewRESTClientGetter(writeKubeconfig(t, cfg), ns), ns, testLogger(t))
	require.NoError(t, err)

	_, err = d.Deploy(ctx, deployer.DeployRequest{Release: "web", Chart: localChart(t, "greeter"), Values: greeterValues("x", "v1")})
	require.Error(t, err)
	assert.Equal(t, contract.ReasonKubernetesRefused, deployer.Classify(err), err.Error())
	assert.Contains(t, deployer.TerminationMessage(err), "system:serviceaccount:"+ns+":nobody")

	err = d.Undeploy(ctx, "web", 10*time.Second)
	assert.Equal(t, contract.ReasonKubernetesRefused, deployer.Classify(err), "%v", err)

	err = env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-greeter"}, &corev1.ConfigMap{})
	assert.True(t, apierrors.IsNotFound(err), "nothing was created")
}

// inlineChart is a chart held in memory: name, kubeVersion (may be empty)
// and its templates by file name under templates/.
func inlineChart(name, kubeVersion string, templates map[string]string) *chart.Chart {
	ch := &chart.Chart{Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: name, Version: "0.1.0", KubeVersion: kubeVersion}}
	for file, data := range templates {
		ch.Templates = append(ch.Templates, &chart.File{Name: "templates/" + file, Data: []byte(data)})
	}
	return ch
}

func TestDeployHonoursKubeVersionAndCapabilities(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ns := namespace(t)
	d := newDeployer(t, ns)
	server, err := env.Clientset.Discovery().ServerVersion()
	require.NoError(t, err)

	// The chart accepts the cluster and picks policy/v1 from its version.
	rel, err := d.Deploy(ctx, deployer.DeployRequest{Release: "web", Chart: localChart(t, "capabilities")})
	require.NoError(t, err, "a chart declaring kubeVersion >=1.23.0-0 installs on %s", server.GitVersion)
	assert.Equal(t, release.StatusDeployed, rel.Info.Status)
	assert.Equal(t, server.GitVersion, configMapData(ctx, ns, "web-capabilities")["kubeVersion"], "Helm saw the cluster's version")
	var pdb policyv1.PodDisruptionBudget
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-capabilities"}, &pdb))
	assert.Contains(t, rel.Manifest, "apiVersion: policy/v1\n")
	assert.NotContains(t, rel.Manifest, "policy/v1beta1")

	// A chart for clusters before 1.20 is refused before anything is applied.
	_, err = d.Deploy(ctx, deployer.DeployRequest{Release: "old", Chart: localChart(t, "legacy")})
	require.Error(t, err)
	assert.Equal(t, contract.ReasonKubeVersionIncompatible, deployer.Classify(err), err.Error())
	assert.Equal(t, "KubeVersionIncompatible: install old: chart requires kubeVersion: <1.20.0 which is incompatible with Kubernetes "+server.GitVersion,
		deployer.TerminationMessage(err))
	_, err = actionConfig(t, ns).Releases.Last("old")
	assert.ErrorIs(t, err, driver.ErrReleaseNotFound, "nothing was recorded")

	// An upgrade to such a chart is refused the same way.
	_, err = d.Deploy(ctx, deployer.DeployRequest{Release: "web", Chart: localChart(t, "legacy")})
	assert.Equal(t, contract.ReasonKubeVersionIncompatible, deployer.Classify(err), "%v", err)
	assert.Contains(t, deployer.TerminationMessage(err), "KubeVersionIncompatible: upgrade web: chart requires kubeVersion: <1.20.0")
}

// Helm words render failures only as text; these pin the wording each
// reason is recognised by, for install and upgrade.
func TestDeployClassifiesRenderRefusals(t *testing.T) {
	t.Parallel()
	configMap := func(data string) string {
		return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-x\ndata:\n" + data
	}
	withSubchart := inlineChart("parent", "", map[string]string{"cm.yaml": configMap("  a: b\n")})
	withSubchart.AddDependency(inlineChart("child", "", map[string]string{
		"cm.yaml": configMap("  host: {{ .Values.host | required `child: host is required` | quote }}\n"),
	}))
	tests := []struct {
		name   string
		chart  *chart.Chart
		values map[string]any
		reason contract.Reason
		// the termination message, after "<reason>: <op> <release>: "
		detail string
	}{
		{
			name:   "required value missing",
			chart:  inlineChart("req", "", map[string]string{"cm.yaml": configMap("  image: {{ required \"image.repository is required\" .Values.image.repository }}\n")}),
			values: map[string]any{"image": map[string]any{}},
			reason: contract.ReasonRequiredValueMissing,
			detail: "execution error at (req/templates/cm.yaml:6:12): image.repository is required",
		},
		{
			name:   "required empty string",
			chart:  inlineChart("req", "", map[string]string{"cm.yaml": configMap("  image: {{ .Values.tag | required \"tag is required\" }}\n")}),
			values: map[string]any{"tag": ""},
			reason: contract.ReasonRequiredValueMissing,
			detail: "execution error at (req/templates/cm.yaml:6:26): tag is required",
		},
		{
			name:   "required in a helper",
			chart:  localChart(t, "capabilities"),
			values: map[string]any{"minAvailable": nil},
			reason: contract.ReasonRequiredValueMissing,
			// Helm names the include, not the helper that calls required.
			detail: "execution error at (capabilities/templates/poddisruptionbudget.yaml:12:19): minAvailable is required",
		},
		{
			name:   "required in a subchart",
			chart:  withSubchart,
			reason: contract.ReasonRequiredValueMissing,
			detail: "execution error at (parent/charts/child/templates/cm.yaml:6:26): child: host is required",
		},
		{
			name:   "fail",
			chart:  inlineChart("f", "", map[string]string{"cm.yaml": configMap("{{ if not .Values.host }}{{ fail \"host is required\" }}{{ end }}")}),
			reason: contract.ReasonRenderFailed,
			detail: "execution error at (f/templates/cm.yaml:6:28): host is required",
		},
		{
			name:   "template does not parse",
			chart:  inlineChart("p", "", map[string]string{"cm.yaml": configMap("  a: {{ .Values.a \n")}),
			reason: contract.ReasonRenderFailed,
			detail: "parse error at (p/templates/cm.yaml:7): unclosed action started at p/templates/cm.yaml:6",
		},
		{
			name:   "template does not execute",
			chart:  inlineChart("e", "", map[string]string{"cm.yaml": configMap("  a: {{ .Values.a.b.c }}\n")}),
			values: map[string]any{"a": map[string]any{}},
			reason: contract.ReasonRenderFailed,
			detail: `template: e/templates/cm.yaml:6:15: executing "e/templates/cm.yaml" at <.Values.a.b.c>: nil pointer evaluating interface {}.c`,
		},
		{
			name:   "output is not YAML",
			chart:  inlineChart("y", "", map[string]string{"cm.yaml": configMap("  a: [unclosed\n")}),
			reason: contract.ReasonRenderFailed,
			detail: "YAML parse error on y/templates/cm.yaml: error converting YAML to JSON: yaml: line 6: did not find expected ',' or ']'",
		},
		{
			name:   "kubeVersion",
			chart:  inlineChart("k", ">= 99.0.0", map[string]string{"cm.yaml": configMap("  a: b\n")}),
			reason: contract.ReasonKubeVersionIncompatible,
			detail: "chart requires kubeVersion: >= 99.0.0 which is incompatible with Kubernetes v",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			ns := namespace(t)
			d := newDeployer(t, ns)
			_, err := d.Deploy(ctx, deployer.DeployRequest{Release: "r", Chart: tt.chart, Values: tt.values})
			require.Error(t, err)
			assert.Equal(t, tt.reason, deployer.Classify(err), err.Error())
			assert.True(t, tt.reason.Final(), "no retry renders it differently")
			msg := deployer.TerminationMessage(err)
			assert.True(t, strings.HasPrefix(msg, string(tt.reason)+": install r: "+tt.detail), "termination message %q", msg)
			_, err = actionConfig(t, ns).Releases.Last("r")
			assert.ErrorIs(t, err, driver.ErrReleaseNotFound, "nothing was recorded")

			// Upgrading a deployed release to the same chart fails alike.
			_, err = d.Deploy(ctx, deployer.DeployRequest{Release: "r", Chart: inlineChart("ok", "", map[string]string{"cm.yaml": configMap("  a: b\n")})})
			require.NoError(t, err)
			_, err = d.Deploy(ctx, deployer.DeployRequest{Release: "r", Chart: tt.chart, Values: tt.values})
			assert.Equal(t, tt.reason, deployer.Classify(err), "%v", err)
			assert.True(t, strings.HasPrefix(deployer.TerminationMessage(err), string(tt.reason)+": upgrade r: "), "%v", err)
		})
	}
}
