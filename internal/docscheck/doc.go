// Package docscheck finds what README.md, docs/ and examples/ name that the
// code does not have: flags, chart values, config-repository keys, CRD
// fields, condition reasons, make targets and kubectl petri commands. The
// docs are read by a few fixed rules, so that a writer knows which words are
// checked and a reader can trust them:
//
//   - Inline code spans (`...`) and the lines of fenced blocks tagged sh,
//     bash, shell or console are read as commands. A token naming one of
//     Petri's binaries (petri-sync, bin/petri-local, ...) makes every later
//     -flag or --flag of that command one of that binary's flags;
//     "kubectl petri X" makes X a plugin command and its flags the plugin's;
//     "make A B" makes every word without "=" or a leading "-" a make target;
//     "--set a.b=c" makes a.b a chart value.
//   - An inline code span that is a flag alone (`-ui`, `--require-fences=false`)
//     must be a flag of some Petri binary. A span ending in "-" (`-gitlab-`)
//     must be the start of one.
//   - An inline code span that is a dotted path (`fences.enabled`,
//     `components[].retry`, `spec.placement.cluster`) is checked by its first
//     segment: spec. and status. against the CRDs' schemas, a top-level key
//     of the chart's values.schema.json against that schema, a top-level key
//     of a config-repository file against the sync decoder's fields. Spans
//     that end in a file extension (values.yaml) are not paths.
//   - A CamelCase code span is a condition reason on a line that says
//     "reason", and in the first column of a table whose first header says
//     "reason" (test names, Test..., excepted).
//   - Fenced blocks tagged yaml (and examples' *.yaml files) are split into
//     documents; each must parse. A document of kind Application, or of kind
//     SharedWorkload without metadata, is decoded by sync's decoder
//     (sync/config); a petri.dev custom resource is validated against its
//     CRD's schema (fields it does not know included); a chart-values block
//     (every top-level key one of the chart's) against values.schema.json.
//     Every -flag in an args: list of a YAML document must be a flag of
//     some Petri binary.
//
// Blocks without a language tag are output or prose and are not read.
// Words that look like Petri's but are another tool's are listed, each with
// its reason, in Allowed.
package docscheck
