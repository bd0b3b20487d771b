package outboxbench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/msgx/msgx/lab/bench"
)

// ComparePeers are the programs of lab/peers that Compare runs, in the
// order of each round.
var ComparePeers = []string{"msgx", "river", "watermill"}

// CompareConfig is a side-by-side run of msgx, River and Watermill through
// the one harness of lab/peers.
type CompareConfig struct {
	PeersDir string // the lab/peers module
	// WAL adds the msgx-wal peer (the outbox's WAL mode; the server needs
	// wal_level=logical).
	WAL    bool
	DSN    string   // every peer's database
	Args   []string // the workload flags every peer gets (--mode, --n, ...)
	Rounds int
	// SyncCommit lists the synchronous_commit settings to run every peer
	// with ("on", "off"): one session setting for all, set in the DSN.
	SyncCommit []string
	Progress   io.Writer
}

// Compare builds the peer programs and runs them back to back, interleaved
// (msgx, River, Watermill, then again), for each synchronous_commit setting;
// it prints every RESULT line and, per round, msgx's rate and p99 against each
// peer's.
func Compare(ctx context.Context, cfg CompareConfig, out io.Writer) error {
	if cfg.Rounds <= 0 {
		cfg.Rounds = 2
	}
	if cfg.DSN == "" {
		cfg.DSN = bench.DefaultDSN
	}
	bin, err := os.MkdirTemp("", "msgx-bench-peers-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(bin)
	peers := ComparePeers
	if cfg.WAL {
		peers = append(slices.Clone(ComparePeers), "msgx-wal")
	}
	for _, p := range peers {
		build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(bin, p), "./cmd/"+p)
		build.Dir = cfg.PeersDir
		if b, err := build.CombinedOutput(); err != nil {
			return fmt.Errorf("building the %s peer in %s: %w\n%s", p, cfg.PeersDir, err, b)
		}
	}
	for _, sc := range cfg.SyncCommit {
		dsn := bench.WithParam(cfg.DSN, "synchronous_commit", sc)
		for round := 1; round <= cfg.Rounds; round++ {
			res := map[string]map[string]string{}
			for _, p := range peers {
				cmd := exec.CommandContext(ctx, filepath.Join(bin, p), append([]string{"--dsn", dsn}, cfg.Args...)...)
				var stdout bytes.Buffer
				cmd.Stdout, cmd.Stderr = &stdout, cfg.Progress
				if err := cmd.Run(); err != nil {
					return fmt.Errorf("%s (synchronous_commit=%s, round %d): %w", p, sc, round, err)
				}
				sc2 := bufio.NewScanner(&stdout)
				for sc2.Scan() {
					line := sc2.Text()
					if !strings.HasPrefix(line, "RESULT ") {
						continue
					}
					fmt.Fprintf(out, "%s synchronous_commit=%s round=%d\n", line, sc, round)
					res[p] = fields(line)
				}
			}
			for _, p := range peers[1:] {
				fmt.Fprintf(out, "synchronous_commit=%s round=%d msgx/%s: per_sec %s", sc, round, p, ratio(res["msgx"]["per_sec"], res[p]["per_sec"]))
				if _, ok := res["msgx"]["lat_p99_ms"]; ok {
					fmt.Fprintf(out, ", lat_p99_ms %s", ratio(res["msgx"]["lat_p99_ms"], res[p]["lat_p99_ms"]))
				}
				fmt.Fprintln(out)
			}
		}
	}
	return nil
}

func fields(line string) map[string]string {
	m := map[string]string{}
	for _, f := range strings.Fields(line) {
		if k, v, ok := strings.Cut(f, "="); ok {
			m[k] = v
		}
	}
	return m
}

func ratio(a, b string) string {
	x, err1 := strconv.ParseFloat(a, 64)
	y, err2 := strconv.ParseFloat(b, 64)
	if err1 != nil || err2 != nil || y == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f (%s / %s)", x/y, a, b)
}
