// Command petri-sync turns the config repository and the pull requests of
// GitHub, GitLab, Gitea and Forgejo into EphemeralEnvironments and reports back on
// the pull requests. It only
// parses flags and wires the packages under sync/ together.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/internal/redact"
	"github.com/petri-dev/petri/sync/api"
	"github.com/petri-dev/petri/sync/configrepo"
	"github.com/petri-dev/petri/sync/metrics"
	"github.com/petri-dev/petri/sync/provider"
	ghprovider "github.com/petri-dev/petri/sync/provider/github"
	"github.com/petri-dev/petri/sync/resolve"
	"github.com/petri-dev/petri/sync/syncer"
	"github.com/petri-dev/petri/sync/webhook"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "petri-sync:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		namespace      = flag.String("namespace", "petri-system", "Management namespace where EphemeralEnvironments and SharedWorkloads are written.")
		repoURL        = flag.String("config-repo", "", "Config repository: https:// or ssh:// URL, git@host:path, or a local path (required).")
		repoBranch     = flag.String("config-branch", "main", "Branch of the config repository.")
		repoDir        = flag.String("config-dir", "", "Directory inside the config repository holding the config files (default: the whole repository).")
		repoInterval   = flag.Duration("config-interval", time.Minute, "How often the config repository is fetched (a push webhook fetches at once).")
		repoTokenFile  = flag.String("config-token-file", "", "File holding a token for an https config repository.")
		repoUser       = flag.String("config-username", "x-access-token", "User name sent with the config repository token.")
		repoSSHKey     = flag.String("config-ssh-key-file", "", "Private key file for an ssh config repository.")
		repoKnownHosts = flag.String("config-known-hosts-file", "", "known_hosts file verifying the ssh host (default: the user's).")
		repoCAFile     = flag.String("config-ca-file", "", "Extra CA certificates (PEM) trusted for an https config repository.")
		repoName       = flag.String("config-repo-github", "", "GitHub owner/name of the config repository, so that its push webhooks trigger a fetch (default: derived from -config-repo).")
		apiURL         = flag.String("github-api-url", ghprovider.DefaultBaseURL, "GitHub API base URL; for GitHub Enterprise Server https://HOST/api/v3/.")
		tokenFile      = flag.String("github-token-file", "", "File holding a GitHub token (re-read when it changes).")
		appID          = flag.Int64("github-app-id", 0, "GitHub App id (instead of a token).")
		installationID = flag.Int64("github-installation-id", 0, "GitHub App installation id.")
		appKeyFile     = flag.String("github-app-key-file", "", "GitHub App private key (PEM) file.")
		githubTimeout  = flag.Duration("github-timeout", 15*time.Second, "Timeout of one GitHub API request.")
		secretFile     = flag.String("webhook-secret-file", "", "File holding GitHub's webhook secret (required unless another forge is configured, or -webhook-secrets-file is given).")
		secretsFile    = flag.String("webhook-secrets-file", "", "YAML file of GitHub webhook secrets by repository or owner (acme/shop: SECRET, acme: SECRET): a repository's deliveries must be signed with its own, else its owner's, else -webhook-secret-file's.")
		forges         = bindForges(flag.CommandLine)
		resyncInterval = flag.Duration("resync-interval", 5*time.Minute, "How often every repository's open pull requests are listed again (conditional requests).")
		listen         = flag.String("listen", ":8080", "Address of the HTTP server: webhooks, read API, web page, probes, metrics.")
		workers        = flag.Int("workers", 4, "Repositories reconciled in parallel.")
		patience       = flag.Duration("comment-patience", syncer.DefaultCommentPatience, "How long a pull request's comment or commit status waits while its environment is on its way (deploying, tearing down) before the change is written all the same; a settled state (Ready, Failed, a fault named while the operator retries, torn down) is written at once (docs/sync.md#what-sync-writes-and-when).")
		eventQueue     = flag.Int("event-queue", 1024, "Accepted webhook events waiting for processing; a full queue answers 503.")
		webhookMaxBody = flag.Int64("webhook-max-body", webhook.DefaultMaxBody, "Largest webhook body accepted, in bytes; a larger one is refused with 413 (from Content-Length, before reading, when it is declared).")
		webhookReads   = flag.Int("webhook-concurrency", webhook.DefaultMaxConcurrent, "Webhook bodies read at once before their signature is checked; a delivery that finds them all taken gets 503 with Retry-After.")
		webhookTimeout = flag.Duration("webhook-read-timeout", webhook.DefaultReadTimeout, "How long reading one webhook body may take (408 after that).")
		chartCacheTTL  = flag.Duration("chart-index-ttl", time.Minute, "How long a chart repository index or tag list is trusted.")
		chartPlainHTTP = flag.Bool("chart-plain-http", false, "Talk to OCI registries over plain http.")
		chartTimeout   = flag.Duration("chart-timeout", resolve.DefaultTimeout, "Timeout of one chart repository index or OCI tag list fetch.")
		chartHosts     = flag.String("chart-allowed-hosts", "", "Comma-separated hosts (host, host:port or *.domain) that chart look-ups may reach besides a repository's own: an index's redirect or a registry's token realm there is followed; to any other host, or from https to http, it is refused.")
		leaderElect    = flag.Bool("leader-elect", true, "Run as one of several replicas: only the holder of the manager's Lease writes and reports; the others answer webhooks and record them on the repositories' Repository objects for it (docs/sync.md#high-availability).")
		leNamespace    = flag.String("leader-election-namespace", "petri-sync", "sync's own namespace: the Lease and the Repository objects webhooks are recorded on live there.")
		leIdentity     = flag.String("leader-election-id", "", "This replica's identity in the Lease (default: $POD_NAME, else the host name with a random suffix).")
		leaseDuration  = flag.Duration("leader-election-lease-duration", syncer.DefaultLeaseDuration, "How long a Lease that is not renewed keeps others from taking it (and so how long a killed leader leaves nobody acting).")
		renewDeadline  = flag.Duration("leader-election-renew-deadline", syncer.DefaultRenewDeadline, "How long the leader tries to renew before it stops acting (and exits); each renewal request gets half of it, so a slow API server costs the Lease only when it stays slow this long.")
		retryPeriod    = flag.Duration("leader-election-retry-period", syncer.DefaultRetryPeriod, "How often the Lease is tried and renewed.")
		pageFlags      = bindPage(flag.CommandLine)
		shutdownDelay  = flag.Duration("shutdown-delay", 5*time.Second, "How long a stopping replica goes on answering (webhooks included, /readyz failing) before it closes its port, so that Services and ingress controllers stop sending to it first; terminationGracePeriodSeconds must leave room for it and 15 s more (requests in flight, then the syncer's stop).")
	)
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	// Whatever sync logs (errors of forges, repositories and registries
	// included) is redacted of credentials.
	log := redact.Logger(zap.New(zap.UseFlagOptions(&zapOpts)))
	ctrl.SetLogger(log)

	if *repoURL == "" {
		return errors.New("-config-repo is required")
	}
	if *webhookMaxBody <= 0 || *webhookReads <= 0 || *webhookTimeout <= 0 {
		return errors.New("-webhook-max-body, -webhook-concurrency and -webhook-read-timeout must be positive")
	}
	if *shutdownDelay < 0 {
		return errors.New("-shutdown-delay must not be negative")
	}
	others, hooks, err := forges.build()
	if err != nil {
		return err
	}
	// Without GitHub's secret, GitHub's webhook path refuses every
	// delivery: webhooks are never accepted unsigned.
	var secret []byte
	switch {
	case *secretFile != "":
		if secret, err = readSecret(*secretFile); err != nil {
			return fmt.Errorf("webhook secret: %w", err)
		}
	case len(others) == 0 && *secretsFile == "":
		return errors.New("-webhook-secret-file is required: webhooks are never accepted unsigned")
	}
	var repoSecrets map[string][]byte
	if *secretsFile != "" {
		if repoSecrets, err = provider.LoadWebhookSecrets(*secretsFile); err != nil {
			return fmt.Errorf("-webhook-secrets-file: %w", err)
		}
	}
	for name := range others {
		log.Info("Serving forge", "forge", name)
	}

	var auth ghprovider.Auth
	switch {
	case *appID != 0:
		if *installationID == 0 || *appKeyFile == "" {
			return errors.New("-github-app-id needs -github-installation-id and -github-app-key-file")
		}
		auth = ghprovider.App(*appID, *installationID, *appKeyFile)
	case *tokenFile != "":
		auth = ghprovider.TokenFile(*tokenFile)
	default:
		log.Info("No GitHub credentials: unauthenticated API access has a very low rate limit")
	}
	m := metrics.New()
	prov, err := ghprovider.New(ghprovider.Options{BaseURL: *apiURL, Auth: auth, Observer: m, HTTPClient: &http.Client{Timeout: *githubTimeout}})
	if err != nil {
		return err
	}
	var ca []byte
	if *repoCAFile != "" {
		if ca, err = os.ReadFile(*repoCAFile); err != nil {
			return fmt.Errorf("config repository CA file: %w", err)
		}
	}
	repo, err := configrepo.New(configrepo.Options{URL: *repoURL, Branch: *repoBranch, Dir: *repoDir, TokenFile: *repoTokenFile,
		Username: *repoUser, SSHKeyFile: *repoSSHKey, KnownHostsFile: *repoKnownHosts, CABundle: ca})
	if err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := petriv1.AddToScheme(scheme); err != nil {
		return err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	configRepo := *repoName
	if configRepo == "" {
		configRepo = *repoURL
	}
	var election *syncer.LeaderElection
	if *leaderElect {
		election = &syncer.LeaderElection{Namespace: *leNamespace, Identity: *leIdentity,
			LeaseDuration: *leaseDuration, RenewDeadline: *renewDeadline, RetryPeriod: *retryPeriod}
	}
	s, err := syncer.New(syncer.Options{
		RESTConfig: cfg, Scheme: scheme, Namespace: *namespace, Provider: prov, Forges: others,
		Resolver: &resolve.Resolver{TTL: *chartCacheTTL, PlainHTTP: *chartPlainHTTP, Timeout: *chartTimeout, AllowedHosts: strings.FieldsFunc(*chartHosts, func(r rune) bool { return r == ',' || r == ' ' })},
		Config:   repo, ConfigRepository: configRepo, Metrics: m, Log: log.WithName("sync"),
		ConfigInterval: *repoInterval, ResyncInterval: *resyncInterval, Workers: *workers, EventQueue: *eventQueue,
		CommentPatience: *patience, LeaderElection: election,
	})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	hook := &webhook.Handler{Secret: secret, RepositorySecrets: repoSecrets, Forges: hooks, Queue: s.Events(), Metrics: m, MaxBody: *webhookMaxBody, MaxConcurrent: *webhookReads, ReadTimeout: *webhookTimeout}
	mux := http.NewServeMux()
	mux.Handle("/", api.Handler(s, hook, m))
	page, err := pageFlags.register(mux, s.Cache(), *namespace, cfg, log)
	if err != nil {
		return err
	}
	srv := api.Server(*listen, mux)
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	replica := api.NewReplica(srv)
	tasks := []func(context.Context) error{s.Start}
	if page != nil {
		tasks = append(tasks, page.Run)
		replica.OnDrain(page.EndStreams)
	}
	log.Info("Serving", "address", l.Addr().String())
	return replica.Run(ctx, l, api.RunOptions{Delay: *shutdownDelay, Log: log}, tasks...)
}
