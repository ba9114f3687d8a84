package stack

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

// SleepResult is what the sleep and wake steps measured.
type SleepResult struct {
	// Asleep is the time from the sleep request to the environment asleep
	// (its Deployment scaled to zero, phase Sleeping, Reconciling False);
	// PodsGone to the application's last pod gone.
	Asleep, PodsGone time.Duration
	// Ready is the time from the wake request to the environment Ready
	// again (the wake Job waits for the pods, as the deploy does); Answering
	// to the URL answering with the application's page.
	Ready, Answering time.Duration
	// Recorded is the replica count the sleep recorded on the Deployment;
	// Restored the count after the wake.
	Recorded string
	Restored int32
	// AsleepAnswer is what the URL answered while the environment slept.
	AsleepAnswer int
	// Page is what the URL answered after the wake.
	Page string
}

// sleep asks the environment to sleep the way a person does it (kubectl
// annotate), waits until it is asleep and checks that the application's
// Deployment is at zero replicas with its count recorded.
func (sc *Scenario) sleep(ctx context.Context, res *Result) error {
	s, r := sc.Stack, sc.Report
	at := time.Now().UTC().Format(time.RFC3339Nano)
	start := time.Now()
	args := []string{"-n", ManagementNamespace, "annotate", "ee", res.Environment, petriv1.AnnotationSleepRequested + "=" + at, "--overwrite"}
	if _, err := s.kubectl(ctx, args...); err != nil {
		return err
	}
	r.Event("$ kubectl %s", strings.Join(args, " "))
	var env *petriv1.EphemeralEnvironment
	err := poll(ctx, sc.StepTimeout, func() (bool, error) {
		cur := &petriv1.EphemeralEnvironment{}
		if err := s.Client.Get(ctx, client.ObjectKey{Namespace: ManagementNamespace, Name: res.Environment}, cur); err != nil {
			return false, nil
		}
		sc.w.observe(cur, s.sharedWorkload(ctx))
		if sl := cur.Status.Sleep; sl != nil && sl.Job != "" {
			sc.w.set("sleep-job", sl.Job, "%s Job %s started (as the environment's deployer identity)", sl.Action, sl.Job)
		}
		env = cur
		return cur.Status.Phase == petriv1.EnvironmentSleeping && cur.Status.Sleep != nil && cur.Status.Sleep.Asleep &&
			meta.IsStatusConditionFalse(cur.Status.Conditions, petriv1.ConditionReconciling), nil
	}, func() string { return sc.explain(ctx, res.Environment) })
	if err != nil {
		return fmt.Errorf("environment %s never fell asleep: %w", res.Environment, err)
	}
	res.Sleep.Asleep = time.Since(start)
	r.Event("environment %s asleep %.1fs after the request (job %s)", env.Name, res.Sleep.Asleep.Seconds(), env.Status.Sleep.Job)

	d, err := sc.appDeployment(ctx, res.Namespace)
	if err != nil {
		return err
	}
	res.Sleep.Recorded = d.Annotations[petriv1.AnnotationReplicasBeforeSleep]
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 0 {
		return fmt.Errorf("deployment %s/%s has %v replicas while asleep, want 0", res.Namespace, d.Name, d.Spec.Replicas)
	}
	if res.Sleep.Recorded == "" {
		return fmt.Errorf("deployment %s/%s carries no %s", res.Namespace, d.Name, petriv1.AnnotationReplicasBeforeSleep)
	}
	r.Event("deployment %s/%s: 0 replicas, %s=%s", res.Namespace, d.Name, petriv1.AnnotationReplicasBeforeSleep, res.Sleep.Recorded)
	if err := poll(ctx, sc.StepTimeout, func() (bool, error) {
		var pods corev1.PodList
		err := s.Client.List(ctx, &pods, client.InNamespace(res.Namespace), client.MatchingLabels(d.Spec.Selector.MatchLabels))
		return err == nil && len(pods.Items) == 0, nil
	}, nil); err != nil {
		return fmt.Errorf("the application's pods are not gone: %w", err)
	}
	res.Sleep.PodsGone = time.Since(start)
	r.Event("no pod of %s left %.1fs after the request", d.Name, res.Sleep.PodsGone.Seconds())
	code, _, err := httpGet(ctx, res.URL)
	if err != nil {
		return err
	}
	res.Sleep.AsleepAnswer = code
	r.Event("$ curl %s: %d while asleep", res.URL, code)
	if code == http.StatusOK {
		return fmt.Errorf("%s still answers %d while asleep", res.URL, code)
	}
	out, err := s.kubectl(ctx, "get", "ee", "-n", ManagementNamespace)
	if err != nil {
		return err
	}
	r.Event("$ kubectl get ee -n %s", ManagementNamespace)
	r.Detail(out)
	return sc.waitComment(ctx, "**Sleeping**", true)
}

// waitComment waits until the pull request's comment by sync shows (or no
// longer shows) text, and prints it.
func (sc *Scenario) waitComment(ctx context.Context, text string, shows bool) error {
	if err := poll(ctx, sc.StepTimeout, func() (bool, error) {
		return strings.Contains(sc.comment(sc.Number), text) == shows, nil
	}, func() string { return "the pull request's comment: " + sc.comment(sc.Number) }); err != nil {
		return err
	}
	sc.Report.Event("GitHub: the pull request's comment, updated in place:")
	sc.Report.Detail(sc.comment(sc.Number))
	return nil
}

// wake asks the environment to wake (kubectl annotate), waits until it is
// Ready and checks that the Deployment has its replicas back and the URL
// answers again.
func (sc *Scenario) wake(ctx context.Context, res *Result) error {
	s, r := sc.Stack, sc.Report
	at := time.Now().UTC().Format(time.RFC3339Nano)
	start := time.Now()
	args := []string{"-n", ManagementNamespace, "annotate", "ee", res.Environment, petriv1.AnnotationWakeRequested + "=" + at, "--overwrite"}
	if _, err := s.kubectl(ctx, args...); err != nil {
		return err
	}
	r.Event("$ kubectl %s", strings.Join(args, " "))
	env, err := sc.waitReady(ctx, res.Environment)
	if err != nil {
		return err
	}
	res.Sleep.Ready = time.Since(start)
	if env.Status.Sleep == nil || env.Status.Sleep.Asleep || env.Status.Sleep.WakeRequested != at {
		return fmt.Errorf("environment %s is Ready but its status.sleep does not show the wake of %s: %+v", env.Name, at, env.Status.Sleep)
	}
	r.Event("environment %s Ready %.1fs after the wake request (job %s)", env.Name, res.Sleep.Ready.Seconds(), env.Status.Sleep.Job)
	d, err := sc.appDeployment(ctx, res.Namespace)
	if err != nil {
		return err
	}
	if _, left := d.Annotations[petriv1.AnnotationReplicasBeforeSleep]; left || d.Spec.Replicas == nil || fmt.Sprint(*d.Spec.Replicas) != res.Sleep.Recorded {
		return fmt.Errorf("deployment %s/%s has %v replicas (annotations %v) after the wake, want %s and no record", res.Namespace, d.Name, d.Spec.Replicas, d.Annotations, res.Sleep.Recorded)
	}
	res.Sleep.Restored = *d.Spec.Replicas
	r.Event("deployment %s/%s: %d replicas again, as recorded", res.Namespace, d.Name, res.Sleep.Restored)
	page, err := sc.checkPage(ctx, res.URL, res.SHAs[len(res.SHAs)-1], res.Database)
	if err != nil {
		return err
	}
	res.Sleep.Answering = time.Since(start)
	res.Sleep.Page = page
	r.Event("%s answers again %.1fs after the wake request", res.URL, res.Sleep.Answering.Seconds())
	return sc.waitComment(ctx, "**Sleeping**", false)
}

// appDeployment reads the demo application's Deployment (the web
// component's) in the environment's namespace.
func (sc *Scenario) appDeployment(ctx context.Context, ns string) (*appsv1.Deployment, error) {
	d := &appsv1.Deployment{}
	if err := sc.Stack.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: demoComponent}, d); err != nil {
		return nil, fmt.Errorf("deployment %s/%s: %w", ns, demoComponent, err)
	}
	if d.Spec.Selector == nil {
		d.Spec.Selector = &metav1.LabelSelector{}
	}
	return d, nil
}
