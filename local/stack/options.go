package stack

import "path/filepath"

// stepImages are the image prefixes provision and deprovision Jobs may run:
// the example application (the example shared workload's steps) and
// Options.StepImages.
func (s *Stack) stepImages() []string {
	return append([]string{s.Image("example-app") + ":"}, s.opts.StepImages...)
}

// deployerFiles are the directories the deployer image carries, here:
// examples/charts under /charts, and Options.DeployerFiles.
func (s *Stack) deployerFiles(root string) map[string]string {
	m := map[string]string{DeployerCharts: filepath.Join(root, "examples", "charts")}
	for in, here := range s.opts.DeployerFiles {
		m[in] = here
	}
	return m
}
