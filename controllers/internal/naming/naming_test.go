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

func job(owner, uid, action, subject string, gen int64) string {
	return JobKey{Owner: owner, UID: types.UID(uid), Action: action, Subject: subject, Generation: gen}.Name()
}

func attemptJob(owner, uid, action, subject string, gen int64, attempt int32) string {
	return JobKey{Owner: owner, UID: types.UID(uid), Action: action, Subject: subject, Generation: gen, Attempt: attempt}.Name()
}

func TestJobNames(t *testing.T) {
	a := job("a-b", "u1", "deploy", "c", 3)
	b := job("a", "u2", "deploy", "b-c", 3)
	assert.NotEqual(t, a, b, "readable parts coincide, owners differ")
	assert.Equal(t, a, job("a-b", "u1", "deploy", "c", 3), "deterministic")
	assert.NotEqual(t, a, job("a-b", "u1", "deploy", "c", 4), "per generation")
	assert.NotEqual(t, a, job("a-b", "u1", "undeploy", "c", 3), "per action")
	long := job(strings.Repeat("env", 40), "u", "deprovision", strings.Repeat("component", 10), 123456)
	assert.LessOrEqual(t, len(long), 63)
	assert.Empty(t, validation.IsDNS1123Label(long))
	assert.Contains(t, long, "-g123456-")
}

func TestAttemptJobNames(t *testing.T) {
	a := attemptJob("env", "u1", "undeploy", "web", 3, 1)
	assert.Equal(t, a, attemptJob("env", "u1", "undeploy", "web", 3, 1), "deterministic")
	assert.NotEqual(t, a, attemptJob("env", "u1", "undeploy", "web", 3, 2), "per attempt")
	assert.NotEqual(t, a, attemptJob("env", "u1", "undeploy", "web", 5, 1), "per generation: a later removal is a new step")
	assert.NotEqual(t, a, job("env", "u1", "undeploy", "web", 3), "apart from the one-Job names")
	assert.Contains(t, a, "-g3-a1-")
	long := attemptJob(strings.Repeat("env", 40), "u", "deprovision", strings.Repeat("component", 10), 123456, 2147483647)
	assert.LessOrEqual(t, len(long), 63)
	assert.Empty(t, validation.IsDNS1123Label(long))
	assert.Contains(t, long, "-g123456-a2147483647-")
}

// Every kind of Job keeps the name earlier operators gave it, so an
// upgraded operator adopts the Jobs its predecessor started; and every field
// of the key tells Jobs apart.
func TestJobKeyNames(t *testing.T) {
	u := types.UID("6f1c2a9e-0000-4000-8000-000000000001")
	k := func(action, subject string, gen int64, attempt int32) JobKey {
		return JobKey{Owner: "shop-pr-7", UID: u, Action: action, Subject: subject, Generation: gen, Attempt: attempt}
	}
	with := func(key JobKey, f func(*JobKey)) JobKey { f(&key); return key }
	tests := map[string]struct {
		key  JobKey
		want string
	}{
		"deploy":            {k("deploy", "web", 3, 0), "shop-pr-7-web-deploy-g3-370ae7cc"},
		"deploy, attempt 2": {k("deploy", "web", 3, 2), "shop-pr-7-web-deploy-g3-a2-06b60cdb"},
		"deploy, redeploy and recovery": {with(k("deploy", "web", 3, 2), func(k *JobKey) { k.Redeploy, k.Recovery = "2026-01-01T00:00:00Z", 2 }),
			"shop-pr-7-web-deploy-g3-a2-40559617"},
		"deploy, recovery": {with(k("deploy", "web", 3, 0), func(k *JobKey) { k.Recovery = 1 }), "shop-pr-7-web-deploy-g3-a8d43b17"},
		"undeploy":         {k("undeploy", "web", 3, 1), "shop-pr-7-web-undeploy-g3-a1-4ea548e7"},
		"values Secret":    {k("values", "web", 3, 0), "shop-pr-7-web-values-g3-be881cc8"},
		"staged binding":   {k("binding", "postgres", 1, 0), "shop-pr-7-postgres-binding-g1-a7f3d271"},
		"bind, recovery":   {with(k("bind", "postgres", 2, 0), func(k *JobKey) { k.Recovery = 1 }), "shop-pr-7-postgres-bind-g2-aa9b44ff"},
		"deprovision":      {k("deprovision", "postgres", 2, 3), "shop-pr-7-postgres-deprovision-g2-a3-28a849fb"},
		"sleep":            {with(k("sleep", "workloads", 3, 1), func(k *JobKey) { k.Sleep = &SleepRequest{Requested: "2026-01-01T10:00:00Z"} }), "shop-pr-7-workloads-sleep-g3-a1-ce1a7078"},
		"wake":             {with(k("wake", "workloads", 3, 2), func(k *JobKey) { k.Sleep = &SleepRequest{Requested: "2026-01-01T10:00:00Z", WokenBy: "deploy"} }), "shop-pr-7-workloads-wake-g3-a2-4a579b3c"},
		"verify":           {with(k("verify", "releases", 3, 0), func(k *JobKey) { k.Verify = &VerifyCause{Trigger: "Periodic", Key: "29532"} }), "shop-pr-7-releases-verify-g3-b4f83ea2"},
		"verify, repeated": {with(k("verify", "releases", 3, 0), func(k *JobKey) {
			k.Verify = &VerifyCause{Trigger: "DeployerAccessLost", Key: "2026-01-01T10:00:00Z", Retry: 1767261600}
		}), "shop-pr-7-releases-verify-g3-d1334493"},
	}
	seen := map[string]string{}
	for name, tt := range tests {
		got := tt.key.Name()
		assert.Equal(t, tt.want, got, name)
		assert.Equal(t, got, tt.key.Name(), "deterministic: %s", name)
		if other, ok := seen[got]; ok {
			t.Errorf("%s and %s share the name %s", name, other, got)
		}
		seen[got] = name
	}
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
