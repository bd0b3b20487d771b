package outboxbench

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/msgx/msgx/lab/bench"
)

// CeilingScript is the pgbench transaction: 100 rows of 200 bytes inserted
// in one transaction into a table with a bigint identity primary key.
//
//go:embed pgbench_ceiling.sql
var CeilingScript string

// CeilingConfig is the shape of the pgbench ceiling run.
type CeilingConfig struct {
	DSN      string
	Clients  int
	Duration time.Duration
}

var tpsLine = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)

// RunPgbenchCeiling runs pgbench (installed with PostgreSQL) with the
// ceiling script in a fresh schema and prints the rows/s as a RESULT line
// (peer=pgbench). The equivalent command is
//
//	PGOPTIONS='-c search_path=S' pgbench -n -c 8 -j 2 -T 10 -f pgbench_ceiling.sql DB
//
// after `CREATE TABLE S.msgx_ceiling (id bigint GENERATED ALWAYS AS IDENTITY
// PRIMARY KEY, payload bytea NOT NULL)`.
func RunPgbenchCeiling(ctx context.Context, cfg CeilingConfig, out io.Writer) (bench.Result, error) {
	if cfg.DSN == "" {
		cfg.DSN = bench.DefaultDSN
	}
	if cfg.Clients <= 0 {
		cfg.Clients = 8
	}
	if cfg.Duration <= 0 {
		cfg.Duration = 10 * time.Second
	}
	bin, err := exec.LookPath("pgbench")
	if err != nil {
		return bench.Result{}, fmt.Errorf("pgbench is not on PATH (it comes with the PostgreSQL client tools): %w", err)
	}
	pc, err := pgx.ParseConfig(cfg.DSN)
	if err != nil {
		return bench.Result{}, err
	}
	sc, err := bench.NewSchema(ctx, cfg.DSN, "msgx_bench_ceiling")
	if err != nil {
		return bench.Result{}, err
	}
	defer func() { _ = sc.Drop() }()
	conn, err := pgx.Connect(ctx, sc.DSN)
	if err != nil {
		return bench.Result{}, err
	}
	_, err = conn.Exec(ctx, "CREATE TABLE msgx_ceiling (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, payload bytea NOT NULL)")
	conn.Close(ctx)
	if err != nil {
		return bench.Result{}, err
	}
	dir, err := os.MkdirTemp("", "msgx-ceiling")
	if err != nil {
		return bench.Result{}, err
	}
	defer os.RemoveAll(dir)
	script := filepath.Join(dir, "pgbench_ceiling.sql")
	if err := os.WriteFile(script, []byte(CeilingScript), 0o600); err != nil {
		return bench.Result{}, err
	}
	secs := max(int(cfg.Duration.Round(time.Second)/time.Second), 1)
	args := []string{"-n", "-c", strconv.Itoa(cfg.Clients), "-j", "2", "-T", strconv.Itoa(secs), "-f", script,
		"-h", pc.Host, "-p", strconv.Itoa(int(pc.Port)), "-U", pc.User, pc.Database}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "PGOPTIONS=-c search_path="+sc.Name)
	if pc.Password != "" {
		cmd.Env = append(cmd.Env, "PGPASSWORD="+pc.Password)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return bench.Result{}, fmt.Errorf("pgbench: %w: %s", err, stderr.String())
	}
	m := tpsLine.FindStringSubmatch(stdout.String())
	if m == nil {
		return bench.Result{}, fmt.Errorf("pgbench printed no tps line: %s", stdout.String())
	}
	tps, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return bench.Result{}, err
	}
	// Report rows: N rows in the measured seconds.
	rows := tps * 100 * float64(secs)
	res := bench.Result{Peer: "pgbench", Workload: "pgbench-ceiling", Mode: "burndown", N: int(rows),
		Elapsed: time.Duration(secs) * time.Second, Extra: [][2]string{{"clients", strconv.Itoa(cfg.Clients)}, {"tps", m[1]}}}
	res.Print(out)
	return res, nil
}
