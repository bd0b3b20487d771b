package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/msgx/msgx/store"
)

// defaultDSN is the embedded default database.
const defaultDSN = "sqlite:msgx.db"

func newMigrateCmd() *cobra.Command {
	var dsn string
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply the embedded database migrations (safe to run twice, and from several processes)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			db, err := store.Open(cmd.Context(), dsn, store.WithMigrate())
			if err != nil {
				return err
			}
			defer db.Close()
			v, err := db.Version(cmd.Context())
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "schema at version %d (%s)\n", v, db.Dialect())
			return nil
		},
	}
	cmd.Flags().StringVar(&dsn, "dsn", defaultDSN, "database: postgres://… or sqlite:PATH")
	return cmd
}
