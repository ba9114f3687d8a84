// Command petri-postgres runs a PostgreSQL server in a container: on first
// start it initialises the data directory with initdb (superuser postgres,
// password from POSTGRES_PASSWORD or --password-file, password
// authentication for every host), then it execs postgres on the listen
// address. It is the entrypoint of the shared workload's image
// (examples/postgres/charts/postgres): Debian's PostgreSQL server binaries
// plus this program.
//
//	petri-postgres [--data=/var/lib/postgresql/data] [--listen=:5432]
//	               [--password-file=PATH] [--bindir=DIR] [--run-as=postgres]
//
// PostgreSQL refuses to run as root. Started as root (the local node runs
// processes as the machine's user), it runs the server as --run-as and gives
// that user search permission on the data directory's parents.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/petri-dev/petri/examples/postgres/pgserver"
)

func main() {
	data := flag.String("data", "/var/lib/postgresql/data", "volume holding the data directory (pgdata inside it)")
	listen := flag.String("listen", ":5432", "address the server listens on; an empty host listens on every address")
	passwordFile := flag.String("password-file", "", "file holding the superuser's password (default: $POSTGRES_PASSWORD)")
	bindir := flag.String("bindir", "", "directory of initdb and postgres (default: from PATH, else the newest /usr/lib/postgresql/*/bin)")
	runAs := flag.String("run-as", "postgres", "user the server runs as when started as root")
	flag.Parse()
	if err := run(*data, *listen, *passwordFile, *bindir, *runAs); err != nil {
		fmt.Fprintln(os.Stderr, "petri-postgres:", err)
		os.Exit(1)
	}
}

func run(data, listen, passwordFile, bindir, runAs string) error {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return fmt.Errorf("--listen %q: %w", listen, err)
	}
	if host == "" || host == "0.0.0.0" {
		host = "*"
	}
	if bindir == "" {
		if bindir, err = pgserver.Bindir(); err != nil {
			return err
		}
	}
	password := os.Getenv("POSTGRES_PASSWORD")
	if passwordFile != "" {
		b, err := os.ReadFile(passwordFile)
		if err != nil {
			return fmt.Errorf("read the superuser's password: %w", err)
		}
		password = strings.TrimRight(string(b), "\r\n")
	}
	cred, err := credential(runAs)
	if err != nil {
		return err
	}
	pgdata := filepath.Join(data, "pgdata")
	if cred != nil {
		if err := reachable(data, cred); err != nil {
			return err
		}
	}
	if _, err := os.Stat(filepath.Join(pgdata, "PG_VERSION")); errors.Is(err, fs.ErrNotExist) {
		if password == "" {
			return errors.New("the data directory is new and no superuser password is set (POSTGRES_PASSWORD or --password-file)")
		}
		if err := initdb(bindir, data, pgdata, password, cred); err != nil {
			return err
		}
	} else if err != nil {
		return fmt.Errorf("data directory %s: %w", pgdata, err)
	}
	args := []string{"postgres", "-D", pgdata, "-p", port,
		"-c", "listen_addresses=" + host,
		// No Unix socket: the container's clients use TCP, and the socket
		// directory of a distribution package may not exist here.
		"-c", "unix_socket_directories=",
	}
	fmt.Printf("petri-postgres: starting %s on %s:%s with data in %s\n", filepath.Join(bindir, "postgres"), host, port, pgdata)
	if cred != nil {
		if err := syscall.Setgroups([]int{int(cred.Gid)}); err != nil {
			return fmt.Errorf("drop privileges: %w", err)
		}
		if err := syscall.Setgid(int(cred.Gid)); err != nil {
			return fmt.Errorf("drop privileges: %w", err)
		}
		if err := syscall.Setuid(int(cred.Uid)); err != nil {
			return fmt.Errorf("drop privileges: %w", err)
		}
	}
	if err := os.Chdir(data); err != nil {
		return err
	}
	env := os.Environ()
	return syscall.Exec(filepath.Join(bindir, "postgres"), args, env)
}

// credential is the identity the server runs as: nil when not root.
func credential(runAs string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(runAs)
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL does not run as root, and user %s to run it as: %w", runAs, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// reachable lets the server's user reach the volume: search permission on
// every parent that lacks it, and ownership of the volume.
func reachable(data string, cred *syscall.Credential) error {
	if err := os.MkdirAll(data, 0o700); err != nil {
		return fmt.Errorf("volume %s: %w", data, err)
	}
	abs, err := filepath.Abs(data)
	if err != nil {
		return err
	}
	for dir := filepath.Dir(abs); ; dir = filepath.Dir(dir) {
		fi, err := os.Stat(dir)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(dir, fi.Mode().Perm()|0o001); err != nil {
				return fmt.Errorf("let user %d reach %s: %w", cred.Uid, dir, err)
			}
		}
		if dir == "/" {
			break
		}
	}
	return os.Chown(abs, int(cred.Uid), int(cred.Gid))
}

// initdb creates the data directory: superuser postgres with the password,
// password (SCRAM) authentication for every connection.
func initdb(bindir, data, pgdata, password string, cred *syscall.Credential) error {
	pwfile := filepath.Join(data, ".initdb-password")
	if err := os.WriteFile(pwfile, []byte(password+"\n"), 0o600); err != nil {
		return fmt.Errorf("initdb: %w", err)
	}
	defer os.Remove(pwfile)
	if cred != nil {
		if err := os.Chown(pwfile, int(cred.Uid), int(cred.Gid)); err != nil {
			return fmt.Errorf("initdb: %w", err)
		}
	}
	cmd := exec.Command(filepath.Join(bindir, "initdb"), "-D", pgdata, "-U", "postgres", "--pwfile="+pwfile,
		"--auth=scram-sha-256", "-E", "UTF8", "--locale=C.UTF-8", "--no-instructions")
	cmd.Stdout, cmd.Stderr, cmd.Dir = os.Stdout, os.Stderr, data
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	fmt.Println("petri-postgres: initialising", pgdata)
	if err := cmd.Run(); err != nil {
		_ = os.RemoveAll(pgdata)
		return fmt.Errorf("initdb %s: %w", pgdata, err)
	}
	// Clients come from other pods: password authentication from anywhere.
	hba, err := os.OpenFile(filepath.Join(pgdata, "pg_hba.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("pg_hba.conf: %w", err)
	}
	defer hba.Close()
	_, err = hba.WriteString("\n# petri-postgres: clients in other pods\nhost all all 0.0.0.0/0 scram-sha-256\nhost all all ::/0 scram-sha-256\n")
	return err
}
