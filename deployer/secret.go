package deployer

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
)

// WriteSecret makes Secret name in namespace hold the regular files of dir
// (a mounted Secret: its keys are the file names; Kubernetes' hidden ..data
// entries are skipped), and nothing else. The source is a binding's staged
// Secret, immutable, so a re-run writes nothing: a Secret that already holds
// exactly those keys and values is left as it is. One that holds anything
// else (a binding staged again without the instance keys an earlier version
// put in it) is overwritten with the directory's data.
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
	secrets := cs.CoreV1().Secrets(namespace)
	_, err = secrets.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{"app.kubernetes.io/managed-by": "petri-operator"}},
		Data:       data,
	}, metav1.CreateOptions{})
	if err == nil {
		return nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create secret %s/%s: %w", namespace, name, err)
	}
	cur, err := secrets.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get secret %s/%s: %w", namespace, name, err)
	}
	if maps.EqualFunc(cur.Data, data, bytes.Equal) {
		return nil
	}
	// The names of the keys only; never a value.
	logr.FromContextOrDiscard(ctx).Info("Secret holds other keys or values than its source, writing it again", "secret", namespace+"/"+name, "keys", slices.Sorted(maps.Keys(data)))
	cur.Data, cur.StringData = data, nil
	if _, err := secrets.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update secret %s/%s: %w", namespace, name, err)
	}
	return nil
}
