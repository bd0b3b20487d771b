package main

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"time"

	"github.com/spf13/cobra"

	"github.com/msgx/msgx/lab/bench"
	"github.com/msgx/msgx/lab/bench/outboxbench"
	"github.com/msgx/msgx/outbox"
)

// outboxBenchCmds are the outbox workloads.
func outboxBenchCmds() []*cobra.Command {
	return []*cobra.Command{newBenchOutboxRelayCmd(), newBenchProducerOverheadCmd(), newBenchPgbenchCeilingCmd(), newBenchCompareCmd()}
}

func newBenchCompareCmd() *cobra.Command {
	var (
		cfg     outboxbench.CompareConfig
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "compare [-- workload flags]",
		Short: "Run msgx, River and Watermill back to back through the one harness of lab/peers and print the RESULT lines and ratios",
		Long: `Builds the peer programs of lab/peers (msgx's outbox, River, Watermill: the
same events, producers, clock start, done check and RESULT line) and runs
them interleaved, --rounds times, once per synchronous_commit setting, which
every peer gets in its DSN. Flags after -- go to every peer unchanged, e.g.
msgx-bench compare -- --mode live --rate 5000 --duration 10s`,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg.Args = args
			cfg.Progress = cmd.ErrOrStderr()
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			return outboxbench.Compare(ctx, cfg, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.PeersDir, "peers-dir", "lab/peers", "the lab/peers module")
	f.StringVar(&cfg.DSN, "dsn", bench.DefaultDSN, "PostgreSQL DSN of every peer")
	f.IntVar(&cfg.Rounds, "rounds", 2, "rounds of msgx, River, Watermill per setting")
	f.BoolVar(&cfg.WAL, "wal", false, "also run the msgx-wal peer: msgx's outbox in its WAL mode (wal_level=logical)")
	f.StringSliceVar(&cfg.SyncCommit, "sync-commit", []string{"on", "off"}, "synchronous_commit settings to run every peer with")
	f.DurationVar(&timeout, "timeout", 30*time.Minute, "upper bound for the whole comparison")
	return cmd
}

func newBenchOutboxRelayCmd() *cobra.Command {
	var (
		cfg     outboxbench.RelayConfig
		lane    string
		timeout time.Duration
		ceiling time.Duration
		profile string
	)
	cmd := &cobra.Command{
		Use:   "outbox-relay",
		Short: "Relay N outbox events to an in-memory sink (burndown: backlog first; live: producers at --rate)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			k, err := outbox.ParseLaneKind(lane)
			if err != nil {
				return err
			}
			cfg.Lane = k
			cfg.Progress = cmd.ErrOrStderr()
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			if profile != "" {
				f, err := os.Create(profile)
				if err != nil {
					return err
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return err
				}
				defer pprof.StopCPUProfile()
			}
			if cfg.Mode == "recovery" {
				// The steady rate to compare with, in the same run.
				steady := cfg
				steady.Mode = "burndown"
				b, err := outboxbench.RunRelay(ctx, steady, cmd.OutOrStdout())
				if err != nil {
					return err
				}
				rec, err := outboxbench.RunRelay(ctx, cfg, cmd.OutOrStdout())
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "recovery/burndown = %.2f (%.0f events/s after the outage, %.0f steady)\n", rec.PerSec()/b.PerSec(), rec.PerSec(), b.PerSec())
				return nil
			}
			res, err := outboxbench.RunRelay(ctx, cfg, cmd.OutOrStdout())
			if err != nil {
				return err
			}
			if ceiling > 0 {
				c, err := outboxbench.RunPgbenchCeiling(ctx, outboxbench.CeilingConfig{DSN: cfg.DSN, Duration: ceiling}, cmd.OutOrStdout())
				if err != nil {
					return fmt.Errorf("pgbench ceiling: %w", err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "relay/ceiling = %.3f (%.0f events/s of %.0f rows/s)\n", res.PerSec()/c.PerSec(), res.PerSec(), c.PerSec())
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.DSN, "dsn", bench.DefaultDSN, "PostgreSQL DSN (a fresh schema is created and dropped)")
	f.StringVar(&lane, "lane", "unordered", "lane kind: unordered, per-key or compacted")
	f.StringVar(&cfg.Mode, "mode", "burndown", "burndown (insert all, then time the relay), live (producers at --rate while the relay runs) or recovery (a burn-down, then the same backlog while the broker refuses until every event failed once, timed from the broker's return)")
	f.IntVar(&cfg.N, "n", 50000, "events")
	f.IntVar(&cfg.Keys, "keys", 1000, "distinct partition keys")
	f.IntVar(&cfg.Batch, "batch", 100, "events per producer transaction")
	f.IntVar(&cfg.Size, "size", 200, "payload bytes")
	f.IntVar(&cfg.Rate, "rate", 5000, "live mode: offered events/s")
	f.DurationVar(&cfg.Warmup, "warmup", time.Second, "live mode: the latencies of events committed within this long of the load's start are reported apart (warmup_lat_*), not in lat_p50/p99")
	f.IntVar(&cfg.Producers, "producers", 4, "producers (live mode; burn-down inserts with as many)")
	f.IntVar(&cfg.ClaimBatch, "claim", outbox.DefaultBatch, "events (per-key: keys; compacted: flush limit) per claim")
	f.IntVar(&cfg.Workers, "workers", 2, "claim loops per relay")
	f.IntVar(&cfg.Relays, "relays", 1, "relays at once, each with its own connection pool")
	f.DurationVar(&cfg.Poll, "poll", 5*time.Millisecond, "idle poll interval of the relay")
	f.IntVar(&cfg.Dead, "dead", 0, "DEAD rows written before the run")
	f.IntVar(&cfg.Sent, "sent", 0, "SENT rows written before the run")
	f.BoolVar(&cfg.WAL, "wal", false, "the outbox's WAL mode: events through a logical replication slot (wal_level=logical)")
	f.DurationVar(&ceiling, "ceiling", 0, "also run the pgbench ceiling for this long and print relay/ceiling (0: skip)")
	f.DurationVar(&timeout, "timeout", 30*time.Minute, "give up after this long")
	f.StringVar(&profile, "cpuprofile", "", "write a CPU profile of the run to this file")
	return cmd
}

func newBenchProducerOverheadCmd() *cobra.Command {
	var (
		cfg     outboxbench.ProducerConfig
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "producer-overhead",
		Short: "Business transactions/s with and without the outbox insert in the same transaction",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			cfg.Progress = cmd.ErrOrStderr()
			_, err := outboxbench.RunProducerOverhead(ctx, cfg, cmd.OutOrStdout())
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.DSN, "dsn", bench.DefaultDSN, "PostgreSQL DSN (a fresh schema is created and dropped)")
	f.IntVar(&cfg.N, "n", 2000, "transactions per variant and round")
	f.IntVar(&cfg.Clients, "clients", 8, "concurrent clients")
	f.IntVar(&cfg.Keys, "keys", 1000, "business rows (and event keys)")
	f.IntVar(&cfg.Size, "size", 200, "event payload bytes")
	f.IntVar(&cfg.Rounds, "rounds", 10, "rounds; each runs both variants, in alternating order")
	f.BoolVar(&cfg.WAL, "wal", false, "add the variant of the outbox's WAL mode (wal_level=logical)")
	f.DurationVar(&timeout, "timeout", 30*time.Minute, "give up after this long")
	return cmd
}

func newBenchPgbenchCeilingCmd() *cobra.Command {
	var (
		cfg    outboxbench.CeilingConfig
		script bool
	)
	cmd := &cobra.Command{
		Use:   "pgbench-ceiling",
		Short: "Rows/s of pgbench insert-only transactions of 100 rows x 200 bytes (the database's ceiling)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if script {
				fmt.Fprint(cmd.OutOrStdout(), outboxbench.CeilingScript)
				return nil
			}
			_, err := outboxbench.RunPgbenchCeiling(cmd.Context(), cfg, cmd.OutOrStdout())
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.DSN, "dsn", bench.DefaultDSN, "PostgreSQL DSN (a fresh schema is created and dropped)")
	f.IntVar(&cfg.Clients, "clients", 8, "pgbench clients")
	f.DurationVar(&cfg.Duration, "duration", 10*time.Second, "how long pgbench runs")
	f.BoolVar(&script, "script", false, "print the pgbench script and exit")
	return cmd
}
