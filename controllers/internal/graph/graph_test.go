package graph

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// db <- api <- web, and a parallel branch cache <- worker.
var sample = []Node{
	{Name: "db"},
	{Name: "api", DependsOn: []string{"db"}},
	{Name: "web", DependsOn: []string{"api"}},
	{Name: "cache"},
	{Name: "worker", DependsOn: []string{"cache", "db"}},
}

func TestValidate(t *testing.T) {
	cases := []struct {
		name  string
		nodes []Node
		want  string
	}{
		{"valid", sample, ""},
		{"empty", nil, ""},
		{"duplicate", []Node{{Name: "a"}, {Name: "a"}}, `component "a" is listed twice`},
		{"self", []Node{{Name: "a", DependsOn: []string{"a"}}}, `component "a" depends on itself`},
		{"unknown", []Node{{Name: "a", DependsOn: []string{"b"}}}, `component "a" depends on unknown component "b"`},
		{"cycle", []Node{{Name: "a", DependsOn: []string{"c"}}, {Name: "b", DependsOn: []string{"a"}}, {Name: "c", DependsOn: []string{"b"}}}, "dependency cycle a -> c -> b -> a"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(tc.nodes)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrInvalid)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestStartable(t *testing.T) {
	cases := []struct {
		name   string
		states map[string]State
		want   []string
	}{
		{"roots start in parallel", map[string]State{}, []string{"db", "cache"}},
		{"running roots hold dependants", map[string]State{"db": Running, "cache": Running}, nil},
		{"a chain advances", map[string]State{"db": Done, "cache": Running}, []string{"api"}},
		{"all deps needed", map[string]State{"db": Done, "cache": Done, "api": Running}, []string{"worker"}},
		{"leaf last", map[string]State{"db": Done, "cache": Done, "api": Done, "worker": Done}, []string{"web"}},
		{"failure stops dependants only", map[string]State{"db": Done, "api": Failed, "cache": Done}, []string{"worker"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, Startable(sample, tc.states))
		})
	}
}

func TestBlocked(t *testing.T) {
	got := Blocked(sample, map[string]State{"db": Failed, "cache": Done})
	assert.Equal(t, map[string]string{"api": "db", "web": "db", "worker": "db"}, got)
	got = Blocked(sample, map[string]State{"db": Done, "cache": Failed, "api": Done})
	assert.Equal(t, map[string]string{"worker": "cache"}, got, "web is unaffected by the cache branch")
	assert.Empty(t, Blocked(sample, map[string]State{}))
}

func TestUndeployableRunsBackwards(t *testing.T) {
	states := map[string]State{}
	var order [][]string
	for !Complete(sample, states, Done) {
		step := Undeployable(sample, states)
		require.NotEmpty(t, step, "teardown always progresses")
		order = append(order, step)
		for _, n := range step {
			states[n] = Done
		}
	}
	assert.Equal(t, [][]string{{"worker", "web"}, {"cache", "api"}, {"db"}}, order)
	assert.Equal(t, []string{"worker"}, Undeployable(sample, map[string]State{"web": Running}), "running ones are not started again; api waits for web")
}
