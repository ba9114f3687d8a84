package chaos

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/stack"
)

// LabelSquat marks the namespaces the suite squats.
const LabelSquat = "chaos.petri.dev/squat"

// candidate is the namespace name the operator tries for an environment
// with a hash prefix of n hex digits: its name and the first n hex digits
// of the SHA-256 of its UID (controllers/internal/naming.NamespaceCandidate,
// for names that are DNS labels of at most 58 characters, as the suite's
// are). The operator tries n = 4 first and takes the first name free.
func candidate(name string, uid types.UID, n int) string {
	sum := sha256.Sum256([]byte(uid))
	return name + "-" + hex.EncodeToString(sum[:])[:n]
}

// squat is a namespace the suite made in Petri's way.
type squat struct {
	name, env string
	uid       types.UID
	labels    map[string]string
	kind      string
	// petris is true for a namespace Petri made before the suite tampered
	// with it: its RoleBinding and releases were Petri's own.
	petris bool
}

// makeSquat creates a namespace that is not Petri's. With forged marks it
// carries the labels and annotations by which Petri recognises the
// environment's own namespace.
func (sc *scene) makeSquat(ctx context.Context, name string, env *petriv1.EphemeralEnvironment, forged bool) (*squat, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelSquat: "true"}}}
	kind := "plain squat"
	if forged {
		kind = "squat with forged marks"
		ns.Labels[petriv1.LabelManagedBy] = petriv1.ManagedByOperator
		ns.Labels[petriv1.LabelEnvironment] = env.Name
		ns.Labels[petriv1.LabelEnvironmentUID] = string(env.UID)
		ns.Annotations = map[string]string{
			petriv1.AnnotationEnvironment:    env.Namespace + "/" + env.Name,
			petriv1.AnnotationEnvironmentUID: string(env.UID),
		}
	}
	// Marked before it exists: from its first moment it is not Petri's.
	sc.rec.markForeign(name, "")
	err := retryAPI(ctx, func() error { return sc.st.Client.Create(ctx, ns) })
	if apierrors.IsAlreadyExists(err) {
		sc.rec.mu.Lock()
		delete(sc.rec.foreign, name)
		sc.rec.mu.Unlock()
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("squat namespace %s: %w", name, err)
	}
	sc.rec.markForeign(name, ns.UID)
	return &squat{name: name, env: env.Name, uid: ns.UID, labels: maps.Clone(ns.Labels), kind: kind}, nil
}

// checkSquat verifies a squatted namespace is neither adopted (its marks
// unchanged, no deployer RoleBinding, no Helm release in it) nor deleted.
func (sc *scene) checkSquat(ctx context.Context, s *squat) {
	ns := &corev1.Namespace{}
	err := retryAPI(ctx, func() error { return sc.st.Client.Get(ctx, client.ObjectKey{Name: s.name}, ns) })
	switch {
	case apierrors.IsNotFound(err) || err == nil && ns.UID != s.uid:
		sc.violate(ScenarioChecks, "squat-deleted/"+s.name, "%s %s (environment %s) was deleted", s.kind, s.name, s.env)
		return
	case err != nil:
		sc.violate(ScenarioChecks, "squat-read/"+s.name, "read %s: %v", s.name, err)
		return
	case ns.DeletionTimestamp != nil:
		sc.violate(ScenarioChecks, "squat-deleted/"+s.name, "%s %s (environment %s) is being deleted", s.kind, s.name, s.env)
	}
	if !maps.Equal(ns.Labels, withNameLabel(s.labels, s.name)) {
		sc.violate(ScenarioChecks, "squat-marks/"+s.name, "%s %s (environment %s): its labels were changed to %v", s.kind, s.name, s.env, ns.Labels)
	}
	if s.petris {
		return
	}
	rb := &rbacv1.RoleBinding{}
	if err := sc.st.Client.Get(ctx, client.ObjectKey{Namespace: s.name, Name: deployerRoleBinding}, rb); err == nil {
		sc.violate(ScenarioChecks, "squat-rolebinding/"+s.name, "%s %s (environment %s) was adopted: it got the deployer RoleBinding", s.kind, s.name, s.env)
	}
	var secrets corev1.SecretList
	if err := sc.st.Client.List(ctx, &secrets, client.InNamespace(s.name), client.MatchingLabels{"owner": "helm"}); err == nil && len(secrets.Items) > 0 {
		sc.violate(ScenarioChecks, "squat-release/"+s.name, "%s %s (environment %s) was adopted: Helm releases were installed into it", s.kind, s.name, s.env)
	}
}

// withNameLabel adds the label the API server puts on every namespace.
func withNameLabel(l map[string]string, name string) map[string]string {
	out := maps.Clone(l)
	out[corev1.LabelMetadataName] = name
	return out
}

// removeSquat deletes a namespace the suite made, once checked.
func (sc *scene) removeSquat(ctx context.Context, s *squat) {
	_ = retryAPI(ctx, func() error {
		return ignoreNotFound(sc.st.Client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.name}}, client.Preconditions{UID: &s.uid}))
	})
}

// playSquatting takes namespace names from Petri in three ways:
//   - before binding: while the operator is down (killed, its successor
//     waiting for the lease), environments are created and the namespace
//     name each would get first is squatted, plainly or with forged
//     ownership marks. Each must bind another name and leave the squat be.
//   - tampered marks: a bound namespace's UID label is changed, then its
//     environment deleted. Petri must not delete what it cannot prove is
//     its own: the environment stalls until the force-delete annotation
//     releases it, and the namespace stays.
//   - after binding: a Ready environment's namespace is deleted and its
//     name squatted the moment it is free. The environment must not adopt
//     it, and its deletion must leave it.
func playSquatting(ctx context.Context, sc *scene) error {
	var st squatting
	if err := sc.squatBeforeBinding(ctx, &st, sc.size(4, 2)); err != nil {
		return err
	}
	if err := sc.tamperMarks(ctx, &st, sc.size(2, 1)); err != nil {
		return err
	}
	if err := sc.squatAfterBinding(ctx, &st, sc.size(2, 1)); err != nil {
		return err
	}
	timeout := stepTimeout

	// The pre-bind environments go the ordinary way; squats stay to the end.
	for _, name := range st.pre {
		sc.expectGone(name)
		if err := sc.remove(ctx, name); err != nil {
			return err
		}
	}
	sc.parallel(st.pre, func(name string) { sc.waitState(ctx, name, "teardown", false, timeout) })
	all := append(append(append([]*squat{}, st.squats...), st.tampered...), st.post...)
	for _, s := range all {
		sc.checkSquat(ctx, s)
		sc.removeSquat(ctx, s)
	}
	forged := 0
	for _, s := range st.squats {
		if strings.Contains(s.kind, "forged") {
			forged++
		}
	}
	sc.row.Faults = fmt.Sprintf("namespace names squatted before binding: %d (%d with forged ownership marks, %d taken after the operator had reserved them); bound namespaces with tampered marks: %d; freed names squatted after binding: %d (the operator SIGKILLed to make the time); squats that lost the race to the operator: %d",
		len(st.squats), forged, st.reservedFirst, len(st.tampered), len(st.post), st.lost)
	return nil
}

// squatting is what playSquatting made and counted.
type squatting struct {
	// pre are the environments created while names were squatted before
	// binding.
	pre []string
	// squats, tampered and post are the squats before binding, the bound
	// namespaces with tampered marks and the freed names squatted.
	squats, tampered, post []*squat
	// lost counts the squats that lost the race to the operator;
	// reservedFirst those taken after the operator had reserved them.
	lost, reservedFirst int
}

// squatBeforeBinding squats, with the operator down, the first namespace
// name of each of preBind new environments, then checks that each bound
// another name and left the squat be.
func (sc *scene) squatBeforeBinding(ctx context.Context, st *squatting, preBind int) error {
	timeout := stepTimeout
	leader, err := sc.waitLiveOperatorLeader(ctx, 2*time.Minute)
	if err != nil {
		return err
	}
	if err := sc.killOperator(ctx); err != nil {
		return err
	}
	for i := 0; i < preBind; i++ {
		name := fmt.Sprintf("s6-pre%02d", i+1)
		st.pre = append(st.pre, name)
		sc.expectPresent(name)
		if err := sc.create(ctx, newEnvironment(name, sc.tag(), light, 1)); err != nil {
			return err
		}
		env, err := sc.getEnv(ctx, name)
		if err != nil || env == nil {
			return fmt.Errorf("read environment %s: %v", name, err)
		}
		s, err := sc.makeSquat(ctx, candidate(name, env.UID, 4), env, i%2 == 1)
		if err != nil {
			return err
		}
		// A squat counts only if the environment was not bound yet.
		if env, err = sc.getEnv(ctx, name); err != nil {
			return err
		}
		if s == nil || env.Status.TargetNamespace != "" {
			st.lost++
			if s != nil {
				sc.removeSquat(ctx, s)
			}
			continue
		}
		st.squats = append(st.squats, s)
	}
	if sc.leaseHolder(ctx, stack.ManagementNamespace, operatorLease) != leader {
		sc.logf("the operator took the lease back while names were squatted; squats made after that may have lost the race")
	}
	if _, err := sc.waitOperatorLeader(ctx, leader, 2*time.Minute); err != nil {
		return err
	}
	sc.parallel(st.pre, func(name string) { sc.waitState(ctx, name, "deploy", true, timeout) })
	for _, s := range st.squats {
		rec := sc.rec.environment(s.env)
		var target string
		var boundSquat, reservedSquat bool
		if rec != nil {
			sc.rec.mu.Lock()
			target, boundSquat, reservedSquat = rec.target, rec.bound[s.name], slices.Contains(rec.targets, s.name)
			sc.rec.mu.Unlock()
		}
		switch {
		case target == "":
		case boundSquat || target == s.name:
			sc.violate(ScenarioChecks, "squat-bound/"+s.name, "environment %s bound the squatted namespace %s", s.env, s.name)
		case target != candidate(s.env, rec.uid, 5):
			// The squat did not take the name the operator wanted first:
			// the rule copied above is out of date, and the check proves
			// nothing.
			return fmt.Errorf("environment %s bound %s, not %s next to the squat %s: candidate() no longer follows the operator's naming", s.env, target, candidate(s.env, rec.uid, 5), s.name)
		case reservedSquat:
			// The operator reserved the name before the squat took it,
			// then found it taken and reserved the next one.
			st.reservedFirst++
		}
		sc.checkSquat(ctx, s)
	}
	return nil
}

// tamperMarks changes the UID label of the bound namespaces of tampered
// environments, then deletes them: they must stall until released by the
// force-delete annotation, and the namespaces stay.
func (sc *scene) tamperMarks(ctx context.Context, st *squatting, tampered int) error {
	timeout := stepTimeout
	for i := 0; i < tampered; i++ {
		name := fmt.Sprintf("s6-tampered%02d", i+1)
		env, nsName, err := sc.deployedEnvironment(ctx, name, timeout)
		if err != nil {
			return err
		}
		ns := &corev1.Namespace{}
		if err := retryAPI(ctx, func() error {
			if err := sc.st.Client.Get(ctx, client.ObjectKey{Name: nsName}, ns); err != nil {
				return err
			}
			sc.rec.markForeign(nsName, ns.UID)
			patch := client.MergeFrom(ns.DeepCopy())
			ns.Labels[petriv1.LabelEnvironmentUID] = "tampered-" + string(env.UID)[:8]
			return sc.st.Client.Patch(ctx, ns, patch)
		}); err != nil {
			return fmt.Errorf("tamper with namespace %s: %w", nsName, err)
		}
		s := &squat{name: nsName, env: name, uid: ns.UID, labels: maps.Clone(ns.Labels), kind: "namespace with tampered marks", petris: true}
		st.tampered = append(st.tampered, s)
		sc.logf("tampered with the marks of namespace %s of %s", nsName, name)
		sc.expectGone(name)
		if err := sc.releaseStuck(ctx, name, s); err != nil {
			return err
		}
		sc.checkSquat(ctx, s)
	}
	return nil
}

// squatAfterBinding deletes the namespaces of postBind Ready environments
// with the operator down and squats each name the moment it is free: the
// environment must not adopt it, and its deletion must leave it.
func (sc *scene) squatAfterBinding(ctx context.Context, st *squatting, postBind int) error {
	timeout := stepTimeout
	for i := 0; i < postBind; i++ {
		name := fmt.Sprintf("s6-post%02d", i+1)
		env, nsName, err := sc.deployedEnvironment(ctx, name, timeout)
		if err != nil {
			return err
		}
		old := &corev1.Namespace{}
		if err := retryAPI(ctx, func() error { return sc.st.Client.Get(ctx, client.ObjectKey{Name: nsName}, old) }); err != nil {
			return err
		}
		nsUID := old.UID
		// With the operator down (its successor waits for the lease), the
		// freed name is there for the taking.
		leader, err := sc.waitLiveOperatorLeader(ctx, 2*time.Minute)
		if err != nil {
			return err
		}
		if err := sc.killOperator(ctx); err != nil {
			return err
		}
		sc.rec.excuse(env.UID)
		if err := retryAPI(ctx, func() error {
			return ignoreNotFound(sc.st.Client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsName}}))
		}); err != nil {
			return err
		}
		// Squat the name the moment it is free.
		var s *squat
		var squatErr error
		waitFor(ctx, 2*time.Minute, 10*time.Millisecond, func() bool {
			cur := &corev1.Namespace{}
			err := sc.st.Client.Get(ctx, client.ObjectKey{Name: nsName}, cur)
			if err == nil {
				// Made again by the operator first: the race is lost.
				return cur.UID != nsUID
			}
			if !apierrors.IsNotFound(err) {
				return false
			}
			s, squatErr = sc.makeSquat(ctx, nsName, env, false)
			return true
		})
		if squatErr != nil {
			return squatErr
		}
		if s == nil {
			// The operator made it again first: nothing was squatted, and
			// the environment must come back as its spec says.
			if _, err := sc.waitOperatorLeader(ctx, leader, 2*time.Minute); err != nil {
				return err
			}
			st.lost++
			sc.logf("the operator re-created %s before it could be squatted", nsName)
			continue
		}
		st.post = append(st.post, s)
		sc.logf("squatted %s, the freed namespace of %s", nsName, name)
		if _, err := sc.waitOperatorLeader(ctx, leader, 2*time.Minute); err != nil {
			return err
		}
		// The environment must not take it: it cannot be Ready on it.
		if waitFor(ctx, 20*time.Second, 500*time.Millisecond, func() bool {
			why, err := sc.converged(ctx, name)
			return err == nil && len(why) == 0
		}) {
			sc.violate(ScenarioChecks, "squat-ready/"+name, "environment %s is Ready on %s, a namespace it did not create", name, nsName)
		}
		sc.checkSquat(ctx, s)
		sc.expectGone(name)
		if err := sc.releaseStuck(ctx, name, s); err != nil {
			return err
		}
		sc.checkSquat(ctx, s)
	}
	return nil
}

// deployedEnvironment creates an environment the scenario expects to stay,
// waits until it is deployed and returns it with its workload namespace.
func (sc *scene) deployedEnvironment(ctx context.Context, name string, timeout time.Duration) (*petriv1.EphemeralEnvironment, string, error) {
	sc.expectPresent(name)
	if err := sc.create(ctx, newEnvironment(name, sc.tag(), light, 1)); err != nil {
		return nil, "", err
	}
	sc.waitState(ctx, name, "deploy", true, timeout)
	env, err := sc.getEnv(ctx, name)
	if err != nil || env == nil || env.Status.TargetNamespace == "" {
		return nil, "", fmt.Errorf("environment %s has no namespace: %v", name, err)
	}
	return env, env.Status.TargetNamespace, nil
}

// releaseStuck deletes an environment whose namespace Petri cannot prove
// its own. Its teardown must stop short of that namespace and say so (a
// Stalled condition, or a failed teardown step it retries); the
// force-delete annotation then releases the environment without touching
// the namespace.
func (sc *scene) releaseStuck(ctx context.Context, name string, s *squat) error {
	if err := sc.remove(ctx, name); err != nil {
		return err
	}
	var why string
	waitFor(ctx, 60*time.Second, 500*time.Millisecond, func() bool {
		env, err := sc.getEnv(ctx, name)
		if err != nil {
			return false
		}
		if env == nil {
			why = "released"
			return true
		}
		for _, c := range env.Status.Conditions {
			if c.Type == petriv1.ConditionStalled && c.Status == metav1.ConditionTrue || c.Reason == petriv1.ReasonTeardownFailed {
				why = c.Reason
				return true
			}
		}
		return false
	})
	sc.checkSquat(ctx, s)
	if why == "released" {
		sc.logf("environment %s was released without the force-delete annotation; %s left as it was", name, s.name)
		return nil
	}
	sc.logf("environment %s stuck on %s (%s); force-deleting it", name, s.name, why)
	return sc.forceDelete(ctx, name)
}

// syncElection reads how many replicas sync runs and the lease its leader
// holds ("" when there is none).
func (r *run) syncElection(ctx context.Context) (int, string, error) {
	var d appsv1.Deployment
	if err := retryAPI(ctx, func() error {
		return r.st.Client.Get(ctx, client.ObjectKey{Namespace: stack.SyncNamespace, Name: "petri-sync"}, &d)
	}); err != nil {
		return 0, "", err
	}
	replicas := 1
	if d.Spec.Replicas != nil {
		replicas = int(*d.Spec.Replicas)
	}
	var leases coordinationv1.LeaseList
	if err := retryAPI(ctx, func() error {
		return r.st.Client.List(ctx, &leases, client.InNamespace(stack.SyncNamespace))
	}); err != nil {
		return replicas, "", err
	}
	for _, l := range leases.Items {
		if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
			return replicas, l.Name, nil
		}
	}
	return replicas, "", nil
}
