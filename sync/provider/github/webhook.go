// GitHub's webhooks: the signature check (X-Hub-Signature-256), in two
// steps so that a delivery without a well-formed signature is refused
// before its body is read. Reading the events is sync/webhook's, through
// go-github.

package github

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"

	"github.com/petri-dev/petri/sync/provider"
)

// Webhook headers GitHub sends.
const (
	HeaderEvent     = "X-GitHub-Event"
	HeaderSignature = "X-Hub-Signature-256"
	HeaderDelivery  = "X-GitHub-Delivery"
)

// SignaturePresent reports whether a delivery carries a well-formed
// X-Hub-Signature-256 ("sha256=" and 64 hexadecimal digits); one that does
// not is refused before its body is read.
func SignaturePresent(h http.Header) bool {
	_, ok := parseSignature(h.Get(HeaderSignature))
	return ok
}

// Verified reports whether body is signed (X-Hub-Signature-256, the
// HMAC-SHA256 of the body) with the secret of the repository it names
// (secrets.For; a form-encoded body's payload names it too), comparing in
// constant time: a repository with a secret of its own is never accepted
// signed with another's. Unsigned yet, only the repository's name is read
// of the body, and a body that names none is checked with the forge-wide
// secret.
func Verified(h http.Header, body []byte, secrets provider.WebhookSecrets) bool {
	sig, ok := parseSignature(h.Get(HeaderSignature))
	if !ok {
		return false
	}
	payload := body
	if bytes.HasPrefix(bytes.TrimSpace(body), []byte("payload=")) {
		if form, err := url.ParseQuery(string(body)); err == nil {
			payload = []byte(form.Get("payload"))
		}
	}
	var named struct {
		Repository struct {
			FullName string `json:"full_name"`
		} `json:"repository"`
	}
	_ = json.Unmarshal(payload, &named)
	secret := secrets.For(named.Repository.FullName)
	if len(secret) == 0 {
		return false
	}
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return hmac.Equal(sig, m.Sum(nil))
}

// parseSignature decodes "sha256=<64 hex digits>"; false for anything else.
func parseSignature(header string) ([]byte, bool) {
	hexsig, ok := strings.CutPrefix(header, "sha256=")
	if !ok || len(hexsig) != 2*sha256.Size {
		return nil, false
	}
	sig, err := hex.DecodeString(hexsig)
	return sig, err == nil
}
