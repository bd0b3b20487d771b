package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// newManCmd writes the manual pages of every command, generated from the
// command tree (their text is each command's help).
func newManCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "man DIR",
		Short: "Write the manual pages of msgx and of every command (section 1) to DIR",
		Example: `  msgx man /usr/local/share/man/man1 && man msgx-serve
  msgx completion bash > /etc/bash_completion.d/msgx    # shell completion: bash, zsh, fish, powershell`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := os.MkdirAll(args[0], 0o755); err != nil {
				return err
			}
			root := cmd.Root()
			root.DisableAutoGenTag = true
			// The help texts are plain text, the generator reads Markdown:
			// an underscore (MSGX_STORE_DSN) would start emphasis.
			var plain func(c *cobra.Command)
			plain = func(c *cobra.Command) {
				c.Short, c.Long = strings.ReplaceAll(c.Short, "_", `\_`), strings.ReplaceAll(c.Long, "_", `\_`)
				for _, sub := range c.Commands() {
					plain(sub)
				}
			}
			plain(root)
			hdr := &doc.GenManHeader{Title: "MSGX", Section: "1", Source: "msgx " + build().Version, Manual: "msgx manual"}
			if err := doc.GenManTree(root, hdr, args[0]); err != nil {
				return fmt.Errorf("man pages: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "manual pages written to %s\n", args[0])
			return nil
		},
	}
}
