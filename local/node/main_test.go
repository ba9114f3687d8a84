package node_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/local/controlplane"
)

const helperImage = "petri.dev/testhelper"

var (
	env     *controlplane.Cluster
	helper  string
	scratch string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	scratch, err = os.MkdirTemp("", "localnode-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(scratch)
	bins, err := controlplane.Build(filepath.Join(scratch, "bin"), "./tests/cmd/petri-testhelper")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	helper = bins["petri-testhelper"]
	env, err = controlplane.Start(controlplane.Options{Images: map[string]string{helperImage: helper}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer env.Stop()
	return m.Run()
}

func namespace(t *testing.T) string {
	t.Helper()
	ns, err := env.CreateNamespace(context.Background(), strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")))
	require.NoError(t, err)
	return ns
}

func job(ns, name string, args ...string) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: batchv1.JobSpec{
			BackoffLimit: new(int32),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{
					Name:    "main",
					Image:   helperImage + ":v1",
					Command: []string{"/petri-testhelper"},
					Args:    args,
				}},
			}},
		},
	}
}

func jobCondition(ctx context.Context, ns, name string) func() batchv1.JobConditionType {
	return func() batchv1.JobConditionType {
		var j batchv1.Job
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &j); err != nil {
			return ""
		}
		for _, c := range j.Status.Conditions {
			if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
				return c.Type
			}
		}
		return ""
	}
}

// jobPods lists a Job's pods; an error reads as none, so it can be polled.
func jobPods(ns, name string) []corev1.Pod {
	var pods corev1.PodList
	if err := env.Client.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{"batch.kubernetes.io/job-name": name}); err != nil {
		return nil
	}
	return pods.Items
}
