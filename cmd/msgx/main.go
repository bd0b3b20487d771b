// Command msgx is the message-exchange engine's command line: it runs the
// service and its demo, applies migrations and administers a running service.
// The benchmarks and the fault campaign are the lab's commands (msgx-bench,
// msgx-reliability), not linked here.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/msgx/msgx/buildinfo"
	"github.com/spf13/cobra"

	// The time zone database in the binary: an airport's zone
	// (airport.timezone) loads on a host or image without one.
	_ "time/tzdata"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// A second signal during the stop ends the process at once.
	context.AfterFunc(ctx, stop)
	if err := newRoot().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "msgx:", err)
		os.Exit(1)
	}
}

func newRoot() *cobra.Command {
	var showVersion bool
	root := &cobra.Command{
		Use:           "msgx",
		Short:         "msgx moves business messages between mailboxes, HTTP, databases and brokers without loss",
		SilenceUsage:  true,
		SilenceErrors: true,
		// The root answers --version itself: cobra's own version flag prints
		// through text/template, whose reflective method calls keep the linker
		// from dropping any unused exported method in the whole binary.
		RunE: func(cmd *cobra.Command, _ []string) error {
			if showVersion {
				return build().Write(cmd.OutOrStdout())
			}
			return cmd.Help()
		},
	}
	root.Flags().BoolVarP(&showVersion, "version", "v", false, "print the version, as msgx version does")
	root.AddCommand(newVersionCmd(), newDemoCmd(), newMigrateCmd(),
		newServeCmd(), newStatusCmd(), newDeadCmd(), newReplayCmd(), newSkipCmd(),
		newQueryCmd("requests", "Outbound requests (RQFD/RQRD) of the SIS pipeline: a table, or --json", printRequests),
		newFlightsCmd(),
		newBackfillCmd(), newRouteCmd(), newCompareCmd(os.Exit), newManCmd(), newConfigCmd())
	return root
}

// build is this binary's build.
func build() buildinfo.Info { return buildinfo.Read(version, compiledAdapters()) }

func newVersionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the msgx version, the revision it was built from, its Go version and the broker adapters compiled in",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(build())
			}
			return build().Write(cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print it as JSON")
	return cmd
}
