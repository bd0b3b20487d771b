package main

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/msgx/msgx/lab/bench"
	"github.com/msgx/msgx/lab/bench/routebench"
)

func newBenchRouteIngestCmd() *cobra.Command {
	var (
		cfg     routebench.Config
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "route-ingest",
		Short: "Route passports end to end: input topic -> PostgreSQL + outbox -> relay -> both output topics confirmed (kfake)",
		Long: `Route passports end to end: input topic -> PostgreSQL + outbox -> relay -> both output topics confirmed (kfake).

The ingest variant runs the pipeline without its relay until every record is
stored with its outbox events: the ceiling the end-to-end run is compared
with (--variants e2e,ingest prints e2e/ingest for each round and, with
--rounds, the median).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Progress = cmd.ErrOrStderr()
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			_, err := routebench.Run(ctx, cfg, cmd.OutOrStdout())
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.DSN, "dsn", bench.DefaultDSN, "PostgreSQL DSN (a fresh schema is created and dropped)")
	f.IntVar(&cfg.N, "n", 50000, "records")
	f.IntVar(&cfg.Routes, "routes", 5000, "distinct routeIds")
	f.IntVar(&cfg.Points, "points", 20, "positions per LineString")
	f.IntVar(&cfg.Partitions, "partitions", 6, "partitions of each topic")
	f.IntVar(&cfg.Batch, "batch", 200, "records per batch (at most; the pipeline's default)")
	f.DurationVar(&cfg.Poll, "poll", 100*time.Millisecond, "relay poll interval (the relay's default)")
	f.StringSliceVar(&cfg.Variants, "variants", []string{"e2e"}, "variants to run, in order: e2e, e2e-wal (the outbox's WAL mode), ingest (the pipeline without its relay, a ceiling)")
	f.IntVar(&cfg.Rounds, "rounds", 1, "repeat the variants this many times, every other round in reverse order")
	f.DurationVar(&timeout, "timeout", 10*time.Minute, "give up after this long")
	return cmd
}
