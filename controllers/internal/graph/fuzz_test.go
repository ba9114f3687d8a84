package graph

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// fuzzNames is the alphabet of component names: more names than the
// largest graph has nodes, so fuzzed graphs also name unknown components.
var fuzzNames = []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"}

// byteSource hands out the fuzz input a byte at a time, then zeros.
type byteSource []byte

func (s *byteSource) next() int {
	if len(*s) == 0 {
		return 0
	}
	b := (*s)[0]
	*s = (*s)[1:]
	return int(b)
}

// buildGraph reads up to eight nodes, each with a name and up to three
// dependencies, from the input.
func buildGraph(src *byteSource) []Node {
	nodes := make([]Node, src.next()%9)
	for i := range nodes {
		nodes[i].Name = fuzzNames[src.next()%len(fuzzNames)]
		for range src.next() % 4 {
			nodes[i].DependsOn = append(nodes[i].DependsOn, fuzzNames[src.next()%len(fuzzNames)])
		}
	}
	return nodes
}

// problem is what is wrong with a graph, checked in the order Validate
// reports problems: duplicates, then self or unknown dependencies, then
// cycles.
func problem(nodes []Node) string {
	index := map[string]Node{}
	for _, n := range nodes {
		if _, dup := index[n.Name]; dup {
			return "listed twice"
		}
		index[n.Name] = n
	}
	for _, n := range nodes {
		for _, d := range n.DependsOn {
			if d == n.Name {
				return "depends on itself"
			}
			if _, ok := index[d]; !ok {
				return "depends on unknown component"
			}
		}
	}
	// A node is on a cycle if it can reach itself.
	for _, n := range nodes {
		if slices.Contains(reachable(nodes, n.Name), n.Name) {
			return "dependency cycle"
		}
	}
	return ""
}

// reachable lists the nodes reachable from name along dependsOn edges,
// through at least one edge.
func reachable(nodes []Node, name string) []string {
	deps := map[string][]string{}
	for _, n := range nodes {
		deps[n.Name] = append(deps[n.Name], n.DependsOn...)
	}
	seen := map[string]bool{}
	stack := slices.Clone(deps[name])
	for len(stack) > 0 {
		d := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[d] {
			continue
		}
		seen[d] = true
		stack = append(stack, deps[d]...)
	}
	var out []string
	for d := range seen {
		out = append(out, d)
	}
	return out
}

func hasEdge(nodes []Node, from, to string) bool {
	for _, n := range nodes {
		if n.Name == from && slices.Contains(n.DependsOn, to) {
			return true
		}
	}
	return false
}

// checkStep checks Startable, Blocked and Undeployable against their
// definitions for one state of a valid graph.
func checkStep(t *testing.T, nodes []Node, states map[string]State) {
	t.Helper()
	var startable []string
	for _, n := range nodes {
		if states[n.Name] != Waiting {
			continue
		}
		ready := true
		for _, d := range n.DependsOn {
			ready = ready && states[d] == Done
		}
		if ready {
			startable = append(startable, n.Name)
		}
	}
	if got := Startable(nodes, states); !slices.Equal(got, startable) {
		t.Fatalf("Startable(%v, %v) = %v, want the waiting nodes whose dependencies are done, in spec order: %v", nodes, states, got, startable)
	}

	blocked := Blocked(nodes, states)
	for _, n := range nodes {
		var failed []string
		for _, d := range reachable(nodes, n.Name) {
			if states[d] == Failed {
				failed = append(failed, d)
			}
		}
		b, ok := blocked[n.Name]
		switch {
		case states[n.Name] != Waiting && ok:
			t.Fatalf("Blocked lists %s, which is not waiting (%v)", n.Name, states[n.Name])
		case states[n.Name] != Waiting:
		case ok != (len(failed) > 0):
			t.Fatalf("Blocked(%v, %v) says %s blocked by %q; failed dependencies (direct or not): %v", nodes, states, n.Name, b, failed)
		case ok && !slices.Contains(failed, b):
			t.Fatalf("Blocked names %q for %s, which is not a failed dependency of it (%v)", b, n.Name, failed)
		}
	}
	for name := range blocked {
		if !slices.ContainsFunc(nodes, func(n Node) bool { return n.Name == name }) {
			t.Fatalf("Blocked lists %s, which is not a node", name)
		}
	}

	var undeployable []string
	for i := len(nodes) - 1; i >= 0; i-- {
		n := nodes[i]
		if s := states[n.Name]; s == Done || s == Running {
			continue
		}
		free := true
		for _, other := range nodes {
			if slices.Contains(other.DependsOn, n.Name) && states[other.Name] != Done {
				free = false
			}
		}
		if free {
			undeployable = append(undeployable, n.Name)
		}
	}
	if got := Undeployable(nodes, states); !slices.Equal(got, undeployable) {
		t.Fatalf("Undeployable(%v, %v) = %v, want %v", nodes, states, got, undeployable)
	}
}

// FuzzGraph builds deploy graphs from the input and checks validation
// against an independent cycle search, then drives a deploy and a teardown
// with the input choosing which startable node starts and which running
// node finishes (and how).
func FuzzGraph(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{1, 0, 0})
	// d <- a <- b, c <- e(c, d): the shape of the unit tests' sample.
	f.Add([]byte{5, 3, 0, 0, 1, 3, 1, 1, 0, 2, 0, 4, 2, 2, 3, 0, 0, 1, 2, 4, 1, 3, 1, 0, 1, 1, 1, 2, 0, 1, 0, 1, 0, 1, 0})
	f.Add([]byte{2, 0, 1, 1, 1, 1, 0})          // a <-> b
	f.Add([]byte{1, 0, 1, 0})                   // a -> a
	f.Add([]byte{2, 0, 0, 0, 0})                // a listed twice
	f.Add([]byte{1, 0, 1, 9})                   // a -> unknown j
	f.Add([]byte{3, 0, 1, 2, 1, 1, 0, 2, 1, 1}) // a -> c -> b -> a
	f.Add([]byte{8, 0, 0, 1, 1, 0, 2, 1, 1, 3, 1, 2, 4, 1, 3, 5, 1, 4, 6, 1, 5, 7, 1, 6, 255, 254, 3, 3, 3, 3})
	f.Add([]byte{4, 0, 0, 1, 1, 0, 2, 1, 0, 3, 2, 1, 2, 1, 2, 3, 3, 3, 1, 3, 3})

	f.Fuzz(func(t *testing.T, data []byte) {
		src := byteSource(data)
		nodes := buildGraph(&src)
		if !checkValidation(t, nodes, &src) {
			return
		}
		// Any state at all: the answers match their definitions.
		arbitrary := map[string]State{}
		for _, n := range nodes {
			arbitrary[n.Name] = State(src.next() % 4)
		}
		checkStep(t, nodes, arbitrary)

		checkDeployPass(t, nodes, &src)
		checkTeardownPass(t, nodes, &src)
	})
}

// checkValidation compares Validate with an independent search; for a graph
// that is not valid it asks the other questions anyway (no panic, no hang)
// and reports false.
func checkValidation(t *testing.T, nodes []Node, src *byteSource) bool {

	want := problem(nodes)
	err := Validate(nodes)
	if (err == nil) != (want == "") {
		t.Fatalf("Validate(%v) = %v, want problem %q", nodes, err, want)
	}
	if err != nil {
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Fatalf("Validate(%v) = %v, want ErrInvalid naming %q", nodes, err, want)
		}
		if want == "dependency cycle" {
			// The spelled-out cycle is a real one.
			_, spelled, _ := strings.Cut(err.Error(), "dependency cycle ")
			cycle := strings.Split(spelled, " -> ")
			if len(cycle) < 3 || cycle[0] != cycle[len(cycle)-1] {
				t.Fatalf("cycle %q does not return to its start", spelled)
			}
			for i := 0; i+1 < len(cycle); i++ {
				if !hasEdge(nodes, cycle[i], cycle[i+1]) {
					t.Fatalf("cycle %q: %s does not depend on %s in %v", spelled, cycle[i], cycle[i+1], nodes)
				}
			}
		}
		// The other questions must still be answered, without panic
		// or hang, even for a graph that can never be deployed.
		states := map[string]State{}
		for _, n := range nodes {
			states[n.Name] = State(src.next() % 4)
		}
		Startable(nodes, states)
		Blocked(nodes, states)
		Undeployable(nodes, states)
		return false
	}

	return true
}

// checkDeployPass drives a deploy with the input choosing which startable
// node starts and which running node finishes (and how).
func checkDeployPass(t *testing.T, nodes []Node, src *byteSource) {
	states := map[string]State{}
	started := map[string]int{}
	finished := map[string]int{}
	for step := 1; ; step++ {
		if step > 4*len(nodes)+2 {
			t.Fatalf("deploy of %v makes no progress: %v", nodes, states)
		}
		checkStep(t, nodes, states)
		startable := Startable(nodes, states)
		var running []string
		for _, n := range nodes {
			if states[n.Name] == Running {
				running = append(running, n.Name)
			}
		}
		if len(startable) == 0 && len(running) == 0 {
			break
		}
		c := src.next()
		if len(running) == 0 || (len(startable) > 0 && c%2 == 0) {
			name := startable[(c/2)%len(startable)]
			for _, n := range nodes {
				if n.Name != name {
					continue
				}
				for _, d := range n.DependsOn {
					if states[d] != Done {
						t.Fatalf("%s started while its dependency %s is %v", name, d, states[d])
					}
				}
			}
			states[name] = Running
			started[name] = step
			continue
		}
		name := running[(c/2)%len(running)]
		states[name] = Done
		if c%16 == 15 {
			states[name] = Failed
		}
		finished[name] = step
	}
	failed := slices.ContainsFunc(nodes, func(n Node) bool { return states[n.Name] == Failed })
	if !failed && !Complete(nodes, states, Done) {
		t.Fatalf("deploy of %v stopped without a failure before every node was done: %v", nodes, states)
	}
	blocked := Blocked(nodes, states)
	for _, n := range nodes {
		switch states[n.Name] {
		case Waiting:
			if _, ok := blocked[n.Name]; !ok {
				t.Fatalf("deploy stopped with %s waiting but not blocked: %v", n.Name, states)
			}
		case Done, Failed:
			for _, d := range n.DependsOn {
				if states[d] != Done || finished[d] >= started[n.Name] {
					t.Fatalf("%s (started at step %d) ran before its dependency %s was done (step %d)", n.Name, started[n.Name], d, finished[d])
				}
			}
		default:
			t.Fatalf("deploy stopped with %s %v", n.Name, states[n.Name])
		}
	}
}

// checkTeardownPass drives a teardown: dependants are undeployed before
// what they depend on starts undeploying.
func checkTeardownPass(t *testing.T, nodes []Node, src *byteSource) {
	undeployed := map[string]State{}
	started, finished := map[string]int{}, map[string]int{}
	for step := 1; ; step++ {
		if step > 2*len(nodes)+2 {
			t.Fatalf("teardown of %v makes no progress: %v", nodes, undeployed)
		}
		checkStep(t, nodes, undeployed)
		free := Undeployable(nodes, undeployed)
		var running []string
		for _, n := range nodes {
			if undeployed[n.Name] == Running {
				running = append(running, n.Name)
			}
		}
		if len(free) == 0 && len(running) == 0 {
			break
		}
		c := src.next()
		if len(running) == 0 || (len(free) > 0 && c%2 == 0) {
			name := free[(c/2)%len(free)]
			undeployed[name] = Running
			started[name] = step
			continue
		}
		name := running[(c/2)%len(running)]
		undeployed[name] = Done
		finished[name] = step
	}
	if !Complete(nodes, undeployed, Done) {
		t.Fatalf("teardown of %v stopped before every node was undeployed: %v", nodes, undeployed)
	}
	for _, n := range nodes {
		for _, d := range n.DependsOn {
			if finished[n.Name] >= started[d] {
				t.Fatalf("%s started undeploying (step %d) before its dependant %s was undeployed (step %d)", d, started[d], n.Name, finished[n.Name])
			}
		}
	}
}
