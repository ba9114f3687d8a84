// Package binding renders what a shared-workload binding holds: the keys
// templated from the environment and the keys generated for it. A binding
// holds the environment's own credentials only; the shared workload's
// instance keys are never part of it.
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

// Stage returns the data of an environment's staged binding: the rendered
// keys and the keys generated for this binding (length characters each),
// and nothing else. An existing staged binding keeps its values for those
// keys, so a binding staged again keeps the credentials its provision step
// used; a key it lacks is added, and a key that is neither rendered nor
// generated (an instance key staged by an earlier version) is left out.
// changed reports whether the result differs from existing, that is,
// whether existing has to be written again.
func Stage(existing map[string][]byte, rendered map[string]string, generated []string, length int) (data map[string][]byte, changed bool, err error) {
	data = make(map[string][]byte, len(rendered)+len(generated))
	for k, v := range rendered {
		data[k] = []byte(v)
	}
	for _, k := range generated {
		v, err := Generate(length)
		if err != nil {
			return nil, false, err
		}
		data[k] = []byte(v)
	}
	changed = existing == nil || len(existing) != len(data)
	for k := range data {
		if v, ok := existing[k]; ok {
			data[k] = v
		} else {
			changed = true
		}
	}
	return data, changed, nil
}

// Generate returns a random, URL-safe value of n characters.
func Generate(n int) (string, error) {
	buf := make([]byte, n) // base64 of n bytes is longer than n characters
	if _, err := rand.Read(buf); err != nil {
		return "", fmt.Errorf("generate random value: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(buf)[:n], nil
}
