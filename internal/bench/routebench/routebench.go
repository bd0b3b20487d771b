// Package routebench measures the route-passport pipeline end to end
// (`msgx bench route-ingest`): records waiting on the input topic of an
// in-process Kafka (kfake) are consumed, stored with their outbox events in
// a fresh PostgreSQL schema, and relayed by the real relay to the two output
// topics; the clock stops when both topics hold an event for every record.
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

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/broker/kafka"
	"github.com/msgx/msgx/internal/bench"
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
	Progress   io.Writer     // progress lines (nil: none)
}

// Run produces cfg.N records, then times the pipeline until both output
// topics hold cfg.N events, and prints the RESULT line.
func Run(ctx context.Context, cfg Config, out io.Writer) (bench.Result, error) {
	if cfg.N < 1 || cfg.Routes < 1 || cfg.Points < 2 || cfg.Partitions < 1 || cfg.Batch < 1 {
		return bench.Result{}, errors.New("routebench: n, routes, partitions and batch must be positive, points at least 2")
	}
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

	progress("producing %d records", cfg.N)
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
	db, err := store.Open(ctx, dsn, store.WithMigrate(), store.WithLogger(quiet), store.WithMaxConns(8))
	if err != nil {
		return bench.Result{}, err
	}
	defer db.Close()
	b := broker.New("kafka", kafka.New(kafka.SeedBrokers(kf.ListenAddrs()...), kafka.WithLogger(quiet)), broker.WithLogger(quiet))
	if err := b.Start(ctx); err != nil {
		return bench.Result{}, err
	}
	defer func() { _ = b.Stop(context.Background()) }()
	p, err := routepassport.New(db, b, routepassport.WithLogger(quiet), routepassport.WithBatchSize(cfg.Batch),
		routepassport.WithRelayOptions(outbox.WithPollInterval(cfg.Poll)))
	if err != nil {
		return bench.Result{}, err
	}
	defer p.Close()

	progress("running the pipeline")
	cpu0, db0 := bench.ProcessCPU(), backendCPU(ctx, db)
	start := time.Now()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(runCtx) }()
	last := time.Now()
	dbg = func(sums map[string]int64) {
		if time.Since(last) > time.Second {
			last = time.Now()
			var c int
			_ = db.QueryRow(ctx, "SELECT count(*) FROM route_passport_sources").Scan(&c)
			progress("%v ingested %d, out %v", time.Since(start).Round(time.Millisecond), c, sums)
		}
	}
	err = waitForEvents(ctx, adm, cfg.N, done)
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
	res := bench.Result{Workload: "route-ingest", N: cfg.N, Elapsed: elapsed, Extra: [][2]string{
		{"partitions", strconv.Itoa(cfg.Partitions)}, {"batch", strconv.Itoa(cfg.Batch)}, {"routes", strconv.Itoa(cfg.Routes)},
		{"points", strconv.Itoa(cfg.Points)}, {"ingested", strconv.Itoa(stored)}, {"events", strconv.Itoa(2 * cfg.N)},
		{"cpu_us_per_record", fmt.Sprintf("%.1f", float64(cpu.Microseconds())/float64(cfg.N))},
		{"db_cpu_us_per_record", fmt.Sprintf("%.1f", float64(dbCPU.Microseconds())/float64(cfg.N))},
	}}
	res.Print(out)
	return res, nil
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

var dbg func(map[string]int64)

// waitForEvents polls the output topics' end offsets until each holds n.
func waitForEvents(ctx context.Context, adm *kadm.Client, n int, done <-chan error) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		ends, err := adm.ListEndOffsets(ctx, routepassport.RouteInTopic, routepassport.GeoreferenceTopic)
		if err != nil {
			return err
		}
		sums := map[string]int64{}
		ends.Each(func(o kadm.ListedOffset) { sums[o.Topic] += o.Offset })
		if dbg != nil {
			dbg(sums)
		}
		if sums[routepassport.RouteInTopic] >= int64(n) && sums[routepassport.GeoreferenceTopic] >= int64(n) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("routebench: %w (route-in %d, georeference %d of %d)", ctx.Err(),
				sums[routepassport.RouteInTopic], sums[routepassport.GeoreferenceTopic], n)
		case err := <-done:
			return fmt.Errorf("routebench: pipeline stopped: %v", err)
		case <-t.C:
		}
	}
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
