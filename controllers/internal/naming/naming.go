// Package naming derives the names of the objects Petri creates: workload
// namespaces, deployer identities and Jobs. Every function is pure and every
// name is a valid, length-safe Kubernetes name.
package naming

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

const (
	// MinHashLength is the shortest hash suffix of a workload namespace.
	MinHashLength = 4
	// maxLabel is the longest DNS-1123 label (namespace names, label values).
	maxLabel = 63
)

// UIDHash is the hex SHA-256 of an environment's UID; a workload namespace
// name ends with a prefix of it.
func UIDHash(uid types.UID) string {
	sum := sha256.Sum256([]byte(uid))
	return hex.EncodeToString(sum[:])
}

// NamespaceCandidate is the workload namespace name for an environment name
// with the first hashLen characters of hash: a DNS-1123 prefix of the name,
// truncated so the whole stays within 63 characters.
func NamespaceCandidate(envName, hash string, hashLen int) string {
	if hashLen > len(hash) {
		hashLen = len(hash)
	}
	suffix := hash[:hashLen]
	prefix := truncate(sanitize(envName), maxLabel-1-len(suffix))
	if prefix == "" {
		return suffix
	}
	return prefix + "-" + suffix
}

// NamespaceCandidates lists every candidate from the shortest hash to the
// longest; binding takes the first that no namespace uses.
func NamespaceCandidates(envName, hash string) []string {
	var out []string
	maxLen := min(len(hash), maxLabel-2)
	for l := MinHashLength; l <= maxLen; l++ {
		out = append(out, NamespaceCandidate(envName, hash, l))
	}
	return out
}

// sanitize keeps what a DNS-1123 label may hold: lower-case letters, digits
// and dashes (dots become dashes).
func sanitize(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	return strings.Trim(b.String(), "-")
}

func truncate(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if len(s) > n {
		s = s[:n]
	}
	return strings.TrimRight(s, "-")
}

// Bounded returns parts joined by dashes if the result fits in max
// characters; otherwise it truncates and appends a short hash of the full name
// so distinct inputs keep distinct names.
func Bounded(max int, parts ...string) string {
	full := sanitize(strings.Join(parts, "-"))
	if len(full) <= max {
		return full
	}
	h := shortHash(full)
	return truncate(full, max-len(h)-1) + "-" + h
}

// DeployerServiceAccount names the environment's deployer identity in the
// management namespace. It depends on the name alone, so a restarted operator
// finds the identity it made. A name that is already a DNS-1123 label keeps
// the form it always had; any other (one with dots: "web.pr1", which would
// read as "web-pr1") gets a hash of the name itself appended, so that names
// differing only in what a label cannot hold keep distinct identities. The
// operator still verifies that the ServiceAccount it finds is the
// environment's own before using it.
func DeployerServiceAccount(envName string) string {
	if sanitize(envName) == envName {
		return Bounded(maxLabel, "petri-deployer", envName)
	}
	h := shortHash(envName)
	return truncate(sanitize("petri-deployer-"+envName), maxLabel-len(h)-1) + "-" + h
}

// shortHash is the first 8 hex characters of the SHA-256 of s.
func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:8]
}

// DeployerRoleBinding is the RoleBinding in the workload namespace that
// grants the deployer identity the admin ClusterRole there.
const DeployerRoleBinding = "petri-deployer"

// LabelValue fits s into a label value (63 characters, hashed if longer).
func LabelValue(s string) string {
	return Bounded(maxLabel, s)
}

// Job names the Job of one action on one subject (a component or a binding)
// of an environment at a generation. The same inputs always give the same
// name, so a restarted operator finds the Job it already created; the hash of
// the owner's UID keeps names of different owners apart even where their
// readable parts coincide.
func Job(owner string, uid types.UID, action, subject string, generation int64) string {
	return jobName(owner, uid, action, subject, "g"+strconv.FormatInt(generation, 10))
}

// AttemptJob names one attempt of a step that is retried with a new Job per
// attempt (an undeploy, a deprovision), started at a generation. Both go into
// the name: the attempt gives every retry a Job of its own, and the
// generation keeps a later step (a component removed, added back and removed
// again) from adopting an earlier step's finished Job of the same attempt.
func AttemptJob(owner string, uid types.UID, action, subject string, generation int64, attempt int32) string {
	return jobName(owner, uid, action, subject, "g"+strconv.FormatInt(generation, 10)+"-a"+strconv.FormatInt(int64(attempt), 10))
}

func jobName(owner string, uid types.UID, action, subject, tag string) string {
	sum := sha256.Sum256([]byte(strings.Join([]string{string(uid), action, subject, tag}, "/")))
	h := hex.EncodeToString(sum[:])[:8]
	readable := truncate(sanitize(strings.Join([]string{owner, subject, action}, "-")), maxLabel-len(tag)-len(h)-2)
	return readable + "-" + tag + "-" + h
}
