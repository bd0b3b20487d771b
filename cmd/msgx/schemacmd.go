package main

import (
	"github.com/spf13/cobra"

	"github.com/msgx/msgx/app/config"
)

// newConfigCmd is `msgx config`: what msgx knows of its configuration file.
func newConfigCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "The configuration file's description"}
	cmd.AddCommand(&cobra.Command{
		Use:   "schema",
		Short: "Print the configuration file's JSON Schema (the keys of this build's adapters; deploy/msgx.schema.json)",
		Long: `Print the JSON Schema (2020-12) of the configuration file: every key
msgx serve --check knows, with its type, and no other; a broker block has
the keys of its kind. Editors that read a yaml-language-server line check
and complete a file by it:

  # yaml-language-server: $schema=msgx.schema.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := config.Schema(adapters())
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(b)
			return err
		},
	})
	return cmd
}
