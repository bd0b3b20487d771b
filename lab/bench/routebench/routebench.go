// Package routebench measures the route-passport pipeline end to end
// (`msgx-bench route-ingest`): records waiting on the input topic of an
// in-process Kafka (kfake) are consumed, stored with their outbox events in
// a fresh PostgreSQL schema, and relayed by the real relay to the two output
// topics; the clock stops when both topics hold an event for every record.
// The ingest variant runs the same pipeline without its relay and stops the
// clock when every record is stored: the ceiling of the end-to-end run on
// the same machine.
package routebench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/broker/kafka"
	"github.com/msgx/msgx/lab/bench"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/pipeline/routepassport"
	"github.com/msgx/msgx/store"
)

// Config of a run.
type Config struct {
	DSN        string
	N          int           // records
	Routes     int           // distinct routeIds
	Points     int           // positions per LineString
	Partitions int           // of the input and output topics
	Batch      int           // records per ingestion transaction (at most)
	Poll       time.Duration // relay poll interval
	// Variants to run, in order: "e2e" (the default: until both output
	// topics hold every record's event) and "ingest" (the pipeline without
	// its relay, until every record is stored with its outbox events: the
	// ceiling the relay's work is measured against), and "e2e-wal" (e2e
	// with the outbox's WAL mode: wal_level=logical).
	Variants []string
	// Rounds repeats the set, every other round in reverse order; with
	// both variants each round reports e2e/ingest, and the run ends with
	// its median.
	Rounds   int
	Progress io.Writer // progress lines (nil: none)
}

// Run measures each variant cfg.Rounds times, every run with a cluster,
// input records and schema of its own, and prints the RESULT lines and the
// ratios.
func Run(ctx context.Context, cfg Config, out io.Writer) ([]bench.Result, error) {
	if cfg.N < 1 || cfg.Routes < 1 || cfg.Points < 2 || cfg.Partitions < 1 || cfg.Batch < 1 {
		return nil, errors.New("routebench: n, routes, partitions and batch must be positive, points at least 2")
	}
	if len(cfg.Variants) == 0 {
		cfg.Variants = []string{"e2e"}
	}
	for _, v := range cfg.Variants {
		if v != "e2e" && v != "ingest" && v != "e2e-wal" {
			return nil, fmt.Errorf("routebench: unknown variant %q (e2e, e2e-wal, ingest)", v)
		}
	}
	if err := bench.CheckDistinct(cfg.Variants); err != nil {
		return nil, fmt.Errorf("routebench: %w", err)
	}
	rounds := max(cfg.Rounds, 1)
	var (
		all    []bench.Result
		ratios = bench.Ratios{Workload: "route-ingest"}
	)
	for round := range rounds {
		got := map[string]bench.Result{}
		for _, v := range bench.RoundOrder(cfg.Variants, round) {
			r, err := runOne(ctx, cfg, v)
			if err != nil {
				return all, fmt.Errorf("routebench: variant %s: %w", v, err)
			}
			if len(cfg.Variants) > 1 {
				r.Variant = v
			}
			r.Print(out)
			all = append(all, r)
			got[v] = r
		}
		if _, ok := got["ingest"]; ok && got["e2e"].N > 0 {
			ratios.Add(out, "e2e/ingest", got["e2e"], got["ingest"])
		}
		if _, ok := got["e2e-wal"]; ok && got["e2e"].N > 0 {
			ratios.Add(out, "e2e-wal/e2e", got["e2e-wal"], got["e2e"])
		}
	}
	if rounds > 1 {
		ratios.PrintMedians(out)
	}
	return all, nil
}

// runOne produces cfg.N records to a fresh in-process cluster, then times
// the pipeline in a fresh schema until the variant's end.
func runOne(ctx context.Context, cfg Config, variant string) (bench.Result, error) {
	progress := func(format string, a ...any) {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, format+"\n", a...)
		}
	}
	kf, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		return bench.Result{}, err
	}
	defer kf.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kf.ListenAddrs()...), kgo.ProducerBatchMaxBytes(4<<20), kgo.MaxBufferedRecords(100_000))
	if err != nil {
		return bench.Result{}, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	topics := []string{routepassport.InputTopic, routepassport.DeadLetterTopic, routepassport.RouteInTopic, routepassport.GeoreferenceTopic}
	if _, err := adm.CreateTopics(ctx, int32(cfg.Partitions), 1, nil, topics...); err != nil {
		return bench.Result{}, err
	}

	progress("%s: producing %d records", variant, cfg.N)
	if err := produce(ctx, cl, cfg); err != nil {
		return bench.Result{}, err
	}

	sc, err := bench.NewSchema(ctx, cfg.DSN, "routebench")
	if err != nil {
		return bench.Result{}, err
	}
	defer func() { _ = sc.Drop() }()
	dsn := bench.WithParam(sc.DSN, "application_name", appName)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	db, err := store.Open(ctx, dsn, store.WithMigrate(routepassport.Schema()), store.WithLogger(quiet), store.WithMaxConns(8))
	if err != nil {
		return bench.Result{}, err
	}
	defer db.Close()
	b := broker.New("kafka", kafka.New(kafka.SeedBrokers(kf.ListenAddrs()...), kafka.WithLogger(quiet)), broker.WithLogger(quiet))
	if err := b.Start(ctx); err != nil {
		return bench.Result{}, err
	}
	defer func() { _ = b.Stop(context.Background()) }()
	reg := prometheus.NewRegistry()
	popts := []routepassport.Option{routepassport.WithLogger(quiet), routepassport.WithBatchSize(cfg.Batch),
		routepassport.WithRegisterer(reg), routepassport.WithRelay(variant != "ingest"),
		routepassport.WithRelayOptions(outbox.WithPollInterval(cfg.Poll))}
	if variant == "e2e-wal" {
		wal, drop := walOptions(cfg.DSN, dsn)
		defer drop()
		popts = append(popts, wal...)
	}
	p, err := routepassport.New(db, b, popts...)
	if err != nil {
		return bench.Result{}, err
	}
	defer p.Close()

	progress("%s: running the pipeline", variant)
	cpu0, db0 := bench.ProcessCPU(), backendCPU(ctx, db)
	start := time.Now()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(runCtx) }()
	// Both ends are read from the process (the broker's end offsets, the
	// pipeline's counter), never from the database the pipeline works in.
	count := func(ctx context.Context) (map[string]int64, error) {
		return ingested(reg)
	}
	if variant != "ingest" {
		count = func(ctx context.Context) (map[string]int64, error) { return endOffsets(ctx, adm) }
	}
	err = waitFor(ctx, int64(cfg.N), count, done, func(sums map[string]int64) {
		progress("%s: %v %v", variant, time.Since(start).Round(time.Millisecond), sums)
	})
	elapsed := time.Since(start)
	cpu, dbCPU := bench.ProcessCPU()-cpu0, backendCPU(ctx, db)-db0
	stop()
	if rerr := <-done; err == nil && rerr != nil {
		err = rerr
	}
	if err != nil {
		return bench.Result{}, err
	}
	var stored int
	if err := db.QueryRow(ctx, "SELECT count(*) FROM route_passport_sources").Scan(&stored); err != nil {
		return bench.Result{}, err
	}
	if stored != cfg.N {
		return bench.Result{}, fmt.Errorf("%d records stored, want %d", stored, cfg.N)
	}
	events := 2 * cfg.N
	if variant == "ingest" {
		var pending int
		if err := db.QueryRow(ctx, "SELECT count(*) FROM msgx_outbox WHERE status = 'PENDING'").Scan(&pending); err != nil {
			return bench.Result{}, err
		}
		if pending != events {
			return bench.Result{}, fmt.Errorf("%d outbox events written, want %d", pending, events)
		}
	}
	return bench.Result{Workload: "route-ingest", N: cfg.N, Elapsed: elapsed, Extra: [][2]string{
		{"partitions", strconv.Itoa(cfg.Partitions)}, {"batch", strconv.Itoa(cfg.Batch)}, {"routes", strconv.Itoa(cfg.Routes)},
		{"points", strconv.Itoa(cfg.Points)}, {"ingested", strconv.Itoa(stored)}, {"events", strconv.Itoa(events)},
		{"cpu_us_per_record", fmt.Sprintf("%.1f", float64(cpu.Microseconds())/float64(cfg.N))},
		{"db_cpu_us_per_record", fmt.Sprintf("%.1f", float64(dbCPU.Microseconds())/float64(cfg.N))},
	}}, nil
}

func produce(ctx context.Context, cl *kgo.Client, cfg Config) error {
	var firstErr error
	for i := range cfg.N {
		route := "R-" + strconv.Itoa(i%cfg.Routes)
		var sb strings.Builder
		fmt.Fprintf(&sb, `{"routeId":%q,"routeNameFull":"Survey route %d","requestId":"SR-%d","traceId":"t-%d","correlationId":"c-%d",`+
			`"createdAt":"2024-05-01T10:00:00Z","properties":{"seq":%d},"geometry":{"type":"LineString","coordinates":[`, route, i, i, i, i, i)
		for j := range cfg.Points {
			if j > 0 {
				sb.WriteByte(',')
			}
			fmt.Fprintf(&sb, "[%d.%03d,55.%d]", 4900000+j*10, i%1000, j)
		}
		sb.WriteString("]}}")
		cl.Produce(ctx, &kgo.Record{Topic: routepassport.InputTopic, Key: []byte(route), Value: []byte(sb.String())},
			func(_ *kgo.Record, err error) {
				if err != nil && firstErr == nil {
					firstErr = err
				}
			})
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	return firstErr
}

// waitFor polls count every 10 ms until each of its sums reaches n,
// reporting the sums about once a second.
func waitFor(ctx context.Context, n int64, count func(context.Context) (map[string]int64, error), done <-chan error, report func(map[string]int64)) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	last := time.Now()
	for {
		sums, err := count(ctx)
		if err != nil {
			return err
		}
		if time.Since(last) >= time.Second {
			last = time.Now()
			report(sums)
		}
		if reached(sums, n) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("routebench: %w (%v of %d)", ctx.Err(), sums, n)
		case err := <-done:
			return fmt.Errorf("routebench: pipeline stopped: %v", err)
		case <-t.C:
		}
	}
}

// reached reports whether sums has values and each is at least n.
func reached(sums map[string]int64, n int64) bool {
	for _, v := range sums {
		if v < n {
			return false
		}
	}
	return len(sums) > 0
}

// endOffsets sums the end offsets of each output topic.
func endOffsets(ctx context.Context, adm *kadm.Client) (map[string]int64, error) {
	ends, err := adm.ListEndOffsets(ctx, routepassport.RouteInTopic, routepassport.GeoreferenceTopic)
	if err != nil {
		return nil, err
	}
	sums := map[string]int64{routepassport.RouteInTopic: 0, routepassport.GeoreferenceTopic: 0}
	ends.Each(func(o kadm.ListedOffset) { sums[o.Topic] += o.Offset })
	return sums, nil
}

// ingested reads the pipeline's count of records stored with their events.
func ingested(reg *prometheus.Registry) (map[string]int64, error) {
	const name = "route_passport_ingest_success_total"
	mfs, err := reg.Gather()
	if err != nil {
		return nil, err
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return map[string]int64{"ingested": int64(mf.GetMetric()[0].GetCounter().GetValue())}, nil
		}
	}
	return map[string]int64{"ingested": 0}, nil
}

// appName marks the benchmark's database sessions, whose CPU time is read
// from /proc.
const appName = "routebench"

func backendCPU(ctx context.Context, db *store.DB) time.Duration {
	byPID, _ := bench.BackendCPU(ctx, db, appName)
	var sum time.Duration
	for _, c := range byPID {
		sum += c
	}
	return sum
}
