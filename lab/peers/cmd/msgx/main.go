// Command msgx runs the outbox-relay workload through msgx's outbox with the
// harness the River and Watermill programs use (same events, producers,
// clock start, done check and RESULT line): producers call outbox.Enqueue in
// their own transactions, an outbox.Relay (unordered lane) sends into the
// in-memory sink, and an event counts as done once the relay has recorded it
// sent (no pending row left). The relay keeps the session's
// synchronous_commit, as the peers do: set it for all of them in the DSN.
package main

import (
	"context"
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
	var (
		poll  time.Duration
		claim int
	)
	cfg, err := workload.ParseFlags("msgx", os.Args[1:], func(fs *flag.FlagSet) {
		fs.DurationVar(&poll, "poll", 5*time.Millisecond, "idle poll interval of the relay (commits wake it anyway)")
		fs.IntVar(&claim, "claim", outbox.DefaultBatch, "events per claim")
	})
	if err != nil {
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := workload.Run(ctx, cfg, &peer{cfg: cfg, poll: poll, claim: claim}, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "msgx:", err)
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
	poll        time.Duration
	claim       int
	schema      *workload.Schema
	db, relayDB *store.DB
	sink        *workload.Sink
	stop        context.CancelFunc
	done        chan error
}

func (p *peer) Setup(ctx context.Context, sink *workload.Sink) error {
	s, err := workload.NewSchema(ctx, p.cfg.DSN, "peer_msgx", p.cfg.Pool)
	if err != nil {
		return err
	}
	p.schema, p.sink = s, sink
	// store takes extra DSN parameters as session settings.
	u, err := url.Parse(p.cfg.DSN)
	if err != nil {
		return err
	}
	q := u.Query()
	q.Set("search_path", s.Name)
	q.Set("pool_max_conns", fmt.Sprint(p.cfg.Pool))
	u.RawQuery = q.Encode()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if p.db, err = store.Open(ctx, u.String(), store.WithMigrate(outbox.Schema()), store.WithLogger(quiet)); err != nil {
		return err
	}
	// The relay has its own handle, as a relay process would.
	p.relayDB, err = store.Open(ctx, u.String(), store.WithLogger(quiet))
	return err
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
	r, err := outbox.NewRelay(p.relayDB,
		outbox.Target(target, sinkPublisher{p.sink}, outbox.Unordered, outbox.Batch(p.claim)),
		outbox.WithPollInterval(p.poll), outbox.WithSynchronousCommit(true),
		outbox.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.stop, p.done = cancel, make(chan error, 1)
	go func() {
		err := r.Run(ctx)
		r.Close()
		p.done <- err
	}()
	return nil
}

// WaitDone waits until no event is pending: every one is recorded sent.
func (p *peer) WaitDone(ctx context.Context, _ int) error {
	return workload.PollDone(ctx, func(ctx context.Context) (bool, error) {
		var pending bool
		err := p.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM msgx_outbox WHERE status = 'PENDING')`).Scan(&pending)
		return !pending, err
	})
}

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
	for _, db := range []*store.DB{p.relayDB, p.db} {
		if db != nil {
			db.Close()
		}
	}
	return errors.Join(err, p.schema.Drop(ctx))
}
