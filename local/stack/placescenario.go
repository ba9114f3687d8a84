package stack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/controlplane"
	"github.com/petri-dev/petri/local/githubapi"
)

// The placement demo: with two workload clusters or more, the config
// repository has a second application, spread, whose environments the
// operator spreads over the workload clusters; two of its pull requests go
// to two clusters.
const (
	spreadApplication = "spread"
	spreadRepository  = "petri-dev/spread"
	// spreadFirstPull is the number of its first pull request.
	spreadFirstPull = 201
)

// spreadApplicationFile is applications/spread.yaml: the example chart,
// bound to the shared store as hello is, placed on any workload cluster by
// Spread; the operator deploys the store in each cluster it lands in.
const spreadApplicationFile = `# Written by the local stack when it runs workload clusters: the example
# application, placed on the workload clusters (every WorkloadCluster has a
# region label), Spread: the one with the fewest spread environments. It
# binds the shared store, which the operator deploys in each workload
# cluster that has a spread environment (store.east, store.west).
apiVersion: petri.dev/v1alpha1
kind: Application
name: spread
repository: petri-dev/spread
trigger:
  labels: [preview]
components:
  - name: web
    chart:
      repository: /charts
      name: example-app
      version: 0.1.0
    uses: [store]
    release:
      timeout: 2m
    values:
      envFromSecrets: [petri-binding-store]
    pullRequestValues:
      message: "Hello from pull request #{{ .Number }}, placed by Petri"
sharedWorkloads: [store]
placement:
  selector:
    matchExpressions:
      - {key: region, operator: Exists}
  strategy: Spread
ttl: 24h
`

// writeSpreadApplication adds the spread application to the config
// repository's files when there are two workload clusters or more.
func (s *Stack) writeSpreadApplication() error {
	if !s.spreads() {
		return nil
	}
	return os.WriteFile(filepath.Join(s.ConfigRepo, "applications", spreadApplication+".yaml"), []byte(spreadApplicationFile), 0o644)
}

// spreads: the stack runs two workload clusters or more, and the demo's
// pull requests are on GitHub's stand-in.
func (s *Stack) spreads() bool {
	return len(s.opts.clusterNames()) >= 2 && (s.opts.Forge == "" || s.opts.Forge == ForgeGitHub)
}

// ClosePullRequestOn closes a pull request of another repository and
// delivers its "closed" webhook.
func (s *Stack) ClosePullRequestOn(ctx context.Context, repo string, number int) (githubapi.PullRequest, error) {
	pr := s.GitHub.UpdatePullRequest(repo, number, func(p *githubapi.PullRequest) { p.State = "closed" })
	return pr, s.deliverOn(ctx, repo, number, "closed")
}

// placed is the step of the placement demo: two pull requests of spread,
// their environments Ready in two different workload clusters (each
// namespace in its cluster, as that API server answers, none in the
// management cluster), shown with kubectl, then closed and gone from both.
func (sc *Scenario) placed(ctx context.Context, res *Result) error {
	s, r := sc.Stack, sc.Report
	clusters := s.WorkloadClusters()
	var envs []*petriv1.EphemeralEnvironment
	for i := range 2 {
		n := spreadFirstPull + i
		if _, err := s.OpenPullRequestOn(ctx, spreadRepository, n, fmt.Sprintf("Spread change %d", i+1)); err != nil {
			return err
		}
		r.Event("GitHub: pull request #%d opened on %s", n, spreadRepository)
	}
	for i := range 2 {
		env, err := sc.waitPlacedReady(ctx, spreadFirstPull+i)
		if err != nil {
			return err
		}
		envs = append(envs, env)
	}
	seen := map[string]string{}
	for _, env := range envs {
		c, ok := clusters[env.Status.Cluster]
		if !ok {
			return fmt.Errorf("%s is placed in %q, not a workload cluster", env.Name, env.Status.Cluster)
		}
		if other, dup := seen[env.Status.Cluster]; dup {
			return fmt.Errorf("%s and %s are both in %s: Spread should have put them apart", other, env.Name, env.Status.Cluster)
		}
		seen[env.Status.Cluster] = env.Name
		ns := env.Status.TargetNamespace
		if err := c.Client.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{}); err != nil {
			return fmt.Errorf("namespace %s in workload cluster %s: %w", ns, env.Status.Cluster, err)
		}
		if err := s.Client.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("namespace %s is in the management cluster too (%v)", ns, err)
		}
		r.Event("%s: Ready in workload cluster %s, namespace %s there and not in the management cluster", env.Name, env.Status.Cluster, ns)
		store, err := sc.storeIn(ctx, c, env)
		if err != nil {
			return err
		}
		res.Placed = append(res.Placed, PlacedResult{Environment: env.Name, Cluster: env.Status.Cluster, Namespace: ns, Store: store})
		out, err := s.kubectlOn(ctx, c.Kubeconfig, "get", "deploy,pods", "-n", ns)
		if err != nil {
			return err
		}
		r.Event("$ kubectl --context %s get deploy,pods -n %s", env.Status.Cluster, ns)
		r.Detail(out)
	}
	for _, args := range [][]string{{"get", "ee", "-n", ManagementNamespace, "-o", "wide"}, {"get", "workloadclusters", "-n", ManagementNamespace}} {
		out, err := s.kubectl(ctx, args...)
		if err != nil {
			return err
		}
		r.Event("$ kubectl %s", strings.Join(args, " "))
		r.Detail(out)
	}
	return sc.closePlaced(ctx, envs)
}

// storeIn checks that the shared store env binds is its cluster's: the
// store's copy for that cluster Ready, its release in that cluster's shared
// namespace, the binding Secret in env's namespace there, without the
// instance keys, and its database on that cluster's store. It returns the
// copy's name.
func (sc *Scenario) storeIn(ctx context.Context, c *controlplane.Cluster, env *petriv1.EphemeralEnvironment) (string, error) {
	s, cluster := sc.Stack, env.Status.Cluster
	name := demoSharedWorkload + "." + cluster
	sw := &petriv1.SharedWorkload{}
	if err := s.Client.Get(ctx, client.ObjectKey{Namespace: ManagementNamespace, Name: name}, sw); err != nil {
		return "", fmt.Errorf("the store's copy for %s: %w", cluster, err)
	}
	if sw.Status.Cluster != cluster || sw.Status.Phase != petriv1.EnvironmentReady {
		return "", fmt.Errorf("shared workload %s: cluster %q, phase %s", name, sw.Status.Cluster, sw.Status.Phase)
	}
	var releases corev1.SecretList
	if err := c.Client.List(ctx, &releases, client.InNamespace(SharedNamespace), client.MatchingLabels{"owner": "helm", "name": demoSharedWorkload, "status": "deployed"}); err != nil || len(releases.Items) == 0 {
		return "", fmt.Errorf("no deployed release %s in %s's namespace %s (%v)", demoSharedWorkload, cluster, SharedNamespace, err)
	}
	var instance, binding corev1.Secret
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: ManagementNamespace, Name: demoSharedWorkload + "-instance"}, &instance); err != nil {
		return "", fmt.Errorf("the store's instance keys in %s: %w", cluster, err)
	}
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: env.Status.TargetNamespace, Name: "petri-binding-" + demoSharedWorkload}, &binding); err != nil {
		return "", fmt.Errorf("the binding of %s in %s: %w", env.Name, cluster, err)
	}
	for k := range instance.Data {
		if _, ok := binding.Data[k]; ok {
			return "", fmt.Errorf("the binding of %s holds the instance key %s of %s's store", env.Name, k, cluster)
		}
	}
	if len(binding.Data["DATABASE"]) == 0 {
		return "", fmt.Errorf("the binding of %s in %s names no database", env.Name, cluster)
	}
	sc.Report.Event("%s: bound to shared workload %s, its release %s deployed in %s's namespace %s", env.Name, name, demoSharedWorkload, cluster, SharedNamespace)
	return name, nil
}

// waitPlacedReady waits for the environment of spread's pull request n to
// be Ready.
func (sc *Scenario) waitPlacedReady(ctx context.Context, n int) (*petriv1.EphemeralEnvironment, error) {
	var found *petriv1.EphemeralEnvironment
	err := poll(ctx, sc.StepTimeout, func() (bool, error) {
		var list petriv1.EphemeralEnvironmentList
		if err := sc.Stack.Client.List(ctx, &list, client.InNamespace(ManagementNamespace),
			client.MatchingLabels{petriv1.LabelApplication: spreadApplication, "petri.dev/pull-request": strconv.Itoa(n)}); err != nil {
			return false, nil
		}
		for i := range list.Items {
			e := &list.Items[i]
			found = e
			if e.Status.ObservedGeneration == e.Generation && e.Status.Phase == petriv1.EnvironmentReady {
				return true, nil
			}
		}
		return false, nil
	}, func() string {
		if found == nil {
			return fmt.Sprintf("no environment of %s #%d", spreadRepository, n)
		}
		return fmt.Sprintf("%s: phase %s, cluster %q, conditions %v", found.Name, found.Status.Phase, found.Status.Cluster, found.Status.Conditions)
	})
	return found, err
}

// closePlaced closes the pull requests and waits until their environments
// and namespaces are gone, each from its own cluster.
func (sc *Scenario) closePlaced(ctx context.Context, envs []*petriv1.EphemeralEnvironment) error {
	s := sc.Stack
	clusters := s.WorkloadClusters()
	for i := range envs {
		if _, err := s.ClosePullRequestOn(ctx, spreadRepository, spreadFirstPull+i); err != nil {
			return err
		}
	}
	for _, env := range envs {
		c := clusters[env.Status.Cluster]
		err := poll(ctx, sc.StepTimeout, func() (bool, error) {
			err := s.Client.Get(ctx, client.ObjectKeyFromObject(env), &petriv1.EphemeralEnvironment{})
			if !apierrors.IsNotFound(err) {
				return false, nil
			}
			err = c.Client.Get(ctx, client.ObjectKey{Name: env.Status.TargetNamespace}, &corev1.Namespace{})
			return apierrors.IsNotFound(err), nil
		}, func() string { return env.Name + " or its namespace in " + env.Status.Cluster + " is still there" })
		if err != nil {
			return err
		}
		sc.Report.Event("pull request closed: %s and its namespace in %s are gone", env.Name, env.Status.Cluster)
	}
	return nil
}
