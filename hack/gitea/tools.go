//go:build tools

// Package gitea pins the source of the Gitea server that the forge tests and
// the local demo start. The Makefile builds it from this module into bin/.
package gitea

import (
	_ "gitea.dev"
)
