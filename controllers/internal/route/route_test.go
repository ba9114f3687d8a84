package route

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

// An object made in a workload cluster keeps no owner reference to
// Petri's resources (that cluster's garbage collector cannot see them);
// others stay.
func TestRemoteOwnershipDropsPetriOwners(t *testing.T) {
	s := runtime.NewScheme()
	require.NoError(t, petriv1.AddToScheme(s))
	env := &petriv1.EphemeralEnvironment{ObjectMeta: metav1.ObjectMeta{Name: "e", UID: "u1"}}
	obj := &petriv1.EphemeralEnvironment{}
	obj.OwnerReferences = []metav1.OwnerReference{
		*metav1.NewControllerRef(env, petriv1.GroupVersion.WithKind("EphemeralEnvironment")),
		{APIVersion: "v1", Kind: "ConfigMap", Name: "keep", UID: "u2"},
	}
	remoteOwnership(obj)
	assert.Equal(t, []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "keep", UID: "u2"}}, obj.OwnerReferences)
	assert.True(t, ownObject(s, env))
}
