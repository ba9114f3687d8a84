// Package forge holds what the GitHub and Gitea providers do the same way:
// the token file read again when it changes (token.go), the refusal of
// calls while an announced rate limit lasts (ratelimit.go), the identity
// learnt once and the one comment sync keeps on a pull request, found by
// its marker and its author, edited in place and written again when it was
// deleted (comment.go).
package forge

import (
	"fmt"
	"strings"
)

// SplitRepository splits "owner/name".
func SplitRepository(repository string) (string, string, error) {
	owner, name, ok := strings.Cut(repository, "/")
	if !ok || owner == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("repository %q is not owner/name", repository)
	}
	return owner, name, nil
}
