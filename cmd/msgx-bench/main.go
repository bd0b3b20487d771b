// Command msgx-bench measures msgx's workloads, each side by side with its
// peer (the raw broker client, one transaction per message, the database's
// ceiling, River and Watermill), and prints RESULT lines and ratios
// (docs/benchmarks.md). It is the lab's command: the msgx binary links none
// of it.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRoot().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "msgx-bench:", err)
		os.Exit(1)
	}
}

func newRoot() *cobra.Command {
	var profile, memProfile string
	var stopProfile func()
	cmd := &cobra.Command{
		Use:           "msgx-bench",
		Short:         "Measure a workload of msgx side by side with its peer and print RESULT lines",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			if profile == "" {
				return nil
			}
			f, err := os.Create(profile)
			if err != nil {
				return err
			}
			if err := pprof.StartCPUProfile(f); err != nil {
				_ = f.Close()
				return err
			}
			stopProfile = func() { pprof.StopCPUProfile(); _ = f.Close() }
			return nil
		},
		PersistentPostRunE: func(*cobra.Command, []string) error {
			if stopProfile != nil {
				stopProfile()
			}
			if memProfile == "" {
				return nil
			}
			f, err := os.Create(memProfile)
			if err != nil {
				return err
			}
			// Every allocation of the run, sampled: "go tool pprof
			// -sample_index=alloc_space" shows where the collector's work
			// comes from.
			return errors.Join(pprof.Lookup("allocs").WriteTo(f, 0), f.Close())
		},
	}
	cmd.PersistentFlags().StringVar(&profile, "cpuprofile", "", "write a CPU profile of this process to the file")
	cmd.PersistentFlags().StringVar(&memProfile, "memprofile", "", "write the allocations of this process to the file at the end")
	cmd.AddCommand(newBenchBrokerCmd())
	cmd.AddCommand(newBenchInboxFIFOCmd())
	cmd.AddCommand(outboxBenchCmds()...)
	cmd.AddCommand(newBenchRouteIngestCmd())
	return cmd
}
