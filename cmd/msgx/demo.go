package main

import (
	"github.com/spf13/cobra"

	"github.com/msgx/msgx/internal/demo"
)

func newDemoCmd() *cobra.Command {
	cfg := demo.Config{}
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the SIS pipeline end to end on the embedded default (SQLite + in-process broker) with the bundled real SIS traffic",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Out = cmd.OutOrStdout()
			_, err := demo.Run(cmd.Context(), cfg)
			return err
		},
	}
	cmd.Flags().StringVar(&cfg.DSN, "dsn", "sqlite:msgx-demo.db", "store and mailbox database: sqlite:PATH or postgres://…")
	return cmd
}
