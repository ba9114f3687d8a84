package releasebusy

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

// Created remembers the last deploy or undeploy Job this operator created
// of each environment's release, until the environment is gone: a
// Release's Candidates. An environment made again under the same name has
// another UID, and nothing remembered of the one before.
type Created struct {
	mu sync.Mutex
	m  map[types.NamespacedName]createdJobs
}

type createdJobs struct {
	uid  types.UID
	jobs map[string]string // component -> Job
}

// Add remembers job as the last one created of env's component.
func (j *Created) Add(env *petriv1.EphemeralEnvironment, component, job string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	key := client.ObjectKeyFromObject(env)
	if j.m == nil {
		j.m = map[types.NamespacedName]createdJobs{}
	}
	c, ok := j.m[key]
	if !ok || c.uid != env.UID {
		c = createdJobs{uid: env.UID, jobs: map[string]string{}}
		j.m[key] = c
	}
	c.jobs[component] = job
}

// Last is the last Job created of env's component; "" when none is known.
func (j *Created) Last(env *petriv1.EphemeralEnvironment, component string) string {
	j.mu.Lock()
	defer j.mu.Unlock()
	c, ok := j.m[client.ObjectKeyFromObject(env)]
	if !ok || c.uid != env.UID {
		return ""
	}
	return c.jobs[component]
}

// Forget drops what is remembered of the environment.
func (j *Created) Forget(key types.NamespacedName) {
	j.mu.Lock()
	defer j.mu.Unlock()
	delete(j.m, key)
}
