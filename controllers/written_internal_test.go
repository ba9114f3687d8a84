package controllers

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/types"
)

func TestWrittenVersionsTellAStaleCache(t *testing.T) {
	var w writtenVersions
	k := types.NamespacedName{Namespace: "petri-system", Name: "web-pr1"}
	assert.False(t, w.stale(k, "10"), "nothing written yet")
	w.remember(k, "120")
	assert.True(t, w.stale(k, "119"), "older than the last write")
	assert.True(t, w.stale(k, "99"), "compared as numbers, not strings")
	assert.False(t, w.stale(k, "120"), "the write itself")
	assert.False(t, w.stale(k, "1000"), "newer")
	assert.False(t, w.stale(types.NamespacedName{Namespace: "petri-system", Name: "other"}, "1"), "another environment")
	assert.False(t, w.stale(k, "not-a-number"), "opaque versions turn the check off")
	w.forget(k)
	assert.False(t, w.stale(k, "1"), "forgotten once gone")
}
