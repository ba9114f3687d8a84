package workloadcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/clusters"
	"github.com/petri-dev/petri/controllers/internal/fences"
	"github.com/petri-dev/petri/controllers/internal/health"
	"github.com/petri-dev/petri/controllers/internal/options"
)

// probeTimeout bounds one probe of a workload cluster.
const probeTimeout = 5 * time.Second

// probe asks the connection's cluster, with the credentials of its
// Secret, who Petri is there and whether its fences refuse what they must,
// and waits briefly for the connection's cache; it records the finding on
// the connection and returns it.
func probe(ctx context.Context, c *clusters.Conn, o options.Options) (reachable bool, reason, message string) {
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	err := checkWorkloadCluster(pctx, c.Target, o)
	var notPetri *notPetriError
	switch {
	case err == nil:
		select {
		case <-c.Synced():
			reachable, reason, message = true, petriv1.ReasonReachable, reachableMessage(o)
		case <-pctx.Done():
			reason, message = petriv1.ReasonClusterUnreachable, "its cache has not synced"
			if denied := deniedReads(ctx, c.Target, o); denied != "" {
				reason, message = petriv1.ReasonCredentialsRejected, "its cache cannot sync: Petri's identity there may not "+denied+
					", which the chart's workload-cluster mode grants (install it there again, of this operator's version)"
			}
		}
	case errors.As(err, &notPetri):
		reason, message = petriv1.ReasonCredentialsNotPetri, err.Error()
	case errors.Is(err, fences.ErrMissing):
		reason, message = petriv1.ReasonFencesMissing, err.Error()
	case errors.Is(err, fences.ErrNotEnforced):
		reason, message = petriv1.ReasonFencesNotEnforced, err.Error()
	case apierrors.IsUnauthorized(err):
		reason, message = petriv1.ReasonCredentialsRejected, "the API server refused Petri's credentials (401)"
	case apierrors.IsForbidden(err):
		reason, message = petriv1.ReasonCredentialsRejected, "Petri's identity there lacks the rights the chart's workload-cluster mode grants (403)"
	default:
		reason, message = petriv1.ReasonClusterUnreachable, unreachableMessage(err)
	}
	c.Record(reachable, reason, message)
	return reachable, reason, message
}

// reachableMessage is what a WorkloadCluster's Reachable condition says when
// the probe found nothing wrong: exactly what was checked.
func reachableMessage(o options.Options) string {
	if o.WithoutFences {
		return fmt.Sprintf("answers with Petri's credentials (%s); fences not checked (--require-fences=false)", fences.OperatorUsername(o.ManagementNamespace))
	}
	return "answers with Petri's credentials, fences in place"
}

// checkWorkloadCluster asks the cluster, through t, who the credentials are
// (a SelfSubjectReview) and requires the operator's ServiceAccount, which
// the fences match; then, unless the operator runs without fences, that the
// fences are in place, agree with the operator's settings, and refuse what
// they must (server-side dry runs). Anything else would let the operator act
// there with rights nothing fences.
func checkWorkloadCluster(ctx context.Context, t *clusters.Target, o options.Options) error {
	review := &authenticationv1.SelfSubjectReview{}
	if err := t.Client.Create(ctx, review); err != nil {
		return fmt.Errorf("ask who Petri's credentials are (SelfSubjectReview): %w", err)
	}
	want := fences.OperatorUsername(o.ManagementNamespace)
	if got := review.Status.UserInfo.Username; got != want {
		return &notPetriError{got: got, want: want}
	}
	if o.WithoutFences {
		return nil
	}
	if err := fences.Verify(ctx, t.APIReader, o); err != nil {
		return err
	}
	return fences.Prove(ctx, t.Client, o)
}

// notPetriError is a workload cluster's credentials authenticating as
// another identity than the operator's ServiceAccount.
type notPetriError struct{ got, want string }

func (e *notPetriError) Error() string {
	got := e.got
	if got == "" {
		got = "nobody (anonymous)"
	}
	return fmt.Sprintf("the credentials authenticate as %s, not as %s (the ServiceAccount the chart's workload-cluster mode creates, which the fences match); give a kubeconfig with a token of that ServiceAccount (docs/clusters.md)", got, e.want)
}

// unreachableMessage says why a request did not get an answer, without
// the request's URL parameters.
func unreachableMessage(err error) string {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Sprintf("no answer within %s", probeTimeout)
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		return oe.Error()
	}
	return err.Error()
}

// deniedReads says which read the cache of the connection needs beyond
// what the probe checked the identity may not make (a SelfSubjectAccessReview
// each): the health watch's kinds in every namespace, unless it is off.
// Empty when none is denied, or the cluster does not say.
func deniedReads(ctx context.Context, t *clusters.Target, o options.Options) string {
	if !o.WorkloadHealth {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	for _, r := range health.Resources {
		for _, verb := range []string{"list", "watch"} {
			review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
				ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Group: r.Group, Resource: r.Resource},
			}}
			if err := t.Client.Create(ctx, review); err != nil {
				return ""
			}
			if !review.Status.Allowed {
				return fmt.Sprintf("%s %s in every namespace", verb, r.String())
			}
		}
	}
	return ""
}
