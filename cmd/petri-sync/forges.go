package main

import (
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/petri-dev/petri/sync/config"
	"github.com/petri-dev/petri/sync/provider"
	giteaprovider "github.com/petri-dev/petri/sync/provider/gitea"
	glprovider "github.com/petri-dev/petri/sync/provider/gitlab"
	"github.com/petri-dev/petri/sync/webhook"
)

// forgeFlags are the settings of one forge other than GitHub: its server,
// the file of its token and the file of its webhook secret. A forge whose
// URL is not given is not served: an application naming it is a config
// error.
type forgeFlags struct {
	name       string
	url        *string
	tokenFile  *string
	secretFile *string
	// secretsFile holds secrets per repository, owner or group.
	secretsFile *string
	timeout     *time.Duration
}

// bindForge declares -<forge>-url, -<forge>-token-file,
// -<forge>-webhook-secret-file and -<forge>-timeout.
func bindForge(fs *flag.FlagSet, name, title string) *forgeFlags {
	return &forgeFlags{
		name:        name,
		url:         fs.String(name+"-url", "", title+" server's root URL, such as https://"+name+".example.com/ (the API is found under it); unset: applications on "+title+" are config errors."),
		tokenFile:   fs.String(name+"-token-file", "", "File holding the "+title+" access token of sync's user (re-read when it changes)."),
		secretFile:  fs.String(name+"-webhook-secret-file", "", "File holding the forge-wide secret of "+title+"'s webhooks, delivered to /webhooks/"+name+": for the repositories without one of their own in -"+name+"-webhook-secrets-file."),
		secretsFile: fs.String(name+"-webhook-secrets-file", "", "YAML file of webhook secrets by repository, owner or group path (acme/shop: SECRET, acme: SECRET): a repository's deliveries must be signed with its own, its nearest owner's or group's, else the forge-wide one."),
		timeout:     fs.Duration(name+"-timeout", 15*time.Second, "Timeout of one "+title+" API request."),
	}
}

// served reports whether the forge is configured.
func (f *forgeFlags) served() bool { return *f.url != "" }

// build makes the forge's provider and the reading of its webhooks.
func (f *forgeFlags) build() (provider.Provider, webhook.Forge, error) {
	if *f.tokenFile == "" || (*f.secretFile == "" && *f.secretsFile == "") {
		return nil, webhook.Forge{}, fmt.Errorf("-%s-url needs -%s-token-file and -%s-webhook-secret-file or -%s-webhook-secrets-file", f.name, f.name, f.name, f.name)
	}
	var secret []byte
	var err error
	if *f.secretFile != "" {
		if secret, err = readSecret(*f.secretFile); err != nil {
			return nil, webhook.Forge{}, fmt.Errorf("%s webhook secret: %w", f.name, err)
		}
	}
	var secrets map[string][]byte
	if *f.secretsFile != "" {
		if secrets, err = provider.LoadWebhookSecrets(*f.secretsFile); err != nil {
			return nil, webhook.Forge{}, fmt.Errorf("-%s-webhook-secrets-file: %w", f.name, err)
		}
	}
	switch f.name {
	case config.ForgeGitea, config.ForgeForgejo:
		p, err := giteaprovider.New(giteaprovider.Options{BaseURL: *f.url, TokenFile: *f.tokenFile, HTTPClient: &http.Client{Timeout: *f.timeout}})
		if err != nil {
			return nil, webhook.Forge{}, fmt.Errorf("%s: %w", f.name, err)
		}
		return p, webhook.Gitea(f.name, secret, secrets), nil
	case config.ForgeGitLab:
		p, err := glprovider.New(glprovider.Options{BaseURL: *f.url, TokenFile: *f.tokenFile, HTTPClient: &http.Client{Timeout: *f.timeout}})
		if err != nil {
			return nil, webhook.Forge{}, fmt.Errorf("%s: %w", f.name, err)
		}
		return p, webhook.GitLab(secret, secrets), nil
	}
	return nil, webhook.Forge{}, fmt.Errorf("forge %s: no provider", f.name)
}

// forgeSet is every forge other than GitHub that sync can serve.
type forgeSet []*forgeFlags

func bindForges(fs *flag.FlagSet) forgeSet {
	return forgeSet{
		bindForge(fs, config.ForgeGitLab, "GitLab"),
		bindForge(fs, config.ForgeGitea, "Gitea"),
		bindForge(fs, config.ForgeForgejo, "Forgejo"),
	}
}

// build makes the providers and webhook readers of the forges configured.
func (set forgeSet) build() (map[string]provider.Provider, map[string]webhook.Forge, error) {
	providers, hooks := map[string]provider.Provider{}, map[string]webhook.Forge{}
	for _, f := range set {
		if !f.served() {
			continue
		}
		p, hook, err := f.build()
		if err != nil {
			return nil, nil, err
		}
		providers[f.name], hooks[f.name] = p, hook
	}
	return providers, hooks, nil
}

// readSecret reads a secret file, trimmed; an empty one is an error. The
// secret itself is never logged or put into an error.
func readSecret(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s := []byte(strings.TrimSpace(string(data)))
	if len(s) == 0 {
		return nil, errors.New("file " + path + " is empty")
	}
	return s, nil
}
