package main

import (
	"context"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/msgx/msgx/lab/bench"
	"github.com/msgx/msgx/lab/bench/inboxbench"
)

func newBenchInboxFIFOCmd() *cobra.Command {
	var (
		cfg      inboxbench.Config
		variants string
		procs    string
		timeout  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "inbox-fifo",
		Short: "Strict-FIFO inbox: SIS FLOP messages from the mailbox table to SUCCEEDED with their events, group commit beside one transaction per message",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			cfg.Variants = strings.Split(variants, ",")
			cfg.Processors = strings.Split(procs, ",")
			cfg.Progress = cmd.ErrOrStderr()
			_, err := inboxbench.Run(ctx, cfg, cmd.OutOrStdout())
			return err
		},
	}
	cmd.Flags().StringVar(&cfg.DSN, "dsn", bench.DefaultDSN, "PostgreSQL server (each variant runs in a fresh schema)")
	cmd.Flags().IntVar(&cfg.N, "n", 20000, "messages per variant")
	cmd.Flags().IntVar(&cfg.FLIDs, "keys", 300, "distinct FLIDs")
	cmd.Flags().IntVar(&cfg.Group, "batch", 50, "messages per pump transaction in the group variant")
	cmd.Flags().IntVar(&cfg.ClaimBatch, "claim-batch", 50, "mailbox rows per poller scan")
	cmd.Flags().BoolVar(&cfg.Backfill, "backfill", true, "write the processed mark back to the mailbox rows")
	cmd.Flags().IntVar(&cfg.Rounds, "rounds", 1, "rounds of the whole set, in reversed order every other round; each ratio is also reported as its median")
	cmd.Flags().StringVar(&variants, "variants", "group,single", "variants to run, in order: group, single, raw (the business statements alone, a ceiling)")
	cmd.Flags().StringVar(&procs, "processor", "toy", "processors to measure, each with every variant: toy (one upsert and one event per message), sis (the SIS pipeline's real processor), or toy,sis for both in one run")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Minute, "give up after this long")
	return cmd
}
