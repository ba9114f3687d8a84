// Package binding renders what a shared-workload binding holds: generated
// instance keys and the per-environment keys templated from the environment.
package binding

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"sort"
	"text/template"
)

// Data is what binding templates see.
type Data struct {
	// Environment is the EphemeralEnvironment's name.
	Environment string
	// Namespace is the environment's workload namespace.
	Namespace string
	// SharedNamespace is where shared workloads run.
	SharedNamespace string
	// Hash is a short, stable hash of the environment's UID, safe in database
	// and user names.
	Hash string
}

// Render executes every template; the error names the key that failed.
func Render(templates map[string]string, d Data) (map[string]string, error) {
	keys := make([]string, 0, len(templates))
	for k := range templates {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make(map[string]string, len(templates))
	for _, k := range keys {
		t, err := template.New(k).Option("missingkey=error").Parse(templates[k])
		if err != nil {
			return nil, fmt.Errorf("binding key %s: %w", k, err)
		}
		var b bytes.Buffer
		if err := t.Execute(&b, d); err != nil {
			return nil, fmt.Errorf("binding key %s: %w", k, err)
		}
		out[k] = b.String()
	}
	return out, nil
}

// Generate returns a random, URL-safe value of n characters.
func Generate(n int) (string, error) {
	buf := make([]byte, n) // base64 of n bytes is longer than n characters
	if _, err := rand.Read(buf); err != nil {
		return "", fmt.Errorf("generate random value: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(buf)[:n], nil
}
