// Command msgx-wal runs the outbox workloads through msgx's outbox in its
// WAL mode, with the harness the other peers use: producers call
// outbox.Enqueue in their own transactions, which emits the events into
// PostgreSQL's write-ahead log (pg_logical_emit_message), and an
// outbox.WALRelay streams them from a replication slot of the run's own into
// the in-memory sink. The server needs wal_level=logical. There is no row to
// mark done: an event is done once the broker (the sink) confirmed it, after
// which the relay confirms its position to the slot.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/lab/peers/internal/workload"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
)

const target = "bench"

func main() {
	var claim int
	cfg, err := workload.ParseFlags("msgx-wal", os.Args[1:], func(fs *flag.FlagSet) {
		fs.IntVar(&claim, "claim", outbox.DefaultBatch, "events per send")
	})
	if err != nil {
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := workload.Run(ctx, cfg, &peer{cfg: cfg, claim: claim}, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "msgx-wal:", err)
		os.Exit(1)
	}
}

// sinkPublisher hands every message to the sink.
type sinkPublisher struct{ sink *workload.Sink }

func (p sinkPublisher) SendConfirmed(_ context.Context, _ string, msgs ...*broker.Message) error {
	for _, m := range msgs {
		if err := p.sink.Deliver(m.Payload); err != nil {
			return broker.Poison(err)
		}
	}
	return nil
}

type peer struct {
	cfg         workload.Config
	claim       int
	schema      *workload.Schema
	dsn, slot   string
	db, relayDB *store.DB
	relay       *outbox.WALRelay
	sink        *workload.Sink
	stop        context.CancelFunc
	done        chan error
}

func (p *peer) Setup(ctx context.Context, sink *workload.Sink) error {
	s, err := workload.NewSchema(ctx, p.cfg.DSN, "peer_msgx_wal", p.cfg.Pool)
	if err != nil {
		return err
	}
	p.schema, p.sink = s, sink
	u, err := url.Parse(p.cfg.DSN)
	if err != nil {
		return err
	}
	q := u.Query()
	q.Set("search_path", s.Name)
	q.Set("pool_max_conns", fmt.Sprint(p.cfg.Pool))
	u.RawQuery = q.Encode()
	p.dsn = u.String()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if p.db, err = store.Open(ctx, p.dsn, store.WithMigrate(outbox.Schema()), store.WithLogger(quiet)); err != nil {
		return err
	}
	if p.relayDB, err = store.Open(ctx, p.dsn, store.WithLogger(quiet)); err != nil {
		return err
	}
	var b [5]byte
	_, _ = rand.Read(b[:])
	p.slot = "peer_msgx_wal_" + hex.EncodeToString(b[:])
	p.relay, err = outbox.NewWALRelay(p.relayDB, p.dsn,
		outbox.Target(target, sinkPublisher{p.sink}, outbox.Unordered, outbox.Batch(p.claim)),
		outbox.WALSlot(p.slot), outbox.WALPublication(p.slot),
		outbox.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	if err != nil {
		return err
	}
	// The slot first: only what commits after it is streamed.
	if err := p.relay.Prepare(ctx); err != nil {
		return err
	}
	return outbox.SetMode(p.db, outbox.ModeWAL)
}

func (p *peer) InsertTx(ctx context.Context, events []workload.Event) error {
	evs := make([]outbox.Event, len(events))
	for i, e := range events {
		evs[i] = outbox.Event{Target: target, Topic: target, Key: e.Key, Payload: e.Payload}
	}
	return p.db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		return outbox.Enqueue(ctx, tx, time.Now(), evs...)
	})
}

// InTx enqueues the events with outbox.Enqueue inside the business
// transaction (a store transaction; body runs on its pgx transaction).
func (p *peer) InTx(ctx context.Context, body func(context.Context, pgx.Tx) error, events []workload.Event) error {
	evs := make([]outbox.Event, len(events))
	for i, e := range events {
		evs[i] = outbox.Event{Target: target, Topic: target, Key: e.Key, Payload: e.Payload}
	}
	return p.db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		if err := body(ctx, store.PgxTx(tx)); err != nil || len(evs) == 0 {
			return err
		}
		return outbox.Enqueue(ctx, tx, time.Now(), evs...)
	})
}

// Pool is the run's pool (in the same schema).
func (p *peer) Pool() *pgxpool.Pool { return p.schema.Pool }

func (p *peer) Start(context.Context) error {
	ctx, cancel := context.WithCancel(context.Background())
	p.stop, p.done = cancel, make(chan error, 1)
	go func() { p.done <- p.relay.Run(ctx) }()
	return nil
}

// WaitDone: the harness has waited for the sink to hold every event; the
// WAL mode has no row to mark.
func (p *peer) WaitDone(context.Context, int) error { return nil }

func (p *peer) Stop(context.Context) error {
	if p.stop == nil {
		return nil
	}
	p.stop()
	err := <-p.done
	p.stop = nil
	return err
}

func (p *peer) Teardown(ctx context.Context) error {
	if p.schema == nil {
		return nil
	}
	err := p.Stop(ctx)
	if p.relay != nil {
		p.relay.Close()
	}
	for _, db := range []*store.DB{p.relayDB, p.db} {
		if db != nil {
			db.Close()
		}
	}
	if p.slot != "" {
		err = errors.Join(err, dropSlot(ctx, p.cfg.DSN, p.slot))
	}
	return errors.Join(err, p.schema.Drop(ctx))
}

// dropSlot drops the run's slot (once the relay's stream has ended) and its
// publication.
func dropSlot(ctx context.Context, dsn, slot string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	for {
		_, err := conn.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", slot)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
	_, err = conn.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{slot}.Sanitize())
	return err
}
