package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/broker/kafka"
	"github.com/msgx/msgx/pipeline/routepassport"
	"github.com/msgx/msgx/store"
)

func newRouteCmd() *cobra.Command {
	var (
		dsn, seeds, group, listen   string
		instance                    string
		input, dlq, routeIn, georef string
		testController, migrate     bool
		batch                       int
	)
	cmd := &cobra.Command{
		Use:   "route",
		Short: "Run the route-passport pipeline: Kafka JSON -> WKT -> PostgreSQL + outbox -> two topics, DLQ",
		Long: `Consumes route passports from Kafka, stores each with its two outbox events in one
PostgreSQL transaction, relays the events to pcp.route.in.v1 and
pcp.route.georeference.v1, and dead-letters records that break the contract
(docs/routepassport.md). Runs until interrupted (SIGINT/SIGTERM: graceful stop).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			log := slog.New(slog.NewJSONHandler(cmd.ErrOrStderr(), nil))
			var sopts []store.Option
			if migrate {
				sopts = append(sopts, store.WithMigrate(routepassport.Schema()))
			}
			db, err := store.Open(ctx, dsn, append(sopts, store.WithLogger(log))...)
			if err != nil {
				return err
			}
			defer db.Close()
			reg := prometheus.NewRegistry()
			reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
			kopts := []kafka.Option{kafka.SeedBrokers(strings.Split(seeds, ",")...), kafka.WithLogger(log)}
			if instance != "" {
				kopts = append(kopts, kafka.WithInstanceID(instance))
			}
			b := broker.New("kafka", kafka.New(kopts...),
				broker.WithLogger(log), broker.WithRegisterer(reg))
			if err := b.Start(ctx); err != nil {
				return err
			}
			defer func() {
				sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				_ = b.Stop(sctx)
			}()
			p, err := routepassport.New(db, b, routepassport.WithTopics(input, dlq, routeIn, georef),
				routepassport.WithGroup(group), routepassport.WithLogger(log), routepassport.WithRegisterer(reg),
				routepassport.WithTestController(testController), routepassport.WithBatchSize(batch))
			if err != nil {
				return err
			}
			defer p.Close()
			if listen != "" {
				mux := http.NewServeMux()
				mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
				mux.Handle("/route-processing/test/records", p.TestController())
				ln, err := net.Listen("tcp", listen)
				if err != nil {
					return err
				}
				srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
				go func() {
					if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
						log.Error("http server", "err", err)
					}
				}()
				defer func() { _ = srv.Close() }()
				fmt.Fprintln(cmd.OutOrStdout(), "listening on", ln.Addr())
			}
			return p.Run(ctx)
		},
	}
	f := cmd.Flags()
	f.StringVar(&dsn, "dsn", "postgres://root@127.0.0.1:5432/test?sslmode=disable", "PostgreSQL DSN")
	f.BoolVar(&migrate, "migrate", true, "apply the embedded migrations first")
	f.StringVar(&seeds, "kafka", "127.0.0.1:9092", "Kafka seed brokers, comma-separated")
	f.StringVar(&group, "group", routepassport.DefaultGroup, "consumer group")
	f.StringVar(&instance, "instance-id", "", "static group membership: a restart under the same id takes its partitions back at once (stable per process, unique among running ones); empty: a dynamic member")
	f.StringVar(&input, "input-topic", routepassport.InputTopic, "input topic")
	f.StringVar(&dlq, "dlq-topic", routepassport.DeadLetterTopic, "dead-letter topic")
	f.StringVar(&routeIn, "route-in-topic", routepassport.RouteInTopic, "mission-planning output topic")
	f.StringVar(&georef, "georeference-topic", routepassport.GeoreferenceTopic, "request-matching output topic")
	f.IntVar(&batch, "batch", 200, "records per batch (at most)")
	f.StringVar(&listen, "listen", "", "address of the HTTP endpoint (/metrics, /route-processing/test/records); empty: none")
	f.BoolVar(&testController, "test-controller", false, "route-processing.test-controller.enabled: accept records on /route-processing/test/records")
	return cmd
}
