package reliability

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PrivatePostgres is a PostgreSQL cluster of the campaign's own (initdb in
// a temporary directory, its own port), so that the campaign can really
// restart it: Restart is an immediate stop (no checkpoint, crash recovery at
// the next start) and a start.
type PrivatePostgres struct {
	bin, dir, data, logFile string
	port                    int
	asUser                  string // the servers refuse to run as root: run as this user
}

// StartPostgres initialises and starts a cluster under dir.
func StartPostgres(ctx context.Context, dir string) (*PrivatePostgres, error) {
	bin, err := postgresBin()
	if err != nil {
		return nil, err
	}
	p := &PrivatePostgres{bin: bin, dir: dir, data: filepath.Join(dir, "data"), logFile: filepath.Join(dir, "postgres.log")}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("private PostgreSQL: run as root, and no postgres user to run the server as: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, err
		}
		p.asUser = "postgres"
	}
	if p.port, err = freePort(); err != nil {
		return nil, err
	}
	if out, err := p.run(ctx, "initdb", "-D", p.data, "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8"); err != nil {
		return nil, fmt.Errorf("private PostgreSQL: initdb: %w\n%s", err, out)
	}
	if err := p.start(ctx); err != nil {
		p.Stop()
		return nil, err
	}
	return p, nil
}

// postgresBin finds the directory of initdb and pg_ctl: PATH, else the
// newest /usr/lib/postgresql/*/bin (Debian keeps them off the PATH).
func postgresBin() (string, error) {
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		return filepath.Dir(p), nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi < vj
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "pg_ctl")); err == nil {
			return dirs[i], nil
		}
	}
	return "", errors.New("private PostgreSQL: no pg_ctl on the PATH or under /usr/lib/postgresql/*/bin")
}

func (p *PrivatePostgres) run(ctx context.Context, tool string, args ...string) ([]byte, error) {
	name := filepath.Join(p.bin, tool)
	if p.asUser != "" {
		args = append([]string{"-u", p.asUser, "--", name}, args...)
		name = "runuser"
	}
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = p.dir
	return cmd.CombinedOutput()
}

func (p *PrivatePostgres) start(ctx context.Context) error {
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c max_connections=200", p.port, p.dir)
	if out, err := p.run(ctx, "pg_ctl", "start", "-D", p.data, "-l", p.logFile, "-w", "-t", "120", "-o", opts); err != nil {
		return fmt.Errorf("private PostgreSQL: pg_ctl start: %w\n%s", err, out)
	}
	return nil
}

// URL is the cluster's address for pgx (database postgres, user postgres).
func (p *PrivatePostgres) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.port)
}

// Restart crashes the server (pg_ctl stop -m immediate: every backend is
// killed, nothing is checkpointed) and starts it again, which replays the
// WAL; it returns when the server accepts connections again.
func (p *PrivatePostgres) Restart(ctx context.Context) error {
	if out, err := p.run(ctx, "pg_ctl", "stop", "-D", p.data, "-m", "immediate", "-w"); err != nil {
		return fmt.Errorf("private PostgreSQL: pg_ctl stop: %w\n%s", err, out)
	}
	if err := p.start(ctx); err != nil {
		return err
	}
	return waitFor(ctx, time.Minute, func() bool {
		conn, err := pgx.Connect(ctx, p.URL())
		if err != nil {
			return false
		}
		_ = conn.Close(ctx)
		return true
	})
}

// Stop stops the server (immediately: its data is thrown away) and removes
// its directory.
func (p *PrivatePostgres) Stop() {
	if _, err := os.Stat(filepath.Join(p.data, "postmaster.pid")); err == nil {
		_, _ = p.run(context.Background(), "pg_ctl", "stop", "-D", p.data, "-m", "immediate", "-w")
	}
	_ = os.RemoveAll(p.dir)
}

// PrivateMaria is a MariaDB server of the campaign's own (mariadb-install-db
// in a temporary directory, its own port). Restart is a kill -9 and a start:
// InnoDB recovers at the start.
type PrivateMaria struct {
	dir, data string
	port      int
	cmd       *exec.Cmd
	exited    chan struct{}
}

// StartMaria initialises and starts a server under dir with a database test.
func StartMaria(ctx context.Context, dir string) (*PrivateMaria, error) {
	m := &PrivateMaria{dir: dir, data: filepath.Join(dir, "data")}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	var err error
	if m.port, err = freePort(); err != nil {
		return nil, err
	}
	install := exec.CommandContext(ctx, "mariadb-install-db", "--no-defaults", "--datadir="+m.data, "--user=root",
		"--auth-root-authentication-method=normal", "--skip-test-db")
	if out, err := install.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("private MariaDB: mariadb-install-db: %w\n%s", err, out)
	}
	if err := m.start(ctx); err != nil {
		m.Stop()
		return nil, err
	}
	db, err := sql.Open("mysql", fmt.Sprintf("root@tcp(127.0.0.1:%d)/", m.port))
	if err != nil {
		m.Stop()
		return nil, err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE test"); err != nil {
		m.Stop()
		return nil, fmt.Errorf("private MariaDB: %w", err)
	}
	return m, nil
}

func (m *PrivateMaria) start(ctx context.Context) error {
	logf, err := os.OpenFile(filepath.Join(m.dir, "mariadb.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command("mariadbd", "--no-defaults", "--user=root", "--datadir="+m.data, "--port="+strconv.Itoa(m.port),
		"--bind-address=127.0.0.1", "--socket="+filepath.Join(m.dir, "mariadb.sock"), "--pid-file="+filepath.Join(m.dir, "mariadb.pid"),
		"--max-connections=300", "--skip-name-resolve")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("private MariaDB: %w", err)
	}
	m.cmd, m.exited = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(m.exited) }()
	return waitFor(ctx, 2*time.Minute, func() bool {
		select {
		case <-m.exited:
			return false
		default:
		}
		db, err := sql.Open("mysql", fmt.Sprintf("root@tcp(127.0.0.1:%d)/", m.port))
		if err != nil {
			return false
		}
		defer db.Close()
		return db.PingContext(ctx) == nil
	})
}

// DSN is the server's address for go-sql-driver (database test, user root).
func (m *PrivateMaria) DSN() string { return fmt.Sprintf("root@tcp(127.0.0.1:%d)/test", m.port) }

// Restart kills the server with SIGKILL and starts it again; it returns
// when the server answers again.
func (m *PrivateMaria) Restart(ctx context.Context) error {
	m.kill()
	return m.start(ctx)
}

func (m *PrivateMaria) kill() {
	if m.cmd != nil {
		_ = m.cmd.Process.Signal(syscall.SIGKILL)
		<-m.exited
		m.cmd = nil
	}
}

// Stop kills the server and removes its directory.
func (m *PrivateMaria) Stop() {
	m.kill()
	_ = os.RemoveAll(m.dir)
}

// openPool opens the harness's connections to PostgreSQL, on schema: a pool,
// which reconnects after a server restart.
func openPool(ctx context.Context, url, schema string) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	pc.MaxConns = 4
	pc.ConnConfig.RuntimeParams["search_path"] = schema
	return pgxpool.NewWithConfig(ctx, pc)
}

// freePort asks the kernel for a free TCP port on the loopback.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
