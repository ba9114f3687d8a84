package plugin

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/petri-dev/petri/sync/render"
)

func newOpenCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "open ENV",
		Short: "Print the URL of an environment",
		Long: `Print the URL of an environment, the one shown to reviewers on the pull
request, so that a shell can open it: xdg-open "$(kubectl petri open ENV)".`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := o.environment(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			url := e.Annotations[render.AnnotationURL]
			if url == "" {
				return fmt.Errorf("environment %s has no URL (annotation %s): its application in the config repository sets none", e.Name, render.AnnotationURL)
			}
			fmt.Fprintln(o.streams.Out, url)
			return nil
		},
	}
}
