package webhook_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/petri-dev/petri/local/githubapi"
	"github.com/petri-dev/petri/sync/metrics"
	"github.com/petri-dev/petri/sync/webhook"
)

// GitHub's published merge_group payload, and the destroyed one derived
// from it, signed as GitHub signs them: each is an event naming the merge
// group's commit, its branches and the pull request its head ref names.
func TestMergeGroupFromGitHubPayloads(t *testing.T) {
	q := make(chan webhook.Event, 2)
	m := metrics.New()
	h := &webhook.Handler{Secret: key, Queue: q, Metrics: m}
	for _, action := range []string{"checks_requested", "destroyed"} {
		d, err := githubapi.Event("merge_group", action)
		require.NoError(t, err)
		rec := post(h, d.Event, "application/json", d.Body, githubapi.Sign(key, d.Body))
		require.Equal(t, http.StatusAccepted, rec.Code, "%s: %s", action, rec.Body)
		ev := <-q
		assert.Equal(t, "merge_group", ev.Type)
		assert.Equal(t, "octo-org/octo-repo", ev.Repository)
		require.NotNil(t, ev.MergeGroup)
		assert.Equal(t, webhook.MergeGroup{
			Destroyed: action == "destroyed",
			HeadSHA:   "2ffea6db159f6b6c47a24e778fb9ef40cf6b1c7d",
			HeadRef:   "refs/heads/gh-readonly-queue/main/pr-104-929f8209d40f77f4abc622a499c93a83babdbe64",
			BaseRef:   "refs/heads/main",
			Number:    104, PullRequestSHA: "929f8209d40f77f4abc622a499c93a83babdbe64",
		}, *ev.MergeGroup)
		assert.Equal(t, "2ffea6db159f6b6c47a24e778fb9ef40cf6b1c7d", ev.SHA)
	}
	assert.Equal(t, 2.0, testutil.ToFloat64(m.WebhookEvents.WithLabelValues("merge_group", "queued")))

	// Unsigned or signed with another secret: refused, as every delivery.
	d, err := githubapi.Event("merge_group", "checks_requested")
	require.NoError(t, err)
	assert.Equal(t, http.StatusUnauthorized, post(h, d.Event, "application/json", d.Body, "").Code)
	assert.Equal(t, http.StatusUnauthorized, post(h, d.Event, "application/json", d.Body, githubapi.Sign([]byte("other"), d.Body)).Code)
	assert.Empty(t, q)
}

// A merge group whose refs do not say which pull request it merges is a
// 400 that names the field; an action sync does nothing with is not.
func TestMergeGroupRefusals(t *testing.T) {
	q := make(chan webhook.Event, 1)
	h := &webhook.Handler{Secret: key, Queue: q}
	d, err := githubapi.Event("merge_group", "checks_requested")
	require.NoError(t, err)
	const ref = "refs/heads/gh-readonly-queue/main/pr-104-929f8209d40f77f4abc622a499c93a83babdbe64"
	tests := []struct{ name, from, to, field string }{
		{"not a queue branch", ref, "refs/heads/feature/x", "merge_group.head_ref"},
		{"no number", ref, "refs/heads/gh-readonly-queue/main/pr--929f8209d40f77f4abc622a499c93a83babdbe64", "merge_group.head_ref"},
		{"number zero", ref, "refs/heads/gh-readonly-queue/main/pr-0-929f8209d40f77f4abc622a499c93a83babdbe64", "merge_group.head_ref"},
		{"number too large", ref, "refs/heads/gh-readonly-queue/main/pr-99999999999-929f8209d40f77f4abc622a499c93a83babdbe64", "merge_group.head_ref"},
		{"short sha", ref, "refs/heads/gh-readonly-queue/main/pr-104-929f8209", "merge_group.head_ref"},
		{"another base", ref, "refs/heads/gh-readonly-queue/release/pr-104-929f8209d40f77f4abc622a499c93a83babdbe64", "merge_group.head_ref"},
		{"no base", ref, "refs/heads/gh-readonly-queue/pr-104-929f8209d40f77f4abc622a499c93a83babdbe64", "merge_group.head_ref"},
		{"head sha", "2ffea6db159f6b6c47a24e778fb9ef40cf6b1c7d", "HEAD", "merge_group.head_sha"},
		{"base ref", `"refs/heads/main"`, `"main"`, "merge_group.base_ref"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := []byte(strings.Replace(string(d.Body), tt.from, tt.to, 1))
			require.NotEqual(t, d.Body, body)
			rec := post(h, d.Event, "application/json", body, githubapi.Sign(key, body))
			assert.Equal(t, http.StatusBadRequest, rec.Code)
			assert.Contains(t, rec.Body.String(), tt.field)
		})
	}
	body := []byte(strings.Replace(string(d.Body), `"checks_requested"`, `"enqueued"`, 1))
	assert.Equal(t, http.StatusOK, post(h, d.Event, "application/json", body, githubapi.Sign(key, body)).Code)
	assert.Empty(t, q, "nothing refused or ignored was queued")

	// A base branch with slashes is read whole.
	n, sha, ok := webhook.ParseQueueRef("refs/heads/gh-readonly-queue/release/2.0/pr-7-929f8209d40f77f4abc622a499c93a83babdbe64")
	assert.True(t, ok)
	assert.Equal(t, 7, n)
	assert.Equal(t, "929f8209d40f77f4abc622a499c93a83babdbe64", sha)
}

// The GitHub stand-in's merge group of a pull request reads as GitHub's:
// the group's commit, the pull request's number and head, its base; its
// destroyed delivery names the same group.
func TestMergeGroupOfTheStandIn(t *testing.T) {
	gh := githubapi.New(githubapi.Options{})
	defer gh.Close()
	pr := gh.OpenPullRequest("acme/shop", githubapi.PullRequest{BaseRef: "release/2.0"})
	group, err := gh.MergeGroupSHA("acme/shop", pr.Number)
	require.NoError(t, err)
	q := make(chan webhook.Event, 1)
	h := &webhook.Handler{Secret: key, Queue: q}
	for _, action := range []string{"checks_requested", "destroyed"} {
		d, err := gh.MergeGroupEvent("acme/shop", pr.Number, action)
		require.NoError(t, err)
		rec := post(h, d.Event, "application/json", d.Body, githubapi.Sign(key, d.Body))
		require.Equal(t, http.StatusAccepted, rec.Code, "%s: %s", action, rec.Body)
		ev := <-q
		assert.Equal(t, "acme/shop", ev.Repository)
		assert.Equal(t, webhook.MergeGroup{
			Destroyed: action == "destroyed", HeadSHA: group,
			HeadRef: "refs/heads/gh-readonly-queue/release/2.0/pr-" + strconv.Itoa(pr.Number) + "-" + pr.HeadSHA,
			BaseRef: "refs/heads/release/2.0", Number: pr.Number, PullRequestSHA: pr.HeadSHA,
		}, *ev.MergeGroup)
	}
	_, err = gh.MergeGroupEvent("acme/shop", pr.Number+1, "checks_requested")
	assert.ErrorIs(t, err, githubapi.ErrNoSuchPullRequest)
}
