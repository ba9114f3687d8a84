package chaos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/storage/driver"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/stack"
)

// counter counts faults by kind, safely from many goroutines.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) add(kind string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[kind]++
}

func (c *counter) get(kind string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[kind]
}

// playDeletedBehind deletes what Petri made while it is not looking: a
// Ready environment's namespace, one of its Helm releases (helm uninstall
// as a cluster administrator), its deployer RoleBinding or a finished Job;
// then a running deploy Job during a redeploy and a running undeploy Job
// during teardown. Every environment must end up deployed as its spec says
// (or gone, after its delete).
func playDeletedBehind(ctx context.Context, sc *scene) error {
	n := sc.size(12, 4)
	timeout := stepTimeout
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("s4-e%02d", i+1)
		sc.expectPresent(names[i])
		if err := sc.create(ctx, newEnvironment(names[i], sc.tag(), light, 1)); err != nil {
			return err
		}
	}
	sc.parallel(names, func(name string) { sc.waitState(ctx, name, "deploy", true, timeout) })

	var faults counter
	var faultErr error
	var errMu sync.Mutex
	fail := func(err error) {
		errMu.Lock()
		defer errMu.Unlock()
		if faultErr == nil {
			faultErr = err
		}
	}
	kinds := []string{"namespace", "release", "RoleBinding", "finished Job"}
	for i, name := range names {
		kind := kinds[i%len(kinds)]
		if err := sc.deleteBehind(ctx, name, kind, i); err != nil {
			return fmt.Errorf("delete the %s of %s: %w", kind, name, err)
		}
		faults.add(kind)
		sc.logf("deleted the %s of %s behind Petri's back", kind, name)
	}
	sc.parallel(names, func(name string) { sc.waitState(ctx, name, "repair", true, timeout) })

	sc.parallel(names, func(name string) {
		i := indexOf(names, name)
		if err := sc.redeploy(ctx, name, 2); err != nil {
			fail(err)
			return
		}
		if i%2 == 0 {
			ok, err := sc.deleteRunningJob(ctx, name, "deploy")
			if err != nil {
				fail(err)
				return
			}
			if ok {
				faults.add("running deploy Job")
			}
		}
		sc.waitState(ctx, name, "redeploy", true, timeout)
	})
	sc.parallel(names, func(name string) {
		i := indexOf(names, name)
		sc.expectGone(name)
		if err := sc.remove(ctx, name); err != nil {
			fail(err)
			return
		}
		if i%2 == 1 {
			ok, err := sc.deleteRunningJob(ctx, name, "undeploy")
			if err != nil {
				fail(err)
				return
			}
			if ok {
				faults.add("running undeploy Job")
			}
		}
		sc.waitState(ctx, name, "teardown", false, timeout)
	})
	sc.row.Faults = fmt.Sprintf("deleted behind Petri's back: namespaces %d, Helm releases %d, RoleBindings %d, Jobs %d (finished %d, running deploy %d, running undeploy %d)",
		faults.get("namespace"), faults.get("release"), faults.get("RoleBinding"),
		faults.get("finished Job")+faults.get("running deploy Job")+faults.get("running undeploy Job"),
		faults.get("finished Job"), faults.get("running deploy Job"), faults.get("running undeploy Job"))
	return faultErr
}

func indexOf(xs []string, x string) int {
	for i, v := range xs {
		if v == x {
			return i
		}
	}
	return -1
}

// parallel runs fn for every name at once and waits for all.
func (sc *scene) parallel(names []string, fn func(name string)) {
	var wg sync.WaitGroup
	for _, n := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(n)
		}()
	}
	wg.Wait()
}

// deleteBehind removes one kind of object an environment's deployment
// consists of, as a person with cluster-admin rights would.
func (sc *scene) deleteBehind(ctx context.Context, name, kind string, i int) error {
	env, err := sc.getEnv(ctx, name)
	if err != nil {
		return err
	}
	if env == nil || env.Status.TargetNamespace == "" {
		return fmt.Errorf("environment %s has no namespace", name)
	}
	ns := env.Status.TargetNamespace
	sc.rec.excuse(env.UID)
	c := sc.st.Client
	switch kind {
	case "namespace":
		return retryAPI(ctx, func() error {
			return ignoreNotFound(c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
		})
	case "RoleBinding":
		return retryAPI(ctx, func() error {
			return ignoreNotFound(c.Delete(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: deployerRoleBinding}}))
		})
	case "release":
		component := env.Spec.Components[i%len(env.Spec.Components)].Name
		return sc.helmUninstall(ns, component)
	case "finished Job":
		var jobs batchv1.JobList
		if err := retryAPI(ctx, func() error {
			return c.List(ctx, &jobs, client.InNamespace(stack.ManagementNamespace), client.MatchingLabels{
				petriv1.LabelEnvironmentUID: string(env.UID), labelAction: "deploy",
			})
		}); err != nil {
			return err
		}
		for i := range jobs.Items {
			j := &jobs.Items[i]
			if j.Status.CompletionTime == nil {
				continue
			}
			// kubectl delete job: the pods go in the background.
			return retryAPI(ctx, func() error {
				return ignoreNotFound(c.Delete(ctx, j, client.PropagationPolicy(metav1.DeletePropagationBackground)))
			})
		}
		return fmt.Errorf("no finished deploy Job of %s", name)
	}
	return fmt.Errorf("unknown kind %q", kind)
}

// helmUninstall runs helm uninstall as the cluster administrator.
func (sc *scene) helmUninstall(ns, release string) error {
	flags := genericclioptions.NewConfigFlags(true)
	kubeconfig := sc.st.Kubeconfig()
	flags.KubeConfig, flags.Namespace = &kubeconfig, &ns
	cfg := new(action.Configuration)
	if err := cfg.Init(flags, ns, "secret", func(string, ...any) {}); err != nil {
		return fmt.Errorf("helm for namespace %s: %w", ns, err)
	}
	un := action.NewUninstall(cfg)
	un.Wait = true
	un.Timeout = time.Minute
	if _, err := un.Run(release); err != nil && !errors.Is(err, driver.ErrReleaseNotFound) && !strings.Contains(err.Error(), "not found") {
		return fmt.Errorf("helm uninstall %s in %s: %w", release, ns, err)
	}
	return nil
}

// deleteRunningJob deletes, as kubectl delete job does, the Job whose pod
// runs a Helm action of the environment, as soon as one runs. It reports
// whether it found one within a minute.
func (sc *scene) deleteRunningJob(ctx context.Context, name, helmAction string) (bool, error) {
	var victim *podRecord
	waitFor(ctx, time.Minute, 20*time.Millisecond, func() bool {
		for _, p := range sc.rec.runningHelmPods() {
			if p.action == helmAction && strings.HasPrefix(p.job, name+"-") {
				victim = &p
				return true
			}
		}
		return false
	})
	if victim == nil {
		sc.logf("no running %s Job of %s to delete", helmAction, name)
		return false, nil
	}
	env, err := sc.getEnv(ctx, name)
	if err != nil {
		return false, err
	}
	if env != nil {
		sc.rec.excuse(env.UID)
	}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: stack.ManagementNamespace, Name: victim.job}}
	err = retryAPI(ctx, func() error {
		return ignoreNotFound(sc.st.Client.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground)))
	})
	if err != nil {
		return false, err
	}
	sc.logf("deleted running %s Job %s of %s behind Petri's back", helmAction, victim.job, name)
	return true, nil
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
