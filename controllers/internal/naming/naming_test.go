package naming

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
)

func TestNamespaceCandidate(t *testing.T) {
	hash := UIDHash("0d5a8f5e-1c2b-4c3d-9e8f-001122334455")
	cases := []struct {
		name, env string
		hashLen   int
		want      string
	}{
		{"short name", "shop-pr-42", 4, "shop-pr-42-" + hash[:4]},
		{"longer hash", "shop-pr-42", 6, "shop-pr-42-" + hash[:6]},
		{"dots and capitals", "Shop.PR.42", 4, "shop-pr-42-" + hash[:4]},
		{"long name truncated", strings.Repeat("a", 80), 4, strings.Repeat("a", 58) + "-" + hash[:4]},
		{"truncation leaves no trailing dash", strings.Repeat("a", 57) + "-bbbb", 4, strings.Repeat("a", 57) + "-" + hash[:4]},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := NamespaceCandidate(tc.env, hash, tc.hashLen)
			assert.Equal(t, tc.want, got)
			assert.Empty(t, validation.IsDNS1123Label(got))
		})
	}
}

func TestNamespaceCandidatesGrowOneCharacterAtATime(t *testing.T) {
	hash := UIDHash("uid")
	c := NamespaceCandidates(strings.Repeat("x", 100), hash)
	require.NotEmpty(t, c)
	assert.True(t, strings.HasSuffix(c[0], "-"+hash[:4]))
	assert.True(t, strings.HasSuffix(c[1], "-"+hash[:5]))
	seen := map[string]bool{}
	for _, n := range c {
		assert.Empty(t, validation.IsDNS1123Label(n), n)
		assert.False(t, seen[n], "candidates are distinct: %s", n)
		seen[n] = true
	}
}

func TestJobNames(t *testing.T) {
	a := Job("a-b", types.UID("u1"), "deploy", "c", 3)
	b := Job("a", types.UID("u2"), "deploy", "b-c", 3)
	assert.NotEqual(t, a, b, "readable parts coincide, owners differ")
	assert.Equal(t, a, Job("a-b", types.UID("u1"), "deploy", "c", 3), "deterministic")
	assert.NotEqual(t, a, Job("a-b", types.UID("u1"), "deploy", "c", 4), "per generation")
	assert.NotEqual(t, a, Job("a-b", types.UID("u1"), "undeploy", "c", 3), "per action")
	long := Job(strings.Repeat("env", 40), types.UID("u"), "deprovision", strings.Repeat("component", 10), 123456)
	assert.LessOrEqual(t, len(long), 63)
	assert.Empty(t, validation.IsDNS1123Label(long))
	assert.Contains(t, long, "-g123456-")
}

func TestAttemptJobNames(t *testing.T) {
	a := AttemptJob("env", types.UID("u1"), "undeploy", "web", 3, 1)
	assert.Equal(t, a, AttemptJob("env", types.UID("u1"), "undeploy", "web", 3, 1), "deterministic")
	assert.NotEqual(t, a, AttemptJob("env", types.UID("u1"), "undeploy", "web", 3, 2), "per attempt")
	assert.NotEqual(t, a, AttemptJob("env", types.UID("u1"), "undeploy", "web", 5, 1), "per generation: a later removal is a new step")
	assert.NotEqual(t, a, Job("env", types.UID("u1"), "undeploy", "web", 3), "apart from the one-Job names")
	assert.Contains(t, a, "-g3-a1-")
	long := AttemptJob(strings.Repeat("env", 40), types.UID("u"), "deprovision", strings.Repeat("component", 10), 123456, 2147483647)
	assert.LessOrEqual(t, len(long), 63)
	assert.Empty(t, validation.IsDNS1123Label(long))
	assert.Contains(t, long, "-g123456-a2147483647-")
}

func TestBounded(t *testing.T) {
	long := Bounded(63, "petri", strings.Repeat("x", 100))
	assert.Len(t, long, 63)
	assert.NotEqual(t, long, Bounded(63, "petri", strings.Repeat("x", 101)))
}

// Deployer identities are a pure function of the environment's name (a
// restarted operator finds the same one) and distinct for distinct names,
// also where names differ only in what a label cannot hold.
func TestDeployerServiceAccount(t *testing.T) {
	cases := []struct {
		name, env, want string
	}{
		{"plain name kept as it was", "shop", "petri-deployer-shop"},
		{"plain long name keeps its old hashed form", strings.Repeat("x", 100), Bounded(63, "petri-deployer", strings.Repeat("x", 100))},
		{"dotted name hashed", "web.pr1", "petri-deployer-web-pr1-" + hash8("web.pr1")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := DeployerServiceAccount(tc.env)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, got, DeployerServiceAccount(tc.env), "deterministic")
			assert.LessOrEqual(t, len(got), 63)
			assert.Empty(t, validation.IsDNS1123Label(got))
		})
	}
	lookalikes := [][]string{
		{"web.pr1", "web-pr1"},
		{"a.b-c", "a-b.c", "a-b-c", "a.b.c"},
		{strings.Repeat("x", 60) + ".y", strings.Repeat("x", 60) + "-y"},
	}
	for _, names := range lookalikes {
		seen := map[string]string{}
		for _, n := range names {
			sa := DeployerServiceAccount(n)
			if other, ok := seen[sa]; ok {
				t.Errorf("%q and %q share the deployer identity %s", other, n, sa)
			}
			seen[sa] = n
		}
	}
}

func hash8(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:8]
}
