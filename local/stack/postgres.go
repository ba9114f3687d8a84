package stack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/examples/postgres/pgbinding"
	"github.com/petri-dev/petri/examples/postgres/pgserver"
	"github.com/petri-dev/petri/local/controlplane"
)

// Binaries and images of examples/postgres: the server (Debian's PostgreSQL
// binaries behind petri-postgres), the provision and deprovision steps, and
// the notes application.
const (
	BinPostgres        = "petri-postgres"
	BinPostgresTools   = "petri-postgres-tools"
	BinPostgresNotes   = "petri-postgres-notes"
	PostgresImage      = "petri.dev/postgres"
	PostgresToolsImage = "petri.dev/postgres-tools"
	PostgresNotesImage = "petri.dev/postgres-notes"

	postgresWorkload    = "postgres"
	postgresApplication = "notes"
	postgresBinding     = "petri-binding-postgres"
)

// PostgresPackages lists the packages (directories of the repository) that
// build BinPostgres, BinPostgresTools and BinPostgresNotes.
var PostgresPackages = []string{"./examples/postgres/cmd/petri-postgres", "./examples/postgres/cmd/petri-postgres-tools", "./examples/postgres/cmd/petri-postgres-notes"}

// WithPostgres sets opts up for examples/postgres: its config repository
// (the notes application bound to one PostgreSQL server), the images the
// local node plays with bins, the charts the deployer image carries, and the
// step image the admission fences must allow. It fails, saying how to
// install them, when PostgreSQL's server binaries are missing.
func WithPostgres(opts *Options, bins map[string]string) error {
	if _, err := pgserver.Bindir(); err != nil {
		return err
	}
	root, err := controlplane.RepoRoot()
	if err != nil {
		return err
	}
	if opts.Images == nil {
		opts.Images = map[string]string{}
	}
	for image, bin := range map[string]string{PostgresImage: BinPostgres, PostgresToolsImage: BinPostgresTools, PostgresNotesImage: BinPostgresNotes} {
		if _, err := os.Stat(bins[bin]); err != nil {
			return fmt.Errorf("binary %s: %w (make build builds it)", bin, err)
		}
		opts.Images[image] = bins[bin]
	}
	if opts.DeployerFiles == nil {
		opts.DeployerFiles = map[string]string{}
	}
	for _, c := range []string{"postgres", "postgres-notes"} {
		opts.DeployerFiles[DeployerCharts+"/"+c] = filepath.Join(root, "examples", "postgres", "charts", c)
	}
	opts.StepImages = append(opts.StepImages, PostgresToolsImage+":")
	opts.ConfigSource = filepath.Join(root, "examples", "postgres", "config-repo")
	return nil
}

// PostgresScenario plays two pull requests against one PostgreSQL server:
// each gets its own database and role, its application writes and reads
// notes there, and closing one drops its database (ending a connection held
// open to it) while the other keeps working.
type PostgresScenario struct {
	Stack  *Stack
	Report *Report
	// StepTimeout bounds each wait; three minutes when zero.
	StepTimeout time.Duration
}

// PostgresEnvironment is what the scenario saw of one pull request's
// environment.
type PostgresEnvironment struct {
	Number    int
	Name      string
	Namespace string
	URL       string
	Database  string
	Role      string
	// Notes are the notes its application listed after writing one.
	Notes string
}

// PostgresResult is what the PostgreSQL scenario observed.
type PostgresResult struct {
	Steps        []StepResult
	Environments []PostgresEnvironment
	// CrossAccess is the server's answer when the first environment's role
	// connects to the second one's database.
	CrossAccess string
	// HeldConnection is what the connection held open to the first
	// environment's database said after its pull request was closed.
	HeldConnection string
	// SecondAfterFirstClosed is the second environment's note list after the
	// first pull request was closed and it wrote one more note.
	SecondAfterFirstClosed string
	// Dropped lists the databases and roles gone from the server, in order.
	Dropped []string
}

// Run plays the scenario.
func (ps *PostgresScenario) Run(ctx context.Context) (*PostgresResult, error) {
	if ps.StepTimeout == 0 {
		ps.StepTimeout = 3 * time.Minute
	}
	res := &PostgresResult{}
	var held *pgx.Conn
	defer func() {
		if held != nil {
			_ = held.Close(context.Background())
		}
	}()
	steps := []struct {
		name string
		run  func(context.Context) error
	}{
		{"1. Open pull requests #1 and #2: one database each on the shared PostgreSQL server", func(ctx context.Context) error {
			for _, n := range []int{1, 2} {
				e, err := ps.open(ctx, n)
				if err != nil {
					return err
				}
				res.Environments = append(res.Environments, *e)
			}
			return nil
		}},
		{"2. Two databases, two roles, no way across", func(ctx context.Context) error {
			var err error
			res.CrossAccess, err = ps.isolated(ctx, res.Environments[0], res.Environments[1])
			return err
		}},
		{"3. Close pull request #1 while a connection to its database is open", func(ctx context.Context) error {
			var err error
			held, err = ps.hold(ctx, res.Environments[0])
			if err != nil {
				return err
			}
			if err := ps.close(ctx, res.Environments[0], res); err != nil {
				return err
			}
			if res.HeldConnection, err = heldEnded(ctx, held); err != nil {
				return err
			}
			ps.Report.Event("the connection held to %s was ended: %s", res.Environments[0].Database, res.HeldConnection)
			res.SecondAfterFirstClosed, err = ps.writeAndRead(ctx, res.Environments[1], "written after #1 was closed")
			if err != nil {
				return fmt.Errorf("pull request #2 after #1 was closed: %w", err)
			}
			ps.Report.Event("pull request #2 still writes and reads its notes:")
			ps.Report.Detail(strings.TrimSpace(res.SecondAfterFirstClosed))
			return nil
		}},
		{"4. Close pull request #2", func(ctx context.Context) error {
			return ps.close(ctx, res.Environments[1], res)
		}},
	}
	for _, st := range steps {
		ps.Report.Section("%s", st.name)
		start := time.Now()
		err := st.run(ctx)
		res.Steps = append(res.Steps, StepResult{Name: st.name, Duration: time.Since(start), Err: err})
		if err != nil {
			ps.Report.Event("FAILED after %.1fs: %v", time.Since(start).Seconds(), err)
			return res, fmt.Errorf("%s: %w", st.name, err)
		}
		ps.Report.Event("step done in %.1fs", time.Since(start).Seconds())
	}
	return res, nil
}

// open opens pull request n, waits until its environment is Ready, and
// writes and reads a note through its application.
func (ps *PostgresScenario) open(ctx context.Context, n int) (*PostgresEnvironment, error) {
	s, r := ps.Stack, ps.Report
	pr, err := s.OpenPullRequest(ctx, n, fmt.Sprintf("Notes change #%d", n))
	if err != nil {
		return nil, err
	}
	r.Event("GitHub: pull request #%d opened on %s (head %s, label %q)", n, DemoRepository, short(pr.HeadSHA), DemoLabel)
	var env *petriv1.EphemeralEnvironment
	err = poll(ctx, ps.StepTimeout, func() (bool, error) {
		var list petriv1.EphemeralEnvironmentList
		if err := s.Client.List(ctx, &list, client.InNamespace(ManagementNamespace), client.MatchingLabels{
			"petri.dev/application": postgresApplication, "petri.dev/pull-request": strconv.Itoa(n),
		}); err != nil || len(list.Items) != 1 {
			return false, nil
		}
		env = &list.Items[0]
		return env.Status.ObservedGeneration == env.Generation && env.Status.Phase == petriv1.EnvironmentReady, nil
	}, func() string {
		if env == nil {
			return "petri-sync wrote no environment; see " + s.syncLog()
		}
		return (&Scenario{Stack: s}).explain(ctx, env.Name)
	})
	if err != nil {
		return nil, fmt.Errorf("pull request #%d: %w", n, err)
	}
	e := &PostgresEnvironment{Number: n, Name: env.Name, Namespace: env.Status.TargetNamespace, URL: env.Annotations["petri.dev/url"]}
	r.Event("environment %s Ready in namespace %s", e.Name, e.Namespace)
	b, err := ps.binding(ctx, e.Namespace)
	if err != nil {
		return nil, err
	}
	e.Database, e.Role = b.Database, b.Role
	r.Event("binding Secret %s/%s: database %s, role %s on %s:%s, the role's own password (PGPASSWORD, generated for this binding); no instance key", e.Namespace, postgresBinding, b.Database, b.Role, b.Host, b.Port)
	if e.Notes, err = ps.writeAndRead(ctx, *e, fmt.Sprintf("written by pull request #%d", n)); err != nil {
		return nil, fmt.Errorf("pull request #%d: %w", n, err)
	}
	r.Event("the application at %s wrote a note to %s and read back:", e.URL, e.Database)
	r.Detail(strings.TrimSpace(e.Notes))
	return e, nil
}

// binding reads an environment's binding Secret, and checks that no Secret
// of its namespace holds a key of the shared workload's instance Secret, by
// name or by value.
func (ps *PostgresScenario) binding(ctx context.Context, ns string) (pgbinding.Binding, error) {
	sec := &corev1.Secret{}
	if err := ps.Stack.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: postgresBinding}, sec); err != nil {
		return pgbinding.Binding{}, fmt.Errorf("binding Secret %s/%s: %w", ns, postgresBinding, err)
	}
	instance, err := ps.instance(ctx)
	if err != nil {
		return pgbinding.Binding{}, err
	}
	var all corev1.SecretList
	if err := ps.Stack.Client.List(ctx, &all, client.InNamespace(ns)); err != nil {
		return pgbinding.Binding{}, fmt.Errorf("Secrets of %s: %w", ns, err)
	}
	for _, s := range all.Items {
		for k, v := range s.Data {
			for ik, iv := range instance.Data {
				if k == ik || strings.Contains(string(v), string(iv)) {
					return pgbinding.Binding{}, fmt.Errorf("Secret %s/%s key %s holds the instance key %s", ns, s.Name, k, ik)
				}
			}
		}
	}
	return pgbinding.FromEnv(func(k string) string { return string(sec.Data[k]) })
}

// instance reads the shared workload's instance Secret in the management
// namespace (the superuser's password).
func (ps *PostgresScenario) instance(ctx context.Context) (*corev1.Secret, error) {
	sec := &corev1.Secret{}
	if err := ps.Stack.Client.Get(ctx, client.ObjectKey{Namespace: ManagementNamespace, Name: postgresWorkload + "-instance"}, sec); err != nil {
		return nil, fmt.Errorf("instance Secret %s/%s-instance: %w", ManagementNamespace, postgresWorkload, err)
	}
	return sec, nil
}

// writeAndRead posts a note to the environment's application and returns
// its list of notes, which must hold it.
func (ps *PostgresScenario) writeAndRead(ctx context.Context, e PostgresEnvironment, note string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.URL+"notes", strings.NewReader(note))
	if err != nil {
		return "", err
	}
	resp, err := pageClient.Do(req)
	if err != nil {
		return "", err
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return "", fmt.Errorf("POST %snotes: %s: %s", e.URL, resp.Status, body)
	}
	code, list, err := httpGet(ctx, e.URL+"notes")
	if err != nil {
		return "", err
	}
	if code != http.StatusOK || !strings.Contains(list, "\t"+note+"\n") {
		return "", fmt.Errorf("GET %snotes answered %d without the note %q: %s", e.URL, code, note, list)
	}
	return list, nil
}

// server is the environment's binding with the address of the PostgreSQL
// server here and the superuser's password from the instance Secret (which
// the binding does not hold).
func (ps *PostgresScenario) server(ctx context.Context, e PostgresEnvironment) (pgbinding.Binding, error) {
	b, err := ps.binding(ctx, e.Namespace)
	if err != nil {
		return b, err
	}
	instance, err := ps.instance(ctx)
	if err != nil {
		return b, err
	}
	b.AdminPassword = string(instance.Data["ADMIN_PASSWORD"])
	addr, err := ps.Stack.ServiceAddress(ctx, SharedNamespace, postgresWorkload, intstr.FromInt32(5432))
	if err != nil {
		return b, err
	}
	b.Host, b.Port, _ = net.SplitHostPort(addr)
	return b, nil
}

func connectAs(ctx context.Context, b pgbinding.Binding, admin bool) (*pgx.Conn, error) {
	cfg, err := b.Config()
	if admin {
		cfg, err = b.AdminConfig()
	}
	if err != nil {
		return nil, err
	}
	return pgx.ConnectConfig(ctx, cfg)
}

// isolated checks both databases and roles exist, each database belongs to
// its own role, and the first role cannot connect to the second database.
func (ps *PostgresScenario) isolated(ctx context.Context, a, b PostgresEnvironment) (string, error) {
	r := ps.Report
	if a.Database == b.Database || a.Role == b.Role {
		return "", fmt.Errorf("environments %s and %s share database or role: %s/%s and %s/%s", a.Name, b.Name, a.Database, a.Role, b.Database, b.Role)
	}
	ba, err := ps.server(ctx, a)
	if err != nil {
		return "", err
	}
	admin, err := connectAs(ctx, ba, true)
	if err != nil {
		return "", fmt.Errorf("connect as %s: %w", pgbinding.AdminUser, err)
	}
	defer admin.Close(context.Background())
	for _, e := range []PostgresEnvironment{a, b} {
		var owner string
		if err := admin.QueryRow(ctx, "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = $1", e.Database).Scan(&owner); err != nil {
			return "", fmt.Errorf("database %s: %w", e.Database, err)
		}
		if owner != e.Role {
			return "", fmt.Errorf("database %s is owned by %s, not %s", e.Database, owner, e.Role)
		}
		r.Event("database %s owned by role %s", e.Database, e.Role)
	}
	bb, err := ps.binding(ctx, b.Namespace)
	if err != nil {
		return "", err
	}
	if ba.Password == bb.Password {
		return "", errors.New("the two roles have the same password")
	}
	cross := ba
	cross.Database = bb.Database
	conn, err := connectAs(ctx, cross, false)
	if err == nil {
		_ = conn.Close(context.Background())
		return "", fmt.Errorf("role %s connected to database %s", a.Role, b.Database)
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
		return "", fmt.Errorf("role %s to database %s: want permission denied (42501), got %w", a.Role, b.Database, err)
	}
	r.Event("role %s connecting to database %s: %s (SQLSTATE %s)", a.Role, b.Database, pgErr.Message, pgErr.Code)
	return pgErr.Message, nil
}

// hold opens a connection as the environment's role to its database, in a
// transaction, and keeps it.
func (ps *PostgresScenario) hold(ctx context.Context, e PostgresEnvironment) (*pgx.Conn, error) {
	b, err := ps.server(ctx, e)
	if err != nil {
		return nil, err
	}
	conn, err := connectAs(ctx, b, false)
	if err != nil {
		return nil, fmt.Errorf("connect as %s to %s: %w", e.Role, e.Database, err)
	}
	if _, err := conn.Exec(ctx, "BEGIN; SELECT count(*) FROM notes"); err != nil {
		_ = conn.Close(context.Background())
		return nil, err
	}
	ps.Report.Event("holding a connection as %s to %s, in an open transaction", e.Role, e.Database)
	return conn, nil
}

// heldEnded checks the held connection was ended by the server.
func heldEnded(ctx context.Context, conn *pgx.Conn) (string, error) {
	_, err := conn.Exec(ctx, "SELECT 1")
	if err == nil {
		return "", errors.New("the connection held to the dropped database still answers")
	}
	return err.Error(), nil
}

// close closes the environment's pull request, waits until the environment
// is gone, and checks its database and role are dropped.
func (ps *PostgresScenario) close(ctx context.Context, e PostgresEnvironment, res *PostgresResult) error {
	s, r := ps.Stack, ps.Report
	b, err := ps.server(ctx, e)
	if err != nil {
		return err
	}
	if _, err := s.ClosePullRequest(ctx, e.Number); err != nil {
		return err
	}
	r.Event("GitHub: pull request #%d closed", e.Number)
	err = poll(ctx, ps.StepTimeout, func() (bool, error) {
		err := s.Client.Get(ctx, client.ObjectKey{Namespace: ManagementNamespace, Name: e.Name}, &petriv1.EphemeralEnvironment{})
		return apierrors.IsNotFound(err), nil
	}, func() string { return (&Scenario{Stack: s}).explain(ctx, e.Name) })
	if err != nil {
		return fmt.Errorf("environment %s not deleted: %w", e.Name, err)
	}
	r.Event("environment %s deleted: components undeployed, deprovision Job done, namespace gone", e.Name)
	admin, err := connectAs(ctx, b, true)
	if err != nil {
		return fmt.Errorf("connect as %s: %w", pgbinding.AdminUser, err)
	}
	defer admin.Close(context.Background())
	var dbs, roles int
	if err := admin.QueryRow(ctx, "SELECT (SELECT count(*) FROM pg_database WHERE datname = $1), (SELECT count(*) FROM pg_roles WHERE rolname = $2)", e.Database, e.Role).Scan(&dbs, &roles); err != nil {
		return err
	}
	if dbs != 0 || roles != 0 {
		return fmt.Errorf("after the deprovision: %d database %s and %d role %s left", dbs, e.Database, roles, e.Role)
	}
	res.Dropped = append(res.Dropped, e.Database, e.Role)
	r.Event("database %s and role %s are gone from the server", e.Database, e.Role)
	return nil
}

// WritePostgresSummary prints the outcome of the PostgreSQL scenario.
func WritePostgresSummary(w io.Writer, res *PostgresResult, err error) {
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Summary")
	if res != nil {
		for _, st := range res.Steps {
			mark := "ok"
			if st.Err != nil {
				mark = "FAILED"
			}
			fmt.Fprintf(w, "  %-6s %s (%.1fs)\n", mark, st.Name, st.Duration.Seconds())
		}
		for _, e := range res.Environments {
			fmt.Fprintf(w, "  pull request #%d: environment %s, database %s, role %s\n", e.Number, e.Name, e.Database, e.Role)
		}
	}
	if err != nil {
		fmt.Fprintf(w, "  the demo failed: %v\n", err)
		return
	}
	fmt.Fprintln(w, "  every step passed")
}
