package deployer

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/go-logr/logr"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/release"

	"github.com/petri-dev/petri/api/contract"
)

// Verification of deployed releases.
//
// The operator cannot read a workload namespace; it asks the deployer,
// running as the environment's identity, whether each component's release
// is still what its deploy left: the latest record exists, is deployed, and
// is at the revision the deploy reported (the revision of its
// result). The answer is a contract.Result: Succeeded, or Drifted with the
// releases found missing or moved, which the operator deploys again, and a
// line for people:
//
//	Verified: web=4 api=2
//	ReleaseMissing: web; RevisionMismatch: api 3 != 4

// Expectation is one release and the revision its deploy reported; 0 means
// the revision is unknown and only its presence is checked.
type Expectation struct {
	Release  string
	Revision int
}

// ParseExpectation reads "web=4" (or "web", revision unknown).
func ParseExpectation(s string) (Expectation, error) {
	name, rev, hasRev := strings.Cut(s, "=")
	e := Expectation{Release: name}
	if err := chartutil.ValidateReleaseName(name); err != nil {
		return e, fmt.Errorf("%w: release name %q: %w", ErrInvalidArguments, name, err)
	}
	if hasRev {
		n, err := strconv.Atoi(rev)
		if err != nil || n < 0 {
			return e, fmt.Errorf("%w: revision of %s must be a number, not %q", ErrInvalidArguments, name, rev)
		}
		e.Revision = n
	}
	return e, nil
}

// DeployedMessage is the message of a successful deploy's result, for
// people; the operator reads the revision from the result's field.
func DeployedMessage(rel *release.Release) string {
	return fmt.Sprintf("Deployed: revision %d", rel.Version)
}

// DeployedResult is the result a successful deploy writes to its
// termination log: the revision it made, which a verification expects.
func DeployedResult(rel *release.Release) contract.Result {
	return contract.Result{Action: contract.ActionDeploy, Outcome: contract.OutcomeSucceeded, Revision: rel.Version, Message: DeployedMessage(rel)}
}

// Verify reads each release's latest record. Its result is Succeeded with
// "Verified: web=4" when every release is as expected, or Drifted with the
// releases found missing or moved and one line naming what differs; err is a
// failure to read, which says nothing about the releases.
func (d *Deployer) Verify(ctx context.Context, expect []Expectation) (contract.Result, error) {
	log := logr.FromContextOrDiscard(ctx).WithValues("namespace", d.namespace)
	res := contract.Result{Action: contract.ActionVerify, Outcome: contract.OutcomeSucceeded}
	var findings, seen []string
	finding := func(reason contract.Reason, release, detail string) {
		if res.Reason == "" {
			res.Reason = reason
		}
		res.Drifted = append(res.Drifted, release)
		findings = append(findings, strings.TrimSpace(fmt.Sprintf("%s: %s %s", reason, release, detail)))
	}
	for _, e := range expect {
		latest, err := d.latest(d.cfg, e.Release)
		if err != nil {
			return contract.Result{}, err
		}
		switch {
		case latest == nil || latest.Info == nil || latest.Info.Status == release.StatusUninstalled:
			finding(contract.ReasonReleaseMissing, e.Release, "")
		case latest.Info.Status != release.StatusDeployed:
			finding(contract.ReasonRevisionMismatch, e.Release, fmt.Sprintf("%d %s", latest.Version, latest.Info.Status))
		case e.Revision != 0 && latest.Version != e.Revision:
			finding(contract.ReasonRevisionMismatch, e.Release, fmt.Sprintf("%d != %d", latest.Version, e.Revision))
		default:
			seen = append(seen, fmt.Sprintf("%s=%d", e.Release, latest.Version))
		}
	}
	if len(findings) > 0 {
		res.Outcome = contract.OutcomeDrifted
		res.Message = truncate(strings.Join(findings, "; "), MaxMessageBytes)
		log.Info("Releases drifted", "drift", res.Message)
		return res, nil
	}
	res.Message = truncate("Verified: "+strings.Join(seen, " "), MaxMessageBytes)
	log.Info("Releases verified", "releases", seen)
	return res, nil
}
