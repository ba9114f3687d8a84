// Command petri-deployer is the container of the Jobs the operator creates:
// it deploys or undeploys one component with the Helm SDK, or puts an
// environment's namespace to sleep or wakes it, then exits. The
// outcome is its exit code and a typed result (contract.Result, JSON of at
// most 4 KiB) as its termination message, which the operator decodes from
// the pod's status: the outcome, the reason from a closed set, whether a new
// Job may succeed, the revision a deploy made, the releases a verification
// found drifted, and a one-line "<Reason>: <detail>" message for people.
//
//	petri-deployer deploy   --release NAME --namespace NS --chart-repository REPO --chart-name NAME
//	                        --chart-version VERSION --values FILE [--wait] [--timeout 5m]
//	                        [--ca-file FILE] [--plain-http] [--termination-log /dev/termination-log]
//	petri-deployer undeploy --release NAME --namespace NS [--timeout 5m]
//	                        [--termination-log /dev/termination-log]
//	petri-deployer write-secret --namespace NS --name NAME --from-dir DIR
//	                        [--termination-log /dev/termination-log]
//	petri-deployer sleep    --namespace NS [--termination-log /dev/termination-log]
//	petri-deployer wake     --namespace NS [--wait] [--timeout 5m]
//	                        [--termination-log /dev/termination-log]
//	petri-deployer verify   --namespace NS --expect RELEASE=REVISION [--expect ...]
//	                        [--termination-log /dev/termination-log]
//
// A successful deploy writes its result with the revision it made
// ("Deployed: revision N"); other successes write nothing.
//
// verify reads each release's latest record and compares it with the
// revision its deploy reported (0: only its presence): Succeeded
// ("Verified: web=4") and exit 0, or Drifted with the releases named
// ("ReleaseMissing: web; RevisionMismatch: api 3 != 4") and exit 3.
//
// write-secret makes a Secret hold the files of a directory (a binding's
// staged Secret of the management namespace, mounted), and nothing else: a
// Secret that already holds exactly them is left as it is, so a re-run
// writes nothing and credentials written for a binding never change; one
// that holds anything else is overwritten.
//
// sleep scales every Deployment and StatefulSet of the namespace to zero and
// records each one's replica count in its petri.dev/replicas-before-sleep
// annotation; wake restores exactly those counts and removes the annotation
// (with --wait it then waits until the namespace's workloads are ready).
// Both are idempotent; a workload without the annotation is left alone.
//
// With --wait a deploy reads the release's pods while Helm waits: an image
// that cannot be pulled (ImagePullFailed), a container that crashed
// contract.CrashRestarts times (ContainerCrashed, with its last log line)
// or pods the namespace's Pod Security level refuses (KubernetesRefused)
// end it at once; a wait that times out names the pods that were not ready
// and why (Timeout, Unschedulable).
//
// Exit codes: 0 success; 1 a failure that a retry may fix (the API server
// refused or timed out, a repository was unreachable, pods not scheduled);
// 2 invalid arguments; 3 a failure no retry can fix (the chart's
// kubeVersion excludes the cluster, the templates do not render, a
// required value is missing, the values break the chart's schema, the
// release's image cannot be pulled or its container keeps crashing). The
// operator's Jobs fail at once on 2 and 3 instead of starting another pod
// (controllers/internal/jobs.DeployerFinalExitCodes).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"

	"github.com/petri-dev/petri/api/contract"
	"github.com/petri-dev/petri/deployer"
	"github.com/petri-dev/petri/internal/redact"
)

const defaultTerminationLog = "/dev/termination-log"

// Exit codes; see the package comment.
const (
	exitRetryable        = 1
	exitInvalidArguments = 2
	exitFinal            = 3
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type options struct {
	release, namespace, terminationLog string
	timeout                            time.Duration
	source                             deployer.ChartSource
	valuesFile                         string
	wait                               bool
	secretName, fromDir                string
	expect                             []deployer.Expectation
}

func run(args []string, stdout, stderr io.Writer) int {
	// The deployer's log is read by people and by sync's web page.
	log := redact.Logger(logr.FromSlogHandler(slog.NewJSONHandler(stdout, &slog.HandlerOptions{Level: slog.LevelDebug})))
	// Found before parsing, so that errors up to and including a parse error
	// are reported there too.
	preParseLog := terminationLogArg(args)
	var opts options

	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return fail(log, stderr, preParseLog, "", fmt.Errorf("%w: first argument must be the command: deploy, undeploy, write-secret, sleep, wake or verify", deployer.ErrInvalidArguments))
	}
	command := args[0]
	fs := flag.NewFlagSet("petri-deployer "+command, flag.ContinueOnError)
	fs.SetOutput(stderr)
	if command != "sleep" && command != "wake" && command != "verify" {
		fs.StringVar(&opts.release, "release", "", "Helm release name")
	}
	fs.StringVar(&opts.namespace, "namespace", "", "namespace of the release and its storage")
	opts.timeout = deployer.DefaultTimeout
	if command != "sleep" && command != "verify" {
		fs.DurationVar(&opts.timeout, "timeout", deployer.DefaultTimeout, "bound on hooks, readiness and uninstall waits")
	}
	fs.StringVar(&opts.terminationLog, "termination-log", defaultTerminationLog, "file that receives the one-line failure message")
	switch command {
	case "deploy":
		fs.StringVar(&opts.source.Repository, "chart-repository", "", "https:// chart repository, oci://host/path registry, or absolute path")
		fs.StringVar(&opts.source.Name, "chart-name", "", "chart name")
		fs.StringVar(&opts.source.Version, "chart-version", "", "exact chart version")
		fs.StringVar(&opts.valuesFile, "values", "", "YAML values file")
		fs.BoolVar(&opts.wait, "wait", false, "wait for the release's workloads to be ready")
		fs.StringVar(&opts.source.CAFile, "ca-file", "", "PEM CA bundle for https repositories and registries")
		fs.BoolVar(&opts.source.PlainHTTP, "plain-http", false, "reach the oci:// registry over plain HTTP")
	case "undeploy":
	case "write-secret":
		fs.StringVar(&opts.secretName, "name", "", "name of the Secret to create")
		fs.StringVar(&opts.fromDir, "from-dir", "", "directory whose files become the Secret's keys")
	case "sleep":
	case "wake":
		fs.BoolVar(&opts.wait, "wait", false, "wait until the namespace's Deployments and StatefulSets are ready")
	case "verify":
		fs.Func("expect", "RELEASE=REVISION whose latest record is checked (repeatable; revision 0: presence only)", func(s string) error {
			e, err := deployer.ParseExpectation(s)
			if err != nil {
				return err
			}
			opts.expect = append(opts.expect, e)
			return nil
		})
	default:
		return fail(log, stderr, preParseLog, "", fmt.Errorf("%w: unknown command %q: want deploy, undeploy, write-secret, sleep, wake or verify", deployer.ErrInvalidArguments, command))
	}
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return fail(log, stderr, preParseLog, command, fmt.Errorf("%w: %w", deployer.ErrInvalidArguments, err))
	}
	if err := validate(command, fs, opts); err != nil {
		return fail(log, stderr, opts.terminationLog, command, err)
	}

	// SIGTERM (the pod being deleted) cancels the Helm action, which then
	// records the release as failed instead of leaving it pending.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ctx = logr.NewContext(ctx, log)
	log.Info("Starting", "command", command, "release", opts.release, "namespace", opts.namespace)
	if command == "write-secret" {
		if err := deployer.WriteSecret(ctx, deployer.NewRESTClientGetter("", opts.namespace), opts.namespace, opts.secretName, opts.fromDir); err != nil {
			return fail(log, stderr, opts.terminationLog, command, err)
		}
		return 0
	}
	if command == "sleep" || command == "wake" {
		if err := scale(ctx, command, opts); err != nil {
			return fail(log, stderr, opts.terminationLog, command, err)
		}
		return 0
	}
	d, err := deployer.New(deployer.NewRESTClientGetter("", opts.namespace), opts.namespace, log)
	if err != nil {
		return fail(log, stderr, opts.terminationLog, command, err)
	}
	switch command {
	case "undeploy":
		err = d.Undeploy(ctx, opts.release, opts.timeout)
	case "verify":
		return verify(ctx, log, d, opts, stdout, stderr)
	default:
		// A repository's answer may quote its URL's credentials in a form
		// the patterns do not know.
		err = redact.Error(deploy(ctx, d, opts), redact.SecretsOf(opts.source.Repository)...)
	}
	if err != nil {
		return fail(log, stderr, opts.terminationLog, command, err)
	}
	return 0
}

// verify reports the releases' state on the termination log: a drift is a
// final failure (exit 3, one pod: running it again reads the same), a
// failure to read is retried like any other.
func verify(ctx context.Context, log logr.Logger, d *deployer.Deployer, opts options, stdout, stderr io.Writer) int {
	res, err := d.Verify(ctx, opts.expect)
	if err != nil {
		return fail(log, stderr, opts.terminationLog, "verify", err)
	}
	code := 0
	if res.Outcome == contract.OutcomeDrifted {
		code = exitFinal
		fmt.Fprintln(stderr, res.Message)
	}
	writeTerminationLog(stderr, opts.terminationLog, res)
	return code
}

// writeTerminationLog writes the result the operator decodes from the pod's
// status.
func writeTerminationLog(stderr io.Writer, path string, res contract.Result) {
	if path == "" {
		return
	}
	if err := os.WriteFile(path, []byte(contract.Encode(res)), 0o644); err != nil {
		fmt.Fprintf(stderr, "petri-deployer: cannot write termination log %s: %v\n", path, err)
	}
}

func deploy(ctx context.Context, d *deployer.Deployer, opts options) error {
	vals, err := deployer.ReadValues(opts.valuesFile)
	if err != nil {
		return err
	}
	ch, err := deployer.LoadChart(ctx, opts.source)
	if err != nil {
		return err
	}
	rel, err := d.Deploy(ctx, deployer.DeployRequest{
		Release: opts.release,
		Chart:   ch,
		Values:  vals,
		Wait:    opts.wait,
		Timeout: opts.timeout,
	})
	if err != nil {
		return err
	}
	// The operator records the revision, which a verification expects.
	writeTerminationLog(os.Stderr, opts.terminationLog, deployer.DeployedResult(rel))
	return nil
}

// scale runs sleep or wake on the namespace and logs what it changed.
func scale(ctx context.Context, command string, opts options) error {
	cs, err := deployer.NewClientset(deployer.NewRESTClientGetter("", opts.namespace))
	if err != nil {
		return err
	}
	var scaled []deployer.Scaled
	if command == "sleep" {
		scaled, err = deployer.Sleep(ctx, cs, opts.namespace)
	} else {
		scaled, err = deployer.Wake(ctx, cs, opts.namespace, deployer.WakeOptions{Wait: opts.wait, Timeout: opts.timeout})
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", command, opts.namespace, err)
	}
	changed := make([]string, 0, len(scaled))
	for _, s := range scaled {
		changed = append(changed, s.String())
	}
	logr.FromContextOrDiscard(ctx).Info("Done", "command", command, "namespace", opts.namespace, "scaled", changed)
	return nil
}

// terminationLogArg finds --termination-log in args the way flag parses it,
// or returns the default.
func terminationLogArg(args []string) string {
	path := defaultTerminationLog
	for i, a := range args {
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "termination-log" {
			continue
		}
		if hasValue {
			path = value
		} else if i+1 < len(args) {
			path = args[i+1]
		}
	}
	return path
}

func validate(command string, fs *flag.FlagSet, opts options) error {
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", deployer.ErrInvalidArguments, fs.Args())
	}
	required := map[string]string{"release": opts.release, "namespace": opts.namespace}
	switch command {
	case "write-secret":
		required = map[string]string{"namespace": opts.namespace, "name": opts.secretName, "from-dir": opts.fromDir}
	case "sleep", "wake":
		required = map[string]string{"namespace": opts.namespace}
	case "verify":
		required = map[string]string{"namespace": opts.namespace}
		if len(opts.expect) == 0 {
			return fmt.Errorf("%w: verify needs at least one --expect", deployer.ErrInvalidArguments)
		}
	}
	if command == "deploy" {
		required["chart-repository"] = opts.source.Repository
		required["chart-name"] = opts.source.Name
		required["chart-version"] = opts.source.Version
		required["values"] = opts.valuesFile
	}
	var missing []string
	fs.VisitAll(func(f *flag.Flag) {
		if v, ok := required[f.Name]; ok && v == "" {
			missing = append(missing, "--"+f.Name)
		}
	})
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s %s required", deployer.ErrInvalidArguments, command, strings.Join(missing, ", "))
	}
	if opts.timeout <= 0 {
		return fmt.Errorf("%w: --timeout must be positive", deployer.ErrInvalidArguments)
	}
	return nil
}

// fail reports err the three ways a Job's failure is seen: the termination
// log (read by the operator), stderr and the structured log. It returns the
// exit code: 2 for invalid arguments, like a shell usage error, 3 for any
// other failure no retry can fix, else 1.
func fail(log logr.Logger, stderr io.Writer, terminationLog, command string, err error) int {
	res := deployer.FailureResult(command, err)
	// The condensed message, not err: it is the redacted form.
	log.Error(nil, "Failed", "reason", res.Reason, "final", res.Reason.Final(), "retryable", res.Retryable, "message", res.Message)
	fmt.Fprintln(stderr, res.Message)
	writeTerminationLog(stderr, terminationLog, res)
	return exitCode(res.Reason)
}

func exitCode(reason contract.Reason) int {
	switch {
	case reason == contract.ReasonInvalidArguments:
		return exitInvalidArguments
	case reason.Final():
		return exitFinal
	}
	return exitRetryable
}
