package naming

import (
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
)

// fuzzActions are the actions Jobs (and their values Secrets) are named
// after.
var fuzzActions = []string{"deploy", "undeploy", "bind", "provision", "deprovision", "values", "binding"}

// objectName turns any string into a Kubernetes object name (a DNS-1123
// subdomain), the only names the operator ever derives from: the string
// itself when it is one, otherwise its bytes mapped onto the characters
// such a name may hold. ok is false when nothing valid comes out.
func objectName(s string) (string, bool) {
	if len(validation.IsDNS1123Subdomain(s)) == 0 {
		return s, true
	}
	const chars = "abcdefghijklmnopqrstuvwxyz0123456789-."
	var b strings.Builder
	for i := range len(s) {
		b.WriteByte(chars[int(s[i])%len(chars)])
	}
	name := strings.Trim(b.String(), "-.")
	if len(name) > validation.DNS1123SubdomainMaxLength {
		name = strings.TrimRight(name[:validation.DNS1123SubdomainMaxLength], "-.")
	}
	return name, name != "" && len(validation.IsDNS1123Subdomain(name)) == 0
}

func requireLabel(t *testing.T, what, name string) {
	t.Helper()
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		t.Fatalf("%s %q is not a DNS-1123 label: %v", what, name, errs)
	}
}

func requireSubdomain(t *testing.T, what, name string) {
	t.Helper()
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		t.Fatalf("%s %q is not a DNS-1123 subdomain: %v", what, name, errs)
	}
}

// FuzzNames checks every name the operator derives: namespace candidates,
// Job names, bounded names, deployer ServiceAccount names and label values
// are valid as the API server requires, within their length limits and the
// same every time for the same inputs.
func FuzzNames(f *testing.F) {
	f.Add("shop-pr-42", "0d5a8f5e-1c2b-4c3d-9e8f-001122334455", "api", uint8(0), int64(1))
	f.Add("Shop.PR.42", "uid", "web", uint8(1), int64(2))
	f.Add(strings.Repeat("a", 57)+"-bbbb", "u", "db", uint8(2), int64(0))
	f.Add(strings.Repeat("x", 100), "u1", strings.Repeat("component", 10), uint8(4), int64(123456))
	f.Add(strings.Repeat("a.", 126)+"a", "", "release", uint8(5), int64(-9223372036854775808))
	f.Add("web.pr1", "u2", "postgres.shared", uint8(3), int64(9223372036854775807))
	f.Add("", "", "", uint8(6), int64(-1))
	f.Add("---", "\x00", "...", uint8(0), int64(1))
	f.Add("ÄÖÜ-ǅ-K", "ü", "\u212a", uint8(1), int64(1))
	f.Add("1234", "uid", "0", uint8(0), int64(1))

	f.Fuzz(func(t *testing.T, raw, uid, rawSubject string, action uint8, gen int64) {
		checkBoundedNames(t, raw, rawSubject)
		checkNamespaceCandidates(t, raw, uid)
		checkObjectNames(t, raw, uid, rawSubject, action, gen)
	})
}

// checkBoundedNames: whatever the input, label values and bounded names are
// valid.
func checkBoundedNames(t *testing.T, raw, rawSubject string) {
	lv := LabelValue(raw)
	if errs := validation.IsValidLabelValue(lv); len(errs) > 0 {
		t.Fatalf("LabelValue(%q) = %q, not a label value: %v", raw, lv, errs)
	}
	if lv != LabelValue(raw) {
		t.Fatalf("LabelValue(%q) is not deterministic", raw)
	}
	for _, max := range []int{validation.DNS1123LabelMaxLength, validation.DNS1123SubdomainMaxLength} {
		b := Bounded(max, raw, rawSubject)
		if b != Bounded(max, raw, rawSubject) {
			t.Fatalf("Bounded(%d, %q, %q) is not deterministic", max, raw, rawSubject)
		}
		if len(b) > max {
			t.Fatalf("Bounded(%d, %q, %q) = %q, %d characters", max, raw, rawSubject, b, len(b))
		}
		switch {
		case b == "":
		case max == validation.DNS1123LabelMaxLength:
			requireLabel(t, "bounded name", b)
		default:
			requireSubdomain(t, "bounded name", b)
		}
	}

}

// checkNamespaceCandidates checks the namespace candidates of any
// environment name and UID.
func checkNamespaceCandidates(t *testing.T, raw, uid string) {
	hash := UIDHash(types.UID(uid))
	candidates := NamespaceCandidates(raw, hash)
	if want := validation.DNS1123LabelMaxLength - 2 - MinHashLength + 1; len(candidates) != want {
		t.Fatalf("%d namespace candidates, want %d", len(candidates), want)
	}
	seen := map[string]bool{}
	prevPrefix := ""
	for i, c := range candidates {
		requireLabel(t, "namespace candidate", c)
		if seen[c] {
			t.Fatalf("namespace candidate %q listed twice for %q", c, raw)
		}
		seen[c] = true
		l := MinHashLength + i
		if c != NamespaceCandidate(raw, hash, l) {
			t.Fatalf("candidate %d is %q, NamespaceCandidate gives %q", l, c, NamespaceCandidate(raw, hash, l))
		}
		prefix, ok := strings.CutSuffix(c, hash[:l])
		if !ok {
			t.Fatalf("candidate %q does not end with the %d-character hash prefix %s", c, l, hash[:l])
		}
		// The readable part only ever gets shorter to make room
		// for the hash, and keeps the start of the name.
		readable := strings.TrimSuffix(prefix, "-")
		if i > 0 && !strings.HasPrefix(prevPrefix, readable) {
			t.Fatalf("candidate %q does not extend the previous one's hash: readable part %q after %q", c, readable, prevPrefix)
		}
		if prefix != "" && (!strings.HasSuffix(prefix, "-") || !strings.HasPrefix(sanitize(raw), readable)) {
			t.Fatalf("candidate %q: readable part %q is not a prefix of the name %q", c, prefix, raw)
		}
		prevPrefix = readable
	}

}

// checkObjectNames checks the names derived from object names only: Job
// names, the deployer ServiceAccount, label values and Secret names.
func checkObjectNames(t *testing.T, raw, uid, rawSubject string, action uint8, gen int64) {
	env, ok := objectName(raw)
	if !ok {
		return
	}
	subject, ok := objectName(rawSubject)
	if !ok {
		subject = "release"
	}
	act := fuzzActions[int(action)%len(fuzzActions)]

	key := JobKey{Owner: env, UID: types.UID(uid), Action: act, Subject: subject, Generation: gen}
	job := key.Name()
	requireLabel(t, "Job name", job)
	if job != key.Name() {
		t.Fatalf("%+v is not deterministic", key)
	}
	if !strings.Contains(job, "-g"+strconv.FormatInt(gen, 10)+"-") {
		t.Fatalf("Job name %q does not name generation %d", job, gen)
	}
	next := key
	next.Generation++
	if next := next.Name(); next == job {
		t.Fatalf("generations %d and %d share the Job name %q", gen, gen+1, job)
	}

	sa := DeployerServiceAccount(env)
	requireLabel(t, "deployer ServiceAccount", sa)
	requireSubdomain(t, "deployer ServiceAccount", sa)
	if sa != DeployerServiceAccount(env) {
		t.Fatalf("DeployerServiceAccount(%q) is not deterministic", env)
	}
	if errs := validation.IsValidLabelValue(LabelValue(env)); len(errs) > 0 || LabelValue(env) == "" {
		t.Fatalf("LabelValue(%q) = %q: %v", env, LabelValue(env), errs)
	}

	// The Secret names built with Bounded: a shared workload's
	// instance Secret and an environment's binding Secret.
	requireSubdomain(t, "instance Secret", Bounded(validation.DNS1123SubdomainMaxLength, env, "instance"))
	requireSubdomain(t, "binding Secret", Bounded(validation.DNS1123SubdomainMaxLength, "petri-binding", subject))
}
