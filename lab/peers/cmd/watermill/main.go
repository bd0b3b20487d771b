// Command watermill runs the outbox-relay workload through the Watermill SQL
// forwarder: producers publish with the PostgreSQL SQL publisher inside their
// own transactions (wrapped by the forwarder's publisher), the forwarder
// subscribes to the outbox table and forwards each message to an in-process
// GoChannel topic read by the sink; an event counts as done once the
// subscriber has stored its offset.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/msgx/msgx/lab/peers/internal/workload"
)

const (
	outboxTopic = "outbox" // the forwarder's topic: table watermill_outbox
	sinkTopic   = "sink"   // the destination topic on the in-process pub/sub
)

func main() {
	cfg, err := workload.ParseFlags("watermill", os.Args[1:])
	if err != nil {
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := workload.Run(ctx, cfg, &peer{cfg: cfg}, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "watermill:", err)
		os.Exit(1)
	}
}

type peer struct {
	cfg     workload.Config
	schema  *workload.Schema
	logger  watermill.LoggerAdapter
	adapter wsql.DefaultPostgreSQLSchema
	offsets wsql.DefaultPostgreSQLOffsetsAdapter
	sub     *wsql.Subscriber
	dest    *gochannel.GoChannel
	fwd     *forwarder.Forwarder
	cancel  context.CancelFunc
	stopped chan error
	sinkErr chan error
}

func (p *peer) Setup(ctx context.Context, sink *workload.Sink) error {
	s, err := workload.NewSchema(ctx, p.cfg.DSN, "peer_watermill", p.cfg.Pool)
	if err != nil {
		return err
	}
	p.schema = s
	p.logger = watermill.NopLogger{}
	// SubscribeBatchSize: rows read per claim query (default 100).
	p.adapter = wsql.DefaultPostgreSQLSchema{SubscribeBatchSize: 1000}
	p.sub, err = wsql.NewSubscriber(wsql.BeginnerFromPgx(s.Pool), wsql.SubscriberConfig{
		SchemaAdapter:  p.adapter,
		OffsetsAdapter: p.offsets,
		// Wait between claim queries only when the last one found nothing.
		PollInterval: 10 * time.Millisecond,
	}, p.logger)
	if err != nil {
		return err
	}
	// Creates watermill_outbox and watermill_offsets_outbox in the run's schema.
	if err := p.sub.SubscribeInitialize(outboxTopic); err != nil {
		return fmt.Errorf("initialize schema: %w", err)
	}

	// The destination: Publish returns only once the sink acked, as a
	// confirmed publish to a real broker would, so the forwarder stores the
	// offset only for messages the sink holds.
	p.dest = gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, p.logger)
	msgs, err := p.dest.Subscribe(context.WithoutCancel(ctx), sinkTopic)
	if err != nil {
		return err
	}
	p.sinkErr = make(chan error, 1)
	go func() {
		for m := range msgs {
			if err := sink.Deliver(m.Payload); err != nil {
				select {
				case p.sinkErr <- err:
				default:
				}
			}
			m.Ack()
		}
	}()

	p.fwd, err = forwarder.NewForwarder(p.sub, p.dest, p.logger, forwarder.Config{ForwarderTopic: outboxTopic})
	return err
}

func (p *peer) InsertTx(ctx context.Context, events []workload.Event) error {
	msgs := make([]*message.Message, len(events))
	for i, e := range events {
		m := message.NewMessage(watermill.NewUUID(), e.Payload)
		m.Metadata.Set("key", e.Key)
		msgs[i] = m
	}
	return pgx.BeginFunc(ctx, p.schema.Pool, func(tx pgx.Tx) error {
		pub, err := wsql.NewPublisher(wsql.TxFromPgx(tx), wsql.PublisherConfig{SchemaAdapter: p.adapter}, p.logger)
		if err != nil {
			return err
		}
		// One multi-row INSERT of the enveloped messages into watermill_outbox.
		return forwarder.NewPublisher(pub, forwarder.PublisherConfig{ForwarderTopic: outboxTopic}).Publish(sinkTopic, msgs...)
	})
}

// InTx publishes the events with Watermill's SQL publisher (through the
// forwarder's envelope) inside the business transaction.
func (p *peer) InTx(ctx context.Context, body func(context.Context, pgx.Tx) error, events []workload.Event) error {
	msgs := make([]*message.Message, len(events))
	for i, e := range events {
		m := message.NewMessage(watermill.NewUUID(), e.Payload)
		m.Metadata.Set("key", e.Key)
		msgs[i] = m
	}
	return pgx.BeginFunc(ctx, p.schema.Pool, func(tx pgx.Tx) error {
		if err := body(ctx, tx); err != nil || len(msgs) == 0 {
			return err
		}
		pub, err := wsql.NewPublisher(wsql.TxFromPgx(tx), wsql.PublisherConfig{SchemaAdapter: p.adapter}, p.logger)
		if err != nil {
			return err
		}
		return forwarder.NewPublisher(pub, forwarder.PublisherConfig{ForwarderTopic: outboxTopic}).Publish(sinkTopic, msgs...)
	})
}

// Pool is the run's pool.
func (p *peer) Pool() *pgxpool.Pool { return p.schema.Pool }

func (p *peer) Start(ctx context.Context) error {
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p.cancel = cancel
	p.stopped = make(chan error, 1)
	go func() { p.stopped <- p.fwd.Run(rctx) }()
	select {
	case <-p.fwd.Running():
		return nil
	case err := <-p.stopped:
		return fmt.Errorf("forwarder stopped: %w", err)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// WaitDone waits until the consumer group's stored offset is the last row of
// the outbox table in the subscriber's order (transaction_id, offset).
func (p *peer) WaitDone(ctx context.Context, _ int) error {
	return workload.PollDone(ctx, func(ctx context.Context) (bool, error) {
		select {
		case err := <-p.sinkErr:
			return false, fmt.Errorf("sink: %w", err)
		default:
		}
		var done bool
		err := p.schema.Pool.QueryRow(ctx, `
			SELECT o.last_processed_transaction_id = m.transaction_id AND o.offset_acked = m."offset"
			FROM watermill_offsets_outbox o,
			     (SELECT transaction_id, "offset" FROM watermill_outbox
			      ORDER BY transaction_id DESC, "offset" DESC LIMIT 1) m
			WHERE o.consumer_group = ''`).Scan(&done)
		if errors.Is(err, pgx.ErrNoRows) {
			return false, nil
		}
		return done, err
	})
}

func (p *peer) Stop(context.Context) error {
	if p.fwd == nil || p.cancel == nil {
		return nil
	}
	err := p.fwd.Close()
	p.cancel()
	<-p.stopped
	p.cancel = nil
	return err
}

func (p *peer) Teardown(ctx context.Context) error {
	if p.schema == nil {
		return nil
	}
	err := p.Stop(ctx)
	if p.sub != nil {
		err = errors.Join(err, p.sub.Close())
	}
	if p.dest != nil {
		err = errors.Join(err, p.dest.Close())
	}
	return errors.Join(err, p.schema.Drop(ctx))
}
