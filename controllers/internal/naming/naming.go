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

// JobKey is what makes one Job of an owner (an environment, a shared
// workload) the Job it is. Its Name is a pure function of it: a restarted
// operator derives the name of the Job it already started and adopts it,
// and a key that differs in any field names another Job.
type JobKey struct {
	// Owner and UID are the owner's name (the readable part) and UID (the
	// hash keeps owners apart where readable parts coincide).
	Owner string
	UID   types.UID
	// Action is the Job's action; Subject is what it acts on: a component,
	// a binding, "releases" or "workloads".
	Action, Subject string
	// Generation is the owner's generation the step started at.
	Generation int64
	// Attempt numbers the Jobs of a step retried with a new Job per attempt;
	// 0 is a step's one Job (the first deploy attempt), which has no attempt
	// in its name.
	Attempt int32
	// Redeploy is the honoured petri.dev/redeploy request a deploy belongs
	// to; "" for none.
	Redeploy string
	// Recovery counts the times the owner's lost workloads were deployed
	// again; 0 for none.
	Recovery int32
	// SharedRecovery is, for a binding's provision step, the count of
	// recoveries of the shared workload it provisions in; 0 for none.
	SharedRecovery int32
	// Sleep is the request a sleep or wake Job answers.
	Sleep *SleepRequest
	// Verify is what started a verify Job.
	Verify *VerifyCause
}

// SleepRequest is the request a sleep or wake Job answers: the honoured
// petri.dev/sleep-requested value and, for a wake, what woke it (the
// petri.dev/wake-requested value, or "deploy").
type SleepRequest struct {
	Requested, WokenBy string
}

// VerifyCause is what started a verify Job: its trigger, the period or the
// moment it belongs to, and for a check repeated after one that could not
// tell, the Unix second that one finished.
type VerifyCause struct {
	Trigger, Key string
	Retry        int64
}

// Name is the Job's name: the readable owner, subject and action, the
// generation and attempt, and a hash of the whole key. The key is hashed in
// the layout names always had, so an upgraded operator adopts the Jobs an
// earlier one started.
func (k JobKey) Name() string {
	id := string(k.UID)
	if k.Redeploy != "" {
		id += "/redeploy/" + k.Redeploy
	}
	if k.Recovery != 0 {
		id += "/recovery/" + strconv.Itoa(int(k.Recovery))
	}
	if k.SharedRecovery != 0 {
		id += "/shared-recovery/" + strconv.Itoa(int(k.SharedRecovery))
	}
	if k.Sleep != nil {
		id += "/" + k.Action + "/" + k.Sleep.Requested
		if k.Sleep.WokenBy != "" {
			id += "/" + k.Sleep.WokenBy
		}
	}
	if k.Verify != nil {
		id += "/verify/" + k.Verify.Trigger + "/" + k.Verify.Key
		if k.Verify.Retry != 0 {
			id += "/retry/" + strconv.FormatInt(k.Verify.Retry, 10)
		}
	}
	tag := "g" + strconv.FormatInt(k.Generation, 10)
	if k.Attempt > 0 {
		tag += "-a" + strconv.FormatInt(int64(k.Attempt), 10)
	}
	return jobName(k.Owner, id, k.Action, k.Subject, tag)
}

func jobName(owner, id, action, subject, tag string) string {
	sum := sha256.Sum256([]byte(strings.Join([]string{id, action, subject, tag}, "/")))
	h := hex.EncodeToString(sum[:])[:8]
	readable := truncate(sanitize(strings.Join([]string{owner, subject, action}, "-")), maxLabel-len(tag)-len(h)-2)
	return readable + "-" + tag + "-" + h
}
