package main

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/msgx/msgx/app"
	"github.com/msgx/msgx/app/config"
	"github.com/msgx/msgx/store"
)

// defaultDSN is the embedded default database.
const defaultDSN = "sqlite:msgx.db"

func newMigrateCmd() *cobra.Command {
	var dsn, path string
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply the embedded database migrations (safe to run twice, and from several processes)",
		Long: `Apply the migration lines a configuration needs (--config: the service's own
tables, the store's mailbox table when a mailbox of kind store is configured,
and the tables of the configured processors and enabled pipelines; the
database is the configuration's store.dsn unless --dsn is given), or without
--config every line of this build, in --dsn. A database migrated by a
release that kept one migration sequence is taken over in place.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			lines := app.AllSchema(newRegistry())
			if path != "" {
				cfg, err := config.Load(path, os.Environ(), adapters())
				if err != nil {
					return err
				}
				lines = app.Schema(cfg, newRegistry())
				if !cmd.Flags().Changed("dsn") {
					dsn = cfg.Store.DSN
				}
			}
			db, err := store.Open(cmd.Context(), dsn, store.WithMigrate(lines...))
			if err != nil {
				return err
			}
			defer db.Close()
			vs, err := db.Versions(cmd.Context())
			if err != nil {
				return err
			}
			var parts []string
			for _, l := range slices.Sorted(maps.Keys(vs)) {
				parts = append(parts, fmt.Sprintf("%s %d", l, vs[l]))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "schema at version: %s (%s)\n", strings.Join(parts, ", "), db.Dialect())
			return nil
		},
	}
	cmd.Flags().StringVar(&dsn, "dsn", defaultDSN, "database: postgres://… or sqlite:PATH")
	cmd.Flags().StringVar(&path, "config", "", "configuration file whose migration lines to apply (default: every line of this build)")
	return cmd
}

// buildLines is every migration line of this build (the tests' databases
// hold them all).
func buildLines() []store.Line { return app.AllSchema(newRegistry()) }
