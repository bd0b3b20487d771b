package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/msgx/msgx/app"
	"github.com/msgx/msgx/app/config"
)

func newServeCmd() *cobra.Command {
	var path string
	var check bool
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the service: mailbox pollers, HTTP ingress, inbox streams, pipelines, relays and the admin listener",
		Long: `Run the msgx service from one configuration file (--config, or MSGX_CONFIG).
Without a file it runs the embedded default: a SQLite file and the in-process
broker. Every key can be overridden by an environment variable: MSGX_ and the
key path in upper case with underscores (store.dsn: MSGX_STORE_DSN).
SIGINT or SIGTERM stops intake, lets the work in flight finish or gives it
back unsettled, and exits 0. See docs/operations.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if path == "" {
				path = os.Getenv("MSGX_CONFIG")
			}
			cfg, err := config.Load(path, os.Environ())
			if err != nil {
				return err
			}
			if check {
				fmt.Fprintf(cmd.OutOrStdout(), "configuration valid (profile %s); keys:\n  %s\n", cfg.Profile, strings.Join(config.Keys(cfg), "\n  "))
				return nil
			}
			a, err := app.New(cmd.Context(), cfg, newRegistry())
			if err != nil {
				return err
			}
			return a.Run(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&path, "config", "", "configuration file (default: MSGX_CONFIG, else the embedded default)")
	cmd.Flags().BoolVar(&check, "check", false, "validate the configuration, list its keys and exit")
	return cmd
}
