package shared

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/binding"
	"github.com/petri-dev/petri/controllers/internal/naming"
	"github.com/petri-dev/petri/controllers/internal/releasebusy"
)

// LabelSharedWorkload names the SharedWorkload an object belongs to.
const LabelSharedWorkload = releasebusy.LabelSharedWorkload

// InstanceSecretName is the Secret holding a shared workload's generated
// keys, in the management namespace beside it.
func InstanceSecretName(sw *petriv1.SharedWorkload) string {
	return naming.Bounded(253, ReleaseName(sw), "instance")
}

// EnsureInstanceSecret returns the shared workload's generated keys,
// generating them the first time they are needed. The Secret is written with
// create-only semantics: a lost race reads the winner's values and never
// overwrites them, and an existing key is never changed (a key added to the
// spec later is added, optimistically locked). Reads go to the API server, not
// a cache, so a Secret created a moment ago by another reconcile is seen.
func EnsureInstanceSecret(ctx context.Context, c client.Client, reader client.Reader, scheme *runtime.Scheme, sw *petriv1.SharedWorkload) (map[string][]byte, error) {
	if sw.Spec.InstanceSecret == nil {
		return map[string][]byte{}, nil
	}
	length := int(sw.Spec.InstanceSecret.Length)
	if length == 0 {
		length = 32
	}
	key := client.ObjectKey{Namespace: sw.Namespace, Name: InstanceSecretName(sw)}
	for attempt := 0; attempt < 5; attempt++ {
		existing := &corev1.Secret{}
		err := reader.Get(ctx, key, existing)
		switch {
		case apierrors.IsNotFound(err):
			data := map[string][]byte{}
			for _, k := range sw.Spec.InstanceSecret.Keys {
				v, err := binding.Generate(length)
				if err != nil {
					return nil, err
				}
				data[k] = []byte(v)
			}
			s := &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: map[string]string{
					petriv1.LabelManagedBy: petriv1.ManagedByOperator,
					LabelSharedWorkload:    naming.LabelValue(sw.Name),
				}},
				Data: data,
			}
			if err := controllerutil.SetControllerReference(sw, s, scheme); err != nil {
				return nil, err
			}
			if _, _, ok := CopyOf(sw); ok {
				s.Labels[LabelUID] = string(sw.UID)
			}
			err = c.Create(ctx, s)
			if err == nil {
				return data, nil
			}
			if !apierrors.IsAlreadyExists(err) {
				return nil, fmt.Errorf("create instance secret %s: %w", key.Name, err)
			}
			// Lost the race: read the winner's values.
			continue
		case err != nil:
			return nil, fmt.Errorf("get instance secret %s: %w", key.Name, err)
		}
		if !ControlledBy(ctx, existing, sw) {
			return nil, fmt.Errorf("secret %s exists but is not controlled by shared workload %s; refusing to use it", key.Name, sw.Name)
		}
		var missing []string
		for _, k := range sw.Spec.InstanceSecret.Keys {
			if _, ok := existing.Data[k]; !ok {
				missing = append(missing, k)
			}
		}
		if len(missing) == 0 {
			return existing.Data, nil
		}
		if existing.Data == nil {
			existing.Data = map[string][]byte{}
		}
		for _, k := range missing {
			v, err := binding.Generate(length)
			if err != nil {
				return nil, err
			}
			existing.Data[k] = []byte(v)
		}
		if err := c.Update(ctx, existing); err != nil {
			if apierrors.IsConflict(err) {
				continue
			}
			return nil, fmt.Errorf("add keys to instance secret %s: %w", key.Name, err)
		}
		return existing.Data, nil
	}
	return nil, fmt.Errorf("instance secret %s: too many concurrent writers", key.Name)
}
