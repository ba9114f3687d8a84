package deployer

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
)

// WriteSecret creates Secret name in namespace from the regular files of dir
// (a mounted Secret: its keys are the file names; Kubernetes' hidden ..data
// entries are skipped). It is create-only: a Secret that already exists is
// left unchanged, so a binding's credentials are written once and never
// rotated by a re-run.
func WriteSecret(ctx context.Context, getter genericclioptions.RESTClientGetter, namespace, name, dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("%w: read %s: %w", ErrInvalidArguments, dir, err)
	}
	data := map[string][]byte{}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") || e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return fmt.Errorf("%w: read %s: %w", ErrInvalidArguments, e.Name(), err)
		}
		data[e.Name()] = b
	}
	cfg, err := getter.ToRESTConfig()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	_, err = cs.CoreV1().Secrets(namespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{"app.kubernetes.io/managed-by": "petri-operator"}},
		Data:       data,
	}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("create secret %s/%s: %w", namespace, name, err)
	}
	return nil
}
