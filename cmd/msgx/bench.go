package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/broker/mem"
	"github.com/msgx/msgx/internal/bench/brokerbench"
)

func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure a workload side by side with its peer and print RESULT lines",
	}
	cmd.AddCommand(newBenchBrokerCmd())
	cmd.AddCommand(outboxBenchCmds()...)
	return cmd
}

// brokerBenchAdapters returns the broker benchmark of each adapter, built from
// the command's flags.
func brokerBenchAdapters(f *brokerBenchFlags) map[string]func(ctx context.Context) (brokerbench.Adapter, func(), error) {
	return map[string]func(ctx context.Context) (brokerbench.Adapter, func(), error){
		"mem": func(context.Context) (brokerbench.Adapter, func(), error) {
			srv := mem.NewServer()
			return brokerbench.Adapter{
				Name:      "mem",
				NewDriver: func(context.Context) (driver.Broker, error) { return mem.New(srv), nil },
				NewRaw:    func(context.Context) (brokerbench.Raw, error) { return mem.NewBenchRaw(srv), nil },
			}, srv.Close, nil
		},
	}
}

type brokerBenchFlags struct {
	adapter string
	cfg     brokerbench.Config
	timeout time.Duration
	url     string
}

func newBenchBrokerCmd() *cobra.Command {
	f := &brokerBenchFlags{}
	cmd := &cobra.Command{
		Use:   "broker",
		Short: "Confirmed publish and consume+ack msgs/s through the port beside the raw client",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			adapters := brokerBenchAdapters(f)
			mk, ok := adapters[f.adapter]
			if !ok {
				names := make([]string, 0, len(adapters))
				for n := range adapters {
					names = append(names, n)
				}
				slices.Sort(names)
				return fmt.Errorf("unknown adapter %q (have %s)", f.adapter, strings.Join(names, ", "))
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
			defer cancel()
			a, cleanup, err := mk(ctx)
			if err != nil {
				return err
			}
			defer cleanup()
			_, err = brokerbench.Run(ctx, a, f.cfg, cmd.OutOrStdout())
			return err
		},
	}
	cmd.Flags().StringVar(&f.adapter, "adapter", "mem", "adapter to measure")
	cmd.Flags().StringVar(&f.url, "url", "", "broker address (default: the adapter's local default)")
	cmd.Flags().IntVar(&f.cfg.N, "n", 20000, "messages per variant")
	cmd.Flags().IntVar(&f.cfg.Size, "size", 200, "payload bytes")
	cmd.Flags().IntVar(&f.cfg.Batch, "batch", 100, "messages per confirmed publish")
	cmd.Flags().IntVar(&f.cfg.Concurrency, "concurrency", 1, "port handlers at once")
	cmd.Flags().DurationVar(&f.timeout, "timeout", 10*time.Minute, "give up after this long")
	return cmd
}
