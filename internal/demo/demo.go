// Package demo runs the engine end to end on the embedded default — SQLite for
// the store and the mailbox table, the in-process broker for the events —
// with real SIS FLOP traffic: mailbox rows → strict-FIFO inbox → flight rows
// and outbox events in one transaction → per-key relay → broker consumer.
package demo

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/broker/mem"
	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/internal/bench/inboxbench"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/source/mailbox"
	"github.com/msgx/msgx/store"
)

// Config says what to run.
type Config struct {
	DSN     string // default sqlite:msgx-demo.db
	N       int    // messages put in the mailbox (default 500)
	Flights int    // distinct FLIDs (default 50)
	Out     io.Writer
	Log     *slog.Logger
}

// Result is what the run saw.
type Result struct {
	Processed, Events, OrderViolations int
	Elapsed                            time.Duration
}

// Run feeds the mailbox and runs the pipeline until every message is processed
// and every event has reached the consumer, printing progress to cfg.Out.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if cfg.DSN == "" {
		cfg.DSN = "sqlite:msgx-demo.db"
	}
	if cfg.N <= 0 {
		cfg.N = 500
	}
	if cfg.Flights <= 0 {
		cfg.Flights = 50
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	db, err := store.Open(ctx, cfg.DSN, store.WithMigrate(), store.WithLogger(cfg.Log))
	if err != nil {
		return Result{}, err
	}
	defer db.Close()
	if err := inboxbench.CreateFlightTable(ctx, db); err != nil {
		return Result{}, fmt.Errorf("demo: flight table: %w", err)
	}
	table, err := mailbox.NewStore(db)
	if err != nil {
		return Result{}, err
	}

	// The traffic: real FLOP messages with fresh sequence numbers, so each has
	// its own business identity even when the demo runs again on the same file.
	msgs, err := inboxbench.Messages(cfg.N, cfg.Flights, time.Now().UnixNano()%1_000_000_000)
	if err != nil {
		return Result{}, err
	}
	start := time.Now()
	for _, m := range msgs {
		if _, err := table.Insert(ctx, m, time.Now(), mailbox.Meta{}); err != nil {
			return Result{}, fmt.Errorf("demo: mailbox insert: %w", err)
		}
	}
	fmt.Fprintf(cfg.Out, "mailbox: %d SIS FLOP messages for %d flights in %s (%s)\n", len(msgs), cfg.Flights, table.Name(), cfg.DSN)

	srv := mem.NewServer()
	defer srv.Close()
	b := broker.New("mem", mem.New(srv), broker.WithLogger(cfg.Log))
	if err := b.Start(ctx); err != nil {
		return Result{}, err
	}
	defer b.Stop(context.WithoutCancel(ctx))

	// A downstream consumer of the flight events, checking per-flight order.
	var (
		mu         sync.Mutex
		lastByKey  = map[string]string{}
		violations int
		events     atomic.Int64
	)
	if _, err := b.Listen(ctx, broker.Subscription{Topic: "msg", Group: "demo-consumer", Concurrency: 4},
		func(_ context.Context, d *broker.Delivery) error {
			id := d.Header(broker.HeaderEventID)
			mu.Lock()
			if prev := lastByKey[d.Key]; prev != "" && !idBefore(prev, id) {
				violations++
			}
			lastByKey[d.Key] = id
			mu.Unlock()
			events.Add(1)
			return nil
		}); err != nil {
		return Result{}, err
	}

	var processed atomic.Int64
	const stream = "sis"
	eng, err := inbox.New(db, stream, inboxbench.FlopProcessor{},
		inbox.WithLogger(cfg.Log),
		inbox.WithSource(mailbox.NewPoller(table, db, stream, mailbox.WithStart(mailbox.FromBeginning()), mailbox.WithPollerLogger(cfg.Log))),
		inbox.WithBackfill(table),
		inbox.WithOnCommit(func(c inbox.Committed) { processed.Add(int64(len(c.IDs))) }),
	)
	if err != nil {
		return Result{}, err
	}
	relay, err := outbox.NewRelay(db, outbox.WithLogger(cfg.Log), outbox.WithPollInterval(20*time.Millisecond),
		outbox.Target("kafka:msg", b, outbox.PerKey))
	if err != nil {
		return Result{}, err
	}
	defer relay.Close()

	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, 2)
	go func() { errs <- eng.Run(rctx) }()
	go func() { errs <- relay.Run(rctx) }()

	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	want := int64(len(msgs))
	for processed.Load() < want || events.Load() < want {
		select {
		case <-tick.C:
			fmt.Fprintf(cfg.Out, "processed %d/%d, events delivered %d\n", processed.Load(), want, events.Load())
		case err := <-errs:
			cancel()
			return Result{}, fmt.Errorf("demo: pipeline stopped: %w", err)
		case <-ctx.Done():
			return Result{}, ctx.Err()
		}
	}
	cancel()
	for range 2 {
		if err := <-errs; err != nil && rctx.Err() == nil {
			return Result{}, err
		}
	}
	mu.Lock()
	res := Result{Processed: int(processed.Load()), Events: int(events.Load()), OrderViolations: violations, Elapsed: time.Since(start)}
	mu.Unlock()
	fmt.Fprintf(cfg.Out, "done: %d messages SUCCEEDED, %d events relayed to the broker in per-flight order (%d order violations) in %s\n",
		res.Processed, res.Events, res.OrderViolations, res.Elapsed.Round(time.Millisecond))
	return res, nil
}

// idBefore compares the demo's event ids ("<stream>:<mailbox id>") by mailbox id.
func idBefore(a, b string) bool {
	ia, errA := mailboxID(a)
	ib, errB := mailboxID(b)
	return errA == nil && errB == nil && ia < ib
}

func mailboxID(eventID string) (int64, error) {
	_, n, _ := strings.Cut(eventID, ":")
	return strconv.ParseInt(n, 10, 64)
}
