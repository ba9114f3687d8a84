package provider

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"sigs.k8s.io/yaml"
)

// WebhookSecrets are one forge's webhook secrets. A forge-wide secret
// (Default) is known to every repository admin who installs a hook with
// it, and any of them could sign deliveries for every other repository;
// a repository (or its owner, or on GitLab its group) that has a secret of
// its own is checked with that one only.
type WebhookSecrets struct {
	// Default is the secret of repositories without one of their own or
	// of an owner of theirs; nil: such deliveries are refused.
	Default []byte
	// ByPath holds secrets by repository path (owner/name; GitLab's
	// group/subgroup/project) or by an owner's or group's path, in lower
	// case.
	ByPath map[string][]byte
}

// For is the secret repository's deliveries are signed with: its own, else
// that of its nearest owner or group, else Default.
func (s WebhookSecrets) For(repository string) []byte {
	p := strings.Trim(strings.ToLower(repository), "/")
	for p != "" {
		if secret, ok := s.ByPath[p]; ok {
			return secret
		}
		i := strings.LastIndexByte(p, '/')
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return s.Default
}

// Empty says there is no secret at all: every delivery is refused.
func (s WebhookSecrets) Empty() bool { return len(s.Default) == 0 && len(s.ByPath) == 0 }

// Any reports whether ok holds for one of the secrets (a check that may be
// made before a delivery's repository is known).
func (s WebhookSecrets) Any(ok func(secret []byte) bool) bool {
	if len(s.Default) > 0 && ok(s.Default) {
		return true
	}
	for _, secret := range s.ByPath {
		if ok(secret) {
			return true
		}
	}
	return false
}

// LoadWebhookSecrets reads a file of secrets by path, a YAML (or JSON)
// mapping such as
//
//	acme/shop: 2f6c…       # one repository
//	acme: 9b1d…            # every repository of an owner (GitLab: a group)
//
// Paths are matched in any case. An empty secret, a path that is not a
// path, or a path given twice is an error naming it; no secret is ever in
// an error.
func LoadWebhookSecrets(file string) (map[string][]byte, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var raw map[string]string
	if err := yaml.UnmarshalStrict(data, &raw); err != nil {
		return nil, fmt.Errorf("%s: not a mapping of repository or owner paths to secrets: %w", file, redactYAML(err))
	}
	out := make(map[string][]byte, len(raw))
	for path, secret := range raw {
		key := strings.ToLower(strings.TrimSpace(path))
		switch {
		case key == "" || strings.HasPrefix(key, "/") || strings.HasSuffix(key, "/") || strings.Contains(key, "//") || strings.ContainsAny(key, " \t"):
			return nil, fmt.Errorf("%s: %q is not a repository, owner or group path (owner/name, owner, group/subgroup)", file, path)
		case strings.TrimSpace(secret) == "":
			return nil, fmt.Errorf("%s: the secret of %s is empty", file, path)
		}
		if _, dup := out[key]; dup {
			return nil, fmt.Errorf("%s: %s is given twice (paths are matched in any case)", file, path)
		}
		out[key] = []byte(strings.TrimSpace(secret))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no secrets", file)
	}
	return out, nil
}

// redactYAML keeps the decoder's complaint but not the text it quotes,
// which may be a secret.
func redactYAML(err error) error {
	msg := err.Error()
	if i := strings.Index(msg, ": "); i >= 0 && strings.Contains(msg[i:], "cannot unmarshal") {
		return errors.New("a value is not a string")
	}
	if strings.Contains(msg, "line ") {
		// "error converting YAML to JSON: yaml: line 3: ..." names the line.
		if i := strings.Index(msg, "line "); i >= 0 {
			j := strings.IndexByte(msg[i:], ':')
			if j > 0 {
				return errors.New(msg[i:i+j] + ": not valid YAML")
			}
		}
	}
	return errors.New("not valid YAML")
}
