// Package graph answers the questions the deploy graph poses: is it valid,
// which components may start now, which are blocked by a failure, and which
// may be undeployed (dependants first). Pure functions over names.
package graph

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Node is one component and the components it depends on.
type Node struct {
	Name      string
	DependsOn []string
}

// State is where a node stands in the current pass.
type State int

// Node states as the graph sees them.
const (
	// Waiting: not started.
	Waiting State = iota
	// Running: its Job runs.
	Running
	// Done: finished successfully.
	Done
	// Failed: finished unsuccessfully.
	Failed
)

// ErrInvalid marks a graph that can never be deployed.
var ErrInvalid = errors.New("invalid deploy graph")

// Validate refuses duplicate names, unknown or self dependencies and cycles;
// the error names the problem (the cycle is spelled out).
func Validate(nodes []Node) error {
	index := map[string]Node{}
	for _, n := range nodes {
		if _, dup := index[n.Name]; dup {
			return fmt.Errorf("%w: component %q is listed twice", ErrInvalid, n.Name)
		}
		index[n.Name] = n
	}
	for _, n := range nodes {
		for _, d := range n.DependsOn {
			if d == n.Name {
				return fmt.Errorf("%w: component %q depends on itself", ErrInvalid, n.Name)
			}
			if _, ok := index[d]; !ok {
				return fmt.Errorf("%w: component %q depends on unknown component %q", ErrInvalid, n.Name, d)
			}
		}
	}
	const (
		unvisited = iota
		visiting
		visited
	)
	mark := map[string]int{}
	var stack []string
	var visit func(string) error
	visit = func(name string) error {
		switch mark[name] {
		case visiting:
			i := slices.Index(stack, name)
			cycle := append(slices.Clone(stack[i:]), name)
			return fmt.Errorf("%w: dependency cycle %s", ErrInvalid, strings.Join(cycle, " -> "))
		case visited:
			return nil
		}
		mark[name] = visiting
		stack = append(stack, name)
		for _, d := range index[name].DependsOn {
			if err := visit(d); err != nil {
				return err
			}
		}
		stack = stack[:len(stack)-1]
		mark[name] = visited
		return nil
	}
	for _, n := range nodes {
		if err := visit(n.Name); err != nil {
			return err
		}
	}
	return nil
}

// Startable lists, in spec order, the waiting nodes whose dependencies are
// all done.
func Startable(nodes []Node, states map[string]State) []string {
	var out []string
	for _, n := range nodes {
		if states[n.Name] != Waiting {
			continue
		}
		ready := true
		for _, d := range n.DependsOn {
			if states[d] != Done {
				ready = false
				break
			}
		}
		if ready {
			out = append(out, n.Name)
		}
	}
	return out
}

// Blocked maps each waiting node that can no longer start, because a
// dependency (direct or not) failed, to the name of a failed node it waits
// for.
func Blocked(nodes []Node, states map[string]State) map[string]string {
	index := map[string]Node{}
	for _, n := range nodes {
		index[n.Name] = n
	}
	memo := map[string]string{}
	var blocker func(name string, seen map[string]bool) string
	blocker = func(name string, seen map[string]bool) string {
		if b, ok := memo[name]; ok {
			return b
		}
		if seen[name] {
			return ""
		}
		seen[name] = true
		b := ""
		for _, d := range index[name].DependsOn {
			if states[d] == Failed {
				b = d
				break
			}
			if x := blocker(d, seen); x != "" {
				b = x
				break
			}
		}
		memo[name] = b
		return b
	}
	out := map[string]string{}
	for _, n := range nodes {
		if states[n.Name] != Waiting {
			continue
		}
		if b := blocker(n.Name, map[string]bool{}); b != "" {
			out[n.Name] = b
		}
	}
	return out
}

// Undeployable lists, in reverse spec order, the nodes not yet undeployed
// (state other than Done) whose dependants are all undeployed (Done): teardown
// runs the graph backwards. Running nodes are skipped.
func Undeployable(nodes []Node, undeployed map[string]State) []string {
	var out []string
	for i := len(nodes) - 1; i >= 0; i-- {
		n := nodes[i]
		if s := undeployed[n.Name]; s == Done || s == Running {
			continue
		}
		free := true
		for _, other := range nodes {
			if slices.Contains(other.DependsOn, n.Name) && undeployed[other.Name] != Done {
				free = false
				break
			}
		}
		if free {
			out = append(out, n.Name)
		}
	}
	return out
}

// Complete reports whether every node is in state s.
func Complete(nodes []Node, states map[string]State, s State) bool {
	for _, n := range nodes {
		if states[n.Name] != s {
			return false
		}
	}
	return true
}
