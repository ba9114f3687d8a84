package deployer

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/release"

	"github.com/petri-dev/petri/api/contract"
)

// Thin wrappers around Helm's actions: each sets the few options Petri needs
// and turns Helm's errors into ones Classify understands.

// skipClientValidation turns off Helm's client-side OpenAPI validation of
// rendered manifests. Against an API server that validates fields itself
// (Kubernetes 1.27 and later; Petri needs 1.30) Helm fetches the OpenAPI
// document of every API group a chart uses, parses it only to find the
// server's fieldValidation parameter, and then skips its own validation:
// the API server decodes and validates every object either way, and an
// unknown field was dropped before as it is now. Each deploy Job paid for
// those documents in CPU, and the API server in serving them.
const skipClientValidation = true

func install(ctx context.Context, cfg *action.Configuration, namespace string, req DeployRequest) (*release.Release, error) {
	in := action.NewInstall(cfg)
	in.ReleaseName = req.Release
	in.Namespace = namespace
	in.Wait = req.Wait
	in.Timeout = req.Timeout
	// Replace lets an install reuse the name of a release uninstalled with
	// its history kept; with no history it has no effect.
	in.Replace = true
	in.DisableOpenAPIValidation = skipClientValidation
	in.PostRenderer = releaseLabels{release: req.Release}
	rel, err := in.RunWithContext(ctx, req.Chart, req.Values)
	return rel, deployError("install", req, err)
}

func upgrade(ctx context.Context, cfg *action.Configuration, namespace string, req DeployRequest) (*release.Release, error) {
	up := action.NewUpgrade(cfg)
	up.Namespace = namespace
	up.Wait = req.Wait
	up.Timeout = req.Timeout
	up.MaxHistory = MaxHistory
	// The operator sends the complete values every time; Helm would
	// otherwise reuse the previous revision's values when none are given.
	up.ResetValues = true
	up.DisableOpenAPIValidation = skipClientValidation
	up.PostRenderer = releaseLabels{release: req.Release}
	rel, err := up.RunWithContext(ctx, req.Release, req.Chart, req.Values)
	return rel, deployError("upgrade", req, err)
}

func uninstall(cfg *action.Configuration, name string, timeout time.Duration) error {
	un := action.NewUninstall(cfg)
	un.Wait = true
	un.Timeout = timeout
	_, err := un.Run(name)
	return helmError("uninstall", name, timeout, err)
}

// unlockRecord marks a record that a killed pod left pending as failed, which is
// what Helm itself would have written had the pod lived; Helm then accepts
// an upgrade, even of a release that was never deployed.
func unlockRecord(cfg *action.Configuration, rel *release.Release) error {
	from := rel.Info.Status
	rel.SetStatus(release.StatusFailed, fmt.Sprintf("Recovered by petri-deployer from stale %s: the operation's pod stopped before it finished", from))
	if err := cfg.Releases.Update(rel); err != nil {
		return fmt.Errorf("unlock release %s revision %d (%s): %w", rel.Name, rel.Version, from, err)
	}
	return nil
}

// helmSchemaError is how Helm 3 words a values.schema.json failure; it
// flattens the validator's errors into text, so the wording is all there is to
// recognise it by. TestDeployRejectsSchemaViolation pins it.
const helmSchemaError = "values don't meet the specifications of the schema"

// schemaValue matches the validator's messages that quote the offending
// value itself (pattern and format failures); values come from a Secret.
var schemaValue = regexp.MustCompile(`'(?:[^'\\]|\\.)*' (does not match pattern|is not valid)`)

// Helm reports why a chart did not render only in words; these are the
// beginnings of its messages, pinned by TestDeployClassifiesRenderRefusals.
const (
	// action.renderResources, before any template runs.
	helmKubeVersionError = "chart requires kubeVersion: "
	// engine.cleanupExecError for `required` and `fail`.
	helmExecErrorAt = "execution error at ("
)

var helmRenderErrors = []string{
	helmExecErrorAt,
	"execution error in (",        // engine.cleanupExecError, unparsable location
	"parse error at (",            // engine.cleanupParseError
	"parse error in (",            // engine.cleanupParseError, unparsable location
	"template: ",                  // text/template: any other execution error
	"rendering template failed: ", // engine.render: a panic while rendering
	"YAML parse error on ",        // releaseutil.SortManifests: output is not YAML
}

// deployError classifies the errors of install and upgrade: the refusals of
// rendering (the chart's kubeVersion, its templates) are told apart from the
// rest, since no retry of the same Job can change their outcome.
func deployError(op string, req DeployRequest, err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if strings.HasPrefix(msg, helmKubeVersionError) {
		return fmt.Errorf("%w: %s %s: %w", ErrKubeVersionIncompatible, op, req.Release, err)
	}
	for _, prefix := range helmRenderErrors {
		if !strings.HasPrefix(msg, prefix) {
			continue
		}
		if requiredMessage(req.Chart, msg) {
			return fmt.Errorf("%w: %s %s: %w", ErrRequiredValueMissing, op, req.Release, err)
		}
		return fmt.Errorf("%w: %s %s: %w", ErrRenderFailed, op, req.Release, err)
	}
	return helmError(op, req.Release, req.Timeout, err)
}

var (
	// execErrorMessage takes the chart's own message out of Helm's
	// "execution error at (chart/templates/x.yaml:3:11): <message>".
	execErrorMessage = regexp.MustCompile(`^execution error at \(.*?\): ((?s).*)$`)
	// requiredCall finds `required "message"` (or a raw string) in templates,
	// as a call or as the last command of a pipeline.
	requiredCall = regexp.MustCompile("\\brequired\\s+(\"(?:[^\"\\\\]|\\\\.)*\"|`[^`]*`)")
)

// requiredMessage reports whether msg is what a `required` of the chart (or
// of its subcharts) says when its value is missing. Helm words `required` and
// `fail` alike, and the location it names is that of the outermost call (an
// `include` when the check is in a helper), so the message is matched
// against the literal messages of the chart's `required` calls instead. A
// message built at render time (printf) is not found and stays RenderFailed.
func requiredMessage(ch *chart.Chart, msg string) bool {
	m := execErrorMessage.FindStringSubmatch(msg)
	if m == nil || ch == nil {
		return false
	}
	want := m[1]
	for _, t := range ch.Templates {
		for _, lit := range requiredCall.FindAllStringSubmatch(string(t.Data), -1) {
			if s, err := strconv.Unquote(lit[1]); err == nil && s == want {
				return true
			}
		}
	}
	for _, dep := range ch.Dependencies() {
		if requiredMessage(dep, msg) {
			return true
		}
	}
	return false
}

func helmError(op, name string, timeout time.Duration, err error) error {
	if err == nil {
		return nil
	}
	if strings.Contains(err.Error(), helmSchemaError) {
		// The cause is a plain string from Helm; it is rewritten, not wrapped,
		// so that the values it quotes cannot leak through errors.Unwrap.
		msg := schemaValue.ReplaceAllString(err.Error(), "the value $1")
		return fmt.Errorf("%w: %s %s: %s", ErrValuesInvalid, op, name, msg)
	}
	var pods *PodsError
	if errors.As(err, &pods) {
		// It names the timeout and what was not ready itself.
		return fmt.Errorf("%s %s: %w", op, name, err)
	}
	if Classify(err) == contract.ReasonTimeout {
		return fmt.Errorf("%s %s: not ready within %s: %w", op, name, timeout, err)
	}
	return fmt.Errorf("%s %s: %w", op, name, err)
}
