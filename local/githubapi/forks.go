package githubapi

import (
	"strings"
)

// Pull requests from forks: on a public repository anyone can fork it and
// open a pull request from their fork's branch. The pull request's head
// then names the fork (head.repo.full_name, head.repo.fork, head.label
// "<fork owner>:<branch>"); its author is the fork's owner, who has no
// access to the repository itself unless given it.

// headRepository is the full name of the repository the head branch is in.
func headRepository(pr PullRequest) string {
	if pr.HeadRepository != "" {
		return pr.HeadRepository
	}
	return pr.Repository
}

// headOwner is the owner of the head's repository, as head.label names it.
func headOwner(pr PullRequest) string {
	owner, _, _ := strings.Cut(headRepository(pr), "/")
	return owner
}

// headRepoJSON is head.repo of a pull request.
func headRepoJSON(pr PullRequest) map[string]any {
	full := headRepository(pr)
	owner, name, _ := strings.Cut(full, "/")
	return map[string]any{
		"full_name": full, "name": name, "owner": map[string]any{"login": owner},
		"fork": !strings.EqualFold(full, pr.Repository),
	}
}
