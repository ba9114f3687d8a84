package githubapi

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
)

// MergeGroupSHA is the commit of the merge group that GitHub's merge queue
// builds for a pull request at its current head: a commit of its own,
// derived from the pull request's number, head and base, so that a test
// reads the statuses posted on it and its checks_requested and destroyed
// deliveries name the same group.
func (s *Server) MergeGroupSHA(repository string, number int) (string, error) {
	pr, err := s.pullRequest(repository, number)
	if err != nil {
		return "", err
	}
	sum := sha1.Sum([]byte(fmt.Sprintf("merge-group %s#%d %s %s", repository, number, pr.HeadSHA, pr.BaseRef)))
	return hex.EncodeToString(sum[:]), nil
}

// MergeGroupEvent builds the merge_group delivery of action
// (checks_requested or destroyed) for the merge group of a pull request at
// its current head (MergeGroupSHA), into its base branch, in the shape of
// GitHub's published payload.
func (s *Server) MergeGroupEvent(repository string, number int, action string) (Delivery, error) {
	pr, err := s.pullRequest(repository, number)
	if err != nil {
		return Delivery{}, err
	}
	sha, err := s.MergeGroupSHA(repository, number)
	if err != nil {
		return Delivery{}, err
	}
	return MergeGroupEvent(repository, pr.BaseRef, number, pr.HeadSHA, sha, action)
}

// pullRequest is a copy of a pull request's current state.
func (s *Server) pullRequest(repository string, number int) (PullRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pr := s.repo(repository).prs[number]
	if pr == nil {
		return PullRequest{}, fmt.Errorf("%w: %s#%d", ErrNoSuchPullRequest, repository, number)
	}
	return *pr, nil
}
