package deployer

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/go-logr/logr"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/release"
)

// Verification of deployed releases.
//
// The operator cannot read a workload namespace; it asks the deployer,
// running as the environment's identity, whether each component's release
// is still what its deploy left: the latest record exists, is deployed, and
// is at the revision the deploy reported ("Deployed: revision 4" in its
// termination message). The answer is one line the operator acts on:
//
//	Verified: web=4 api=2
//	ReleaseMissing: web; RevisionMismatch: api 3 != 4
//
// A release missing or at another revision is deployed again.

// Drift reasons, the words a verification's finding starts with.
const (
	// ReasonReleaseMissing: the release has no record, or only an
	// uninstalled one.
	ReasonReleaseMissing Reason = "ReleaseMissing"
	// ReasonRevisionMismatch: the latest record is at another revision than
	// the deploy reported, or is not deployed (failed, pending).
	ReasonRevisionMismatch Reason = "RevisionMismatch"
)

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

// DeployedMessage is the line a successful deploy writes to its termination
// log; the operator reads the revision from it.
func DeployedMessage(rel *release.Release) string {
	return fmt.Sprintf("Deployed: revision %d", rel.Version)
}

// Verify reads each release's latest record. It returns the drift found as
// one line ("" when every release is as expected) and the line that
// describes a verified state; err is a failure to read, which says nothing
// about the releases.
func (d *Deployer) Verify(ctx context.Context, expect []Expectation) (drift, verified string, err error) {
	log := logr.FromContextOrDiscard(ctx).WithValues("namespace", d.namespace)
	var findings, seen []string
	for _, e := range expect {
		latest, err := d.latest(e.Release)
		if err != nil {
			return "", "", err
		}
		switch {
		case latest == nil || latest.Info == nil || latest.Info.Status == release.StatusUninstalled:
			findings = append(findings, fmt.Sprintf("%s: %s", ReasonReleaseMissing, e.Release))
		case latest.Info.Status != release.StatusDeployed:
			findings = append(findings, fmt.Sprintf("%s: %s %d %s", ReasonRevisionMismatch, e.Release, latest.Version, latest.Info.Status))
		case e.Revision != 0 && latest.Version != e.Revision:
			findings = append(findings, fmt.Sprintf("%s: %s %d != %d", ReasonRevisionMismatch, e.Release, latest.Version, e.Revision))
		default:
			seen = append(seen, fmt.Sprintf("%s=%d", e.Release, latest.Version))
		}
	}
	if len(findings) > 0 {
		drift = truncate(strings.Join(findings, "; "), MaxMessageBytes)
		log.Info("Releases drifted", "drift", drift)
		return drift, "", nil
	}
	verified = truncate("Verified: "+strings.Join(seen, " "), MaxMessageBytes)
	log.Info("Releases verified", "releases", seen)
	return "", verified, nil
}
