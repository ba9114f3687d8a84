package plugin

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/internal/printable"
)

func newGetCommand(o *options) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "get [ENV]",
		Short: "Show environments as trees: phase, pull request, URL, namespace, cluster, components, Jobs, bindings",
		Example: `  kubectl petri get
  kubectl petri get shop-pr-42-1a2b3c
  kubectl petri get shop-pr-42-1a2b3c -o yaml`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "" && output != "json" && output != "yaml" {
				return fmt.Errorf("--output %q is not supported: use json or yaml, or leave it out for the tree", output)
			}
			ctx := cmd.Context()
			var envs []petriv1.EphemeralEnvironment
			if len(args) == 1 {
				e, err := o.environment(ctx, args[0])
				if err != nil {
					return err
				}
				envs = append(envs, *e)
			} else {
				var list petriv1.EphemeralEnvironmentList
				if err := o.client.List(ctx, &list, client.InNamespace(o.namespace)); err != nil {
					return fmt.Errorf("list environments in namespace %s: %w", o.namespace, err)
				}
				envs = list.Items
			}
			sort.Slice(envs, func(i, j int) bool { return envs[i].Name < envs[j].Name })
			views := make([]Environment, 0, len(envs))
			for i := range envs {
				views = append(views, o.view(ctx, &envs[i]))
			}
			out := o.streams.Out
			switch {
			case output == "" && len(views) == 0:
				fmt.Fprintf(out, "No environments in namespace %s.\n", o.namespace)
				return nil
			case output == "":
				for i, v := range views {
					if i > 0 {
						fmt.Fprintln(out)
					}
					printTree(out, v, time.Now())
				}
				return nil
			}
			var doc any = map[string]any{"items": views}
			if len(args) == 1 {
				doc = views[0]
			}
			data, err := json.MarshalIndent(doc, "", "  ")
			if err != nil {
				return err
			}
			if output == "yaml" {
				if data, err = yaml.JSONToYAML(data); err != nil {
					return err
				}
			} else {
				data = append(data, '\n')
			}
			_, err = out.Write(data)
			return err
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "json or yaml; the tree when left out")
	return cmd
}

// tree writes one node per call, drawing the branches.
type tree struct {
	w io.Writer
}

// line writes a node at a depth; last[i] says whether the ancestor at depth
// i (and the node itself, at the end) is the last of its siblings.
func (t tree) line(last []bool, text string) {
	var b strings.Builder
	for i, l := range last {
		switch {
		case i == len(last)-1 && l:
			b.WriteString("└─ ")
		case i == len(last)-1:
			b.WriteString("├─ ")
		case l:
			b.WriteString("   ")
		default:
			b.WriteString("│  ")
		}
	}
	// What the tree shows comes from the cluster, and in part from the
	// pull request's code (a container's last log line): a terminal
	// escape in it never reaches the user's terminal.
	fmt.Fprintln(t.w, b.String()+printable.String(text))
}

// printTree writes one environment:
//
//	shop-pr-42-1a2b3c  Ready
//	├─ pull request  #42 acme/shop (add-cart @ 1a2b3c4) https://github.com/acme/shop/pull/42
//	├─ url           http://pr-42.shop.example.com
//	├─ namespace     shop-pr-42-1a2b3c-9f
//	├─ cluster       east
//	├─ age           5m (expires in 2d)
//	├─ components
//	│  └─ web  greeter 0.1.0  Deployed  revision 2
//	│     └─ job shop-pr-42-web-deploy-g1-0c1d2e3f  pod ...-x7k2p Succeeded
//	└─ shared workloads
//	   └─ postgres  Deployed  secret petri-binding-postgres
func printTree(w io.Writer, v Environment, now time.Time) {
	t := tree{w: w}
	head := v.Name + "  " + v.Phase
	if v.Deleting && v.Phase != string(petriv1.EnvironmentDeleting) {
		head += " (deleting)"
	}
	fmt.Fprintln(w, printable.String(head))
	type field struct{ key, value string }
	var fields []field
	if v.Message != "" {
		fields = append(fields, field{"message", v.Message})
	}
	if pr := pullRequest(v); pr != "" {
		fields = append(fields, field{"pull request", pr})
	}
	url := v.URL
	if url == "" {
		url = "(none)"
	}
	fields = append(fields, field{"url", url})
	ns := v.Namespace
	if ns == "" {
		ns = "(not bound yet)"
	}
	fields = append(fields, field{"namespace", ns}, field{"cluster", v.Cluster})
	age := duration.HumanDuration(now.Sub(v.Created))
	if v.Kept {
		age += " (kept by /petri keep)"
	} else if !v.ExpiresAt.IsZero() {
		if left := v.ExpiresAt.Sub(now); left > 0 {
			age += " (expires in " + duration.HumanDuration(left) + ")"
		} else {
			age += " (expired)"
		}
	}
	fields = append(fields, field{"age", age})
	for _, warn := range v.Warnings {
		fields = append(fields, field{"warning", warn})
	}
	groups := 1
	if len(v.SharedWorkloads) > 0 {
		groups++
	}
	for _, f := range fields {
		t.line([]bool{false}, fmt.Sprintf("%-13s %s", f.key, f.value))
	}
	lastGroup := groups == 1
	t.line([]bool{lastGroup}, "components")
	for i, c := range v.Components {
		last := []bool{lastGroup, i == len(v.Components)-1}
		text := fmt.Sprintf("%s  %s  %s", c.Name, chartRef(c), c.Phase)
		if c.Revision > 0 {
			text += fmt.Sprintf("  revision %d", c.Revision)
		}
		t.line(last, text)
		details(t, last, c.Job, c.Message, c.LastError)
	}
	if len(v.SharedWorkloads) > 0 {
		t.line([]bool{true}, "shared workloads")
		for i, b := range v.SharedWorkloads {
			last := []bool{true, i == len(v.SharedWorkloads)-1}
			text := b.Name + "  " + b.Phase
			if b.Secret != "" {
				text += "  secret " + b.Secret
			}
			t.line(last, text)
			details(t, last, b.Job, b.Message, b.LastError)
		}
	}
}

// details writes the Job, message and last error under a component or
// binding.
func details(t tree, parent []bool, job *Job, message, lastError string) {
	var lines []string
	if job != nil {
		s := "job " + job.Name
		if job.Pod != "" {
			s += "  pod " + job.Pod + " " + job.PodPhase
		} else {
			s += "  (no pod)"
		}
		lines = append(lines, s)
	}
	if message != "" {
		lines = append(lines, message)
	}
	if lastError != "" {
		lines = append(lines, "error: "+lastError)
	}
	for i, l := range lines {
		t.line(append(append([]bool{}, parent...), i == len(lines)-1), l)
	}
}

func chartRef(c Component) string {
	if c.Chart == "" {
		return "(removed from the spec)"
	}
	return c.Chart + " " + c.Version
}

// pullRequest is "#42 acme/shop (branch @ sha) URL", as far as known.
func pullRequest(v Environment) string {
	var parts []string
	if v.PullRequest > 0 {
		parts = append(parts, fmt.Sprintf("#%d", v.PullRequest))
	}
	if v.Repository != "" {
		parts = append(parts, v.Repository)
	}
	if v.Branch != "" || v.SHA != "" {
		sha := v.SHA
		if len(sha) > 7 {
			sha = sha[:7]
		}
		parts = append(parts, "("+strings.TrimSuffix(strings.TrimPrefix(v.Branch+" @ "+sha, " @ "), " @ ")+")")
	}
	if v.PRURL != "" {
		parts = append(parts, v.PRURL)
	}
	return strings.Join(parts, " ")
}
