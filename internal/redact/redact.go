// Package redact removes credentials from text that leaves Petri's
// processes: errors that reach a pull-request comment, a commit status, an
// object's status or conditions, an Event, the read API or a log. sync and
// the deployer both build such text from URLs (chart repositories, the
// config repository) and from what remote servers answered, and both redact
// it here, so that there is one idea of what a credential looks like.
//
// What is removed:
//   - the userinfo of any URL (scheme://user:password@host): "***@";
//   - the value of a URL query parameter, or of an assignment, whose name
//     reads like a credential (token, access_token, private_token, password,
//     secret, sig, signature, key, X-Amz-Signature, X-Amz-Credential ...):
//     "name=***";
//   - an echoed Authorization header (Authorization: Basic ..., "Bearer
//     ...", "authorization":["token ..."]): the scheme stays, the rest is
//     "***";
//   - every known secret handed to String, in plain, URL-escaped and base64
//     forms.
//
// Redacting is for text only: credentials themselves are never put into
// errors on purpose; this catches what libraries and remotes echo.
package redact

import (
	"encoding/base64"
	"net/url"
	"regexp"
	"strings"
)

// Mask replaces what is redacted.
const Mask = "***"

// minSecret is the shortest known secret replaced: a shorter one would
// blank out ordinary words and still say little.
const minSecret = 4

var (
	// suspect is in any text the patterns below would change.
	suspect = regexp.MustCompile(`(?i)://|token|secret|pass|pwd|sig|key|cred|auth|bearer|basic`)
	// userinfo is the user:password@ of a URL (also of an oci:// reference).
	userinfo = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://)[^/?#@\s"'<>]+@`)
	// credentialParam is a query parameter or an assignment whose name reads
	// like a credential, with its value: "?token=abc", "&X-Amz-Signature=...",
	// "password: hunter2", `"token": "abc"`.
	credentialParam = regexp.MustCompile(`(?i)((?:^|[?&;,\s{("'])[\w.-]*(?:token|secret|passw(?:or)?d|pwd|sig|signature|key|credentials?|auth)(?:["']?\s*[=:]\s*|=))("[^"]*"|'[^']*'|[^\s&#;,"'<>)}\]]+)`)
	// authorization is an echoed Authorization header, in text or in JSON.
	authorization = regexp.MustCompile(`(?i)((?:proxy-)?authorization["']?\s*[:=]\s*\[?\s*["']?)([^"'\]\r\n]+)`)
	// scheme is a credential after its scheme wherever it is quoted:
	// "Bearer eyJ...", "Basic dXNlcjpw...".
	scheme = regexp.MustCompile(`(?i)\b(bearer|basic)(\s+)[A-Za-z0-9\-._~+/]{8,}=*`)
)

// String returns s without credentials (see the package's comment); secrets
// are known credentials (tokens, passwords, webhook secrets) replaced
// wherever they appear.
func String(s string, secrets ...string) string {
	if len(secrets) == 0 && !suspect.MatchString(s) {
		// Most text (every log line) holds nothing the patterns match:
		// one scan instead of four.
		return s
	}
	for _, sec := range secrets {
		for _, form := range forms(sec) {
			s = strings.ReplaceAll(s, form, Mask)
		}
	}
	s = authorization.ReplaceAllStringFunc(s, func(m string) string {
		sub := authorization.FindStringSubmatch(m)
		head, rest := sub[1], sub[2]
		// The scheme (Basic, Bearer, token) stays: it tells what was sent.
		if i := strings.IndexAny(rest, " \t"); i > 0 && !strings.Contains(rest[:i], Mask) {
			return head + rest[:i+1] + Mask
		}
		return head + Mask
	})
	s = scheme.ReplaceAllString(s, "${1}${2}"+Mask)
	s = userinfo.ReplaceAllString(s, "${1}"+Mask+"@")
	s = credentialParam.ReplaceAllStringFunc(s, func(m string) string {
		sub := credentialParam.FindStringSubmatch(m)
		v := sub[2]
		if strings.Trim(v, `"'`) == Mask {
			return m
		}
		if q := v[:1]; q == `"` || q == "'" {
			return sub[1] + q + Mask + q
		}
		return sub[1] + Mask
	})
	return s
}

// forms are the ways a secret is written into text: as it is, URL-escaped
// (in a query or a userinfo), and base64 (in a Basic Authorization echo).
func forms(secret string) []string {
	secret = strings.TrimSpace(secret)
	if len(secret) < minSecret {
		return nil
	}
	out := []string{secret}
	for _, f := range []string{url.QueryEscape(secret), url.PathEscape(secret), base64.StdEncoding.EncodeToString([]byte(secret)),
		strings.TrimRight(base64.StdEncoding.EncodeToString([]byte(secret)), "=")} {
		if f != secret && len(f) >= minSecret {
			out = append(out, f)
		}
	}
	return out
}

// URL returns a URL (or an oci:// reference) fit for a message: no
// userinfo, no credential in its query.
func URL(u string) string { return String(u) }

// SecretsOf returns the credentials a URL carries: its userinfo's user and
// password and the values of its credential-like query parameters. Text
// built from the URL's answers is redacted with them as known secrets, so
// that a remote that echoes them in another form (decoded, in a sentence)
// does not carry them out.
func SecretsOf(raw string) []string {
	u, err := url.Parse(raw)
	if err != nil {
		return nil
	}
	var out []string
	if u.User != nil {
		out = append(out, u.User.Username())
		if p, ok := u.User.Password(); ok {
			out = append(out, p)
		}
	}
	for k, vs := range u.Query() {
		if credentialName(k) {
			out = append(out, vs...)
		}
	}
	return out
}

var credentialKey = regexp.MustCompile(`(?i)(token|secret|passw(or)?d|pwd|sig|signature|key|credentials?|auth)`)

func credentialName(k string) bool { return credentialKey.MatchString(k) }

// Error returns err with its message redacted and its chain kept, so that
// errors.Is and errors.As still see the sentinels and types under it. nil
// stays nil.
func Error(err error, secrets ...string) error {
	if err == nil {
		return nil
	}
	msg := String(err.Error(), secrets...)
	if msg == err.Error() {
		return err
	}
	return &redacted{msg: msg, err: err}
}

type redacted struct {
	msg string
	err error
}

func (e *redacted) Error() string { return e.msg }
func (e *redacted) Unwrap() error { return e.err }
