// Command river runs the outbox-relay workload through River: producers insert
// jobs with InsertManyTx in their own transactions, a River client works them
// into the in-memory sink, and an event counts as done once River's completer
// has marked its job completed.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/msgx/msgx/lab/peers/internal/workload"
)

func main() {
	cfg, err := workload.ParseFlags("river", os.Args[1:])
	if err != nil {
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := workload.Run(ctx, cfg, &peer{cfg: cfg}, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "river:", err)
		os.Exit(1)
	}
}

// eventArgs is one outbox event as a River job.
type eventArgs struct {
	Key     string `json:"key"`
	Payload string `json:"payload"`
}

func (eventArgs) Kind() string { return "outbox_event" }

// sinkWorker hands every job to the sink; returning nil lets River complete it.
type sinkWorker struct {
	river.WorkerDefaults[eventArgs]
	sink *workload.Sink
}

func (w *sinkWorker) Work(_ context.Context, job *river.Job[eventArgs]) error {
	return w.sink.Deliver([]byte(job.Args.Payload))
}

type peer struct {
	cfg    workload.Config
	schema *workload.Schema
	client *river.Client[pgx.Tx]
}

func (p *peer) Setup(ctx context.Context, sink *workload.Sink) error {
	s, err := workload.NewSchema(ctx, p.cfg.DSN, "peer_river", p.cfg.Pool)
	if err != nil {
		return err
	}
	p.schema = s
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	driver := riverpgxv5.New(s.Pool)
	migrator, err := rivermigrate.New(driver, &rivermigrate.Config{Schema: s.Name, Logger: logger})
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("river migrations: %w", err)
	}
	workers := river.NewWorkers()
	if err := river.AddWorkerSafely(workers, &sinkWorker{sink: sink}); err != nil {
		return err
	}
	// The tuning River's documentation offers for throughput: many workers
	// on the one queue, a short fetch cooldown so a freed worker slot is
	// refilled quickly, and a short poll interval as the LISTEN/NOTIFY fallback.
	p.client, err = river.NewClient(driver, &river.Config{
		Schema:            s.Name,
		FetchCooldown:     2 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 2000}},
		Workers:           workers,
		Logger:            logger,
	})
	return err
}

func (p *peer) InsertTx(ctx context.Context, events []workload.Event) error {
	params := make([]river.InsertManyParams, len(events))
	for i, e := range events {
		params[i] = river.InsertManyParams{Args: eventArgs{Key: e.Key, Payload: string(e.Payload)}}
	}
	return pgx.BeginFunc(ctx, p.schema.Pool, func(tx pgx.Tx) error {
		_, err := p.client.InsertManyTx(ctx, tx, params)
		return err
	})
}

// InTx inserts the events with InsertManyTx inside the business transaction.
func (p *peer) InTx(ctx context.Context, body func(context.Context, pgx.Tx) error, events []workload.Event) error {
	return pgx.BeginFunc(ctx, p.schema.Pool, func(tx pgx.Tx) error {
		if err := body(ctx, tx); err != nil {
			return err
		}
		switch len(events) {
		case 0:
			return nil
		case 1:
			_, err := p.client.InsertTx(ctx, tx, eventArgs{Key: events[0].Key, Payload: string(events[0].Payload)}, nil)
			return err
		}
		params := make([]river.InsertManyParams, len(events))
		for i, e := range events {
			params[i] = river.InsertManyParams{Args: eventArgs{Key: e.Key, Payload: string(e.Payload)}}
		}
		_, err := p.client.InsertManyTx(ctx, tx, params)
		return err
	})
}

// Pool is the run's pool.
func (p *peer) Pool() *pgxpool.Pool { return p.schema.Pool }

func (p *peer) Start(ctx context.Context) error { return p.client.Start(ctx) }

// WaitDone waits until n jobs are in state completed, i.e. the completer has
// committed them.
func (p *peer) WaitDone(ctx context.Context, n int) error {
	return workload.PollDone(ctx, func(ctx context.Context) (bool, error) {
		var done int
		err := p.schema.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = 'completed'`).Scan(&done)
		return done == n, err
	})
}

func (p *peer) Stop(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return p.client.Stop(ctx)
}

func (p *peer) Teardown(ctx context.Context) error {
	if p.schema == nil {
		return nil
	}
	var err error
	if p.client != nil {
		// Stop is a no-op when the client never started or already stopped.
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = p.client.Stop(sctx)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("stopping the client: %w", err)
		} else {
			err = nil
		}
	}
	return errors.Join(err, p.schema.Drop(ctx))
}
