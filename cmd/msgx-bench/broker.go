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
	"github.com/msgx/msgx/broker/pulsar"
	"github.com/msgx/msgx/broker/pulsar/pulsarfake"
	"github.com/msgx/msgx/broker/rabbitmq"
	"github.com/msgx/msgx/lab/bench/brokerbench"
	"github.com/msgx/msgx/lab/bench/brokerbench/kafkabench"
	"github.com/msgx/msgx/lab/bench/brokerbench/membench"
	"github.com/msgx/msgx/lab/bench/brokerbench/mqttbench"
	"github.com/msgx/msgx/lab/bench/brokerbench/natsbench"
	"github.com/msgx/msgx/lab/bench/brokerbench/pulsarbench"
	"github.com/msgx/msgx/lab/bench/brokerbench/rabbitmqbench"
)

// brokerBenchAdapters returns the broker benchmark of each adapter, built from
// the command's flags.
func brokerBenchAdapters(f *brokerBenchFlags) map[string]func(ctx context.Context) (brokerbench.Adapter, func(), error) {
	return map[string]func(ctx context.Context) (brokerbench.Adapter, func(), error){
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
		"pulsar": func(context.Context) (brokerbench.Adapter, func(), error) {
			url, cleanup := f.url, func() {}
			if url == "" { // no service given: an in-process fake broker
				srv, err := pulsarfake.New()
				if err != nil {
					return brokerbench.Adapter{}, nil, err
				}
				url, cleanup = srv.URL(), func() { _ = srv.Close() }
			}
			return brokerbench.Adapter{
				Name:      "pulsar",
				Setup:     pulsarbench.Setup(url),
				NewDriver: func(context.Context) (driver.Broker, error) { return pulsar.New(url), nil },
				NewRaw: func(context.Context) (brokerbench.Raw, error) {
					return pulsarbench.NewRaw(url, 2*f.cfg.Batch)
				},
			}, cleanup, nil
		},
		"nats": func(ctx context.Context) (brokerbench.Adapter, func(), error) {
			return natsbench.Adapter(ctx, f.url, 2*f.cfg.Batch)
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
	cmd.Flags().IntVar(&f.cfg.Rounds, "rounds", 5, "alternating raw/port rounds; the median round is reported")
	cmd.Flags().DurationVar(&f.timeout, "timeout", 10*time.Minute, "give up after this long")
	return cmd
}
