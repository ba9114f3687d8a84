package controllers

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestOwnershipProofCoversEveryPart(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	p := ownershipProof(key, "web-pr1-c0ff", "uid-1", "n1")
	assert.Len(t, p, 64)
	assert.Equal(t, p, ownershipProof(key, "web-pr1-c0ff", "uid-1", "n1"), "deterministic")
	for what, other := range map[string]string{
		"key":       ownershipProof([]byte("fedcba9876543210fedcba9876543210"), "web-pr1-c0ff", "uid-1", "n1"),
		"namespace": ownershipProof(key, "web-pr1-c0ffe", "uid-1", "n1"),
		"uid":       ownershipProof(key, "web-pr1-c0ff", "uid-2", "n1"),
		"nonce":     ownershipProof(key, "web-pr1-c0ff", "uid-1", "n2"),
		"boundary":  ownershipProof(key, "web-pr1-c0ff\x00uid-1", "", "n1"),
	} {
		assert.NotEqual(t, p, other, "a proof for another %s", what)
	}
}
