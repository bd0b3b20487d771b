package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/broker/kafka/kafkabench"
	"github.com/msgx/msgx/broker/mem"
	"github.com/msgx/msgx/broker/mem/membench"
	"github.com/msgx/msgx/broker/mqtt/mqttbench"
	"github.com/msgx/msgx/broker/nats/natsbench"
	"github.com/msgx/msgx/broker/rabbitmq"
	"github.com/msgx/msgx/broker/rabbitmq/rabbitmqbench"
	"github.com/msgx/msgx/internal/bench/brokerbench"
)

func newBenchCmd() *cobra.Command {
	var profile, memProfile string
	var stopProfile func()
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure a workload side by side with its peer and print RESULT lines",
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

// brokerBenchAdapters returns the broker benchmark of each adapter, built from
// the command's flags.
func brokerBenchAdapters(f *brokerBenchFlags) map[string]func(ctx context.Context) (brokerbench.Adapter, func(), error) {
	m := map[string]func(ctx context.Context) (brokerbench.Adapter, func(), error){
		"mem": func(context.Context) (brokerbench.Adapter, func(), error) {
			srv := mem.NewServer()
			return brokerbench.Adapter{
				Name:      "mem",
				NewDriver: func(context.Context) (driver.Broker, error) { return mem.New(srv), nil },
				NewRaw:    func(context.Context) (brokerbench.Raw, error) { return membench.NewRaw(srv), nil },
			}, srv.Close, nil
		},
		"rabbitmq": func(context.Context) (brokerbench.Adapter, func(), error) {
			url, batch := f.url, f.cfg.Batch
			if url == "" {
				url = rabbitmq.DefaultURL
			}
			if batch <= 0 {
				batch = 100
			}
			topo := rabbitmqbench.NewTopology(url)
			return brokerbench.Adapter{
				Name:      "rabbitmq",
				Setup:     topo.Setup,
				NewDriver: func(context.Context) (driver.Broker, error) { return rabbitmq.New(rabbitmq.WithURL(url)), nil },
				// The port's listener prefetches 2×batch; the raw consumer does the same.
				NewRaw: func(ctx context.Context) (brokerbench.Raw, error) { return rabbitmqbench.NewRaw(ctx, url, 2*batch) },
			}, topo.Cleanup, nil
		},
		"mqtt": func(ctx context.Context) (brokerbench.Adapter, func(), error) {
			if f.url != "" {
				return mqttbench.Adapter(f.url, 2*f.cfg.Batch), func() {}, nil
			}
			addr, stop, err := mqttbench.StartMosquitto(ctx)
			if err != nil {
				return brokerbench.Adapter{}, nil, err
			}
			return mqttbench.Adapter(addr, 2*f.cfg.Batch), stop, nil
		},
		"kafka": func(ctx context.Context) (brokerbench.Adapter, func(), error) {
			return kafkabench.New(ctx, f.url) // in-process kfake unless --url names seed brokers
		},
		"nats": func(ctx context.Context) (brokerbench.Adapter, func(), error) {
			return natsbench.Adapter(ctx, f.url, 2*f.cfg.Batch)
		},
	}
	// Pulsar's, unless built with -tags nopulsar (bench_pulsar.go).
	addPulsarBench(m, f)
	return m
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
	cmd.Flags().IntVar(&f.cfg.Rounds, "rounds", 5, "alternating raw/port rounds; the median round is reported")
	cmd.Flags().DurationVar(&f.timeout, "timeout", 10*time.Minute, "give up after this long")
	return cmd
}
