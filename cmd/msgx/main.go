// Command msgx is the message-exchange engine's command line: it runs the
// service and its demo, applies migrations and administers a running service.
// The benchmarks and the fault campaign are the lab's commands (msgx-bench,
// msgx-reliability), not linked here.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
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
	root := &cobra.Command{
		Use:           "msgx",
		Short:         "msgx moves business messages between mailboxes, HTTP, databases and brokers without loss",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newVersionCmd(), newDemoCmd(), newMigrateCmd(),
		newServeCmd(), newStatusCmd(), newDeadCmd(), newReplayCmd(), newSkipCmd(),
		newQueryCmd("requests", "Outbound requests (RQFD/RQRD) of the SIS pipeline: a table, or --json", printRequests),
		newFlightsCmd(),
		newBackfillCmd(), newRouteCmd())
	return root
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the msgx version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), "msgx", version)
		},
	}
}
