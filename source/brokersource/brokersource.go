// Package brokersource feeds an inbox stream from a broker subscription: each
// delivery becomes one inbox message, and it is acknowledged only once the
// inbox has committed it, so a crash before the commit redelivers it and a
// crash after the commit redelivers a copy that the stream's business
// identity rule absorbs (SKIPPED duplicate-of:N, no second effect).
//
// A stream is one FIFO line: the listener runs one handler at a time and
// enqueues in delivery order. The message's transport id is the stream's
// mailbox id when the stream has a mailbox (the message is stored there
// first, as the HTTP ingress does, and the poller's watermark keeps the
// order), or else the stream's next id (inbox.NextID), handed out in the
// enqueue transaction. A failed store or enqueue is retried in place with
// backoff until it succeeds or the source stops — never requeued behind the
// messages that came after it — and a stop mid-way leaves the delivery
// unsettled for the broker to redeliver. A message larger than the size limit
// (or, for a stream with a mailbox, one that is not UTF-8) is dead-lettered
// by the broker port (its dead-letter topic keeps it), with a log line and a
// count. The port sends a dead-letter copy that does not fit the broker's
// message limit by reference (without its payload; its size, SHA-256 and
// source position in headers), and waits for a broker that is unavailable
// rather than releasing the message (see broker.ByReference).
//
// The delivery's W3C trace context (traceparent, tracestate headers) is
// continued by an ingest span, whose context is kept with the inbox message
// so that its processing continues the same trace.
package brokersource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/msgx/msgx/backoff"
	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/internal/dbclock"
	"github.com/msgx/msgx/internal/tracing"
	"github.com/msgx/msgx/source/mailbox"
	"github.com/msgx/msgx/store"
)

// DefaultMaxBytes is the largest payload taken in by default: what a
// MEDIUMTEXT mailbox column holds, as for the HTTP ingress.
const DefaultMaxBytes = 16<<20 - 1

// Mailbox stores a message and returns its id; *mailbox.Table implements it.
type Mailbox interface {
	Insert(ctx context.Context, msg []byte, received time.Time, meta mailbox.Meta) (int64, error)
}

type options struct {
	mailbox     Mailbox
	nudge       func()
	maxBytes    int64
	retry       backoff.Policy
	timeout     time.Duration
	stopTimeout time.Duration
	clock       clock.Clock
	log         *slog.Logger
	reg         prometheus.Registerer
	tracer      trace.Tracer
	name        string
}

// Option configures a Source.
type Option func(*options)

// WithMailbox stores each message in the stream's mailbox first and uses its
// id (the stream's poller then keeps the order); nudge, when not nil, is
// called after each stored message (the poller's Nudge). Default: no
// mailbox, ids from inbox.NextID.
func WithMailbox(mb Mailbox, nudge func()) Option {
	return func(o *options) { o.mailbox, o.nudge = mb, nudge }
}

// WithMaxBytes sets the payload limit (default DefaultMaxBytes); a larger
// payload is dead-lettered.
func WithMaxBytes(n int64) Option { return func(o *options) { o.maxBytes = n } }

// WithRetry sets the delays between attempts at storing a delivery (default
// 100 ms doubling to 10 s; attempts are unlimited until the source stops).
func WithRetry(p backoff.Policy) Option { return func(o *options) { o.retry = p } }

// WithTimeout bounds one attempt at storing a delivery (default 10 s).
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithStopTimeout bounds the wait for the delivery in hand when the source
// stops (default 10 s); past it the delivery is left unsettled.
func WithStopTimeout(d time.Duration) Option { return func(o *options) { o.stopTimeout = d } }

// WithClock sets the host's clock (default the wall clock): the retry delays
// and the mailbox's received time read it, the inbox's received time reads it
// corrected to the database's clock on PostgreSQL.
func WithClock(c clock.Clock) Option { return func(o *options) { o.clock = c } }

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithRegisterer registers the source's counters (default: none).
func WithRegisterer(r prometheus.Registerer) Option { return func(o *options) { o.reg = r } }

// WithTracer sets the tracer of the ingest spans (default: none).
func WithTracer(t trace.Tracer) Option { return func(o *options) { o.tracer = t } }

// WithName names the source in logs and metrics (default: the topic).
func WithName(name string) Option { return func(o *options) { o.name = name } }

// Source is a broker listener feeding one inbox stream; it implements
// inbox.Source, so it consumes only while its engine holds the stream lease.
type Source struct {
	// dbc is the host's clock corrected to the database's (PostgreSQL), for
	// the inbox's received time, which other hosts' engines compare.
	dbc    *dbclock.Clock
	b      *broker.Broker
	sub    broker.Subscription
	db     *store.DB
	stream string
	o      options
	log    *slog.Logger
	m      metrics
}

type metrics struct {
	received, stored, rejected, retries prometheus.Counter
}

// New returns a source consuming sub from b into stream of db. The
// subscription's concurrency is forced to 1: a stream is one line.
func New(b *broker.Broker, sub broker.Subscription, db *store.DB, stream string, opts ...Option) (*Source, error) {
	o := options{
		maxBytes:    DefaultMaxBytes,
		retry:       backoff.Policy{Initial: 100 * time.Millisecond, Max: 10 * time.Second, Multiplier: 2, Jitter: 0.2},
		timeout:     10 * time.Second,
		stopTimeout: 10 * time.Second,
		clock:       clock.Real{},
		log:         slog.Default(),
		tracer:      noop.NewTracerProvider().Tracer(""),
	}
	for _, opt := range opts {
		opt(&o)
	}
	if b == nil || db == nil || stream == "" {
		return nil, errors.New("brokersource: a broker, a store and a stream are required")
	}
	if sub.Topic == "" || sub.Group == "" {
		return nil, errors.New("brokersource: the subscription needs a topic and a group")
	}
	if o.maxBytes < 1 {
		return nil, fmt.Errorf("brokersource: max bytes %d: must be positive", o.maxBytes)
	}
	if o.name == "" {
		o.name = sub.Topic
	}
	sub.Concurrency = 1
	s := &Source{dbc: dbclock.New(o.clock), b: b, sub: sub, db: db, stream: stream, o: o,
		log: o.log.With("stream", stream, "source", o.name, "broker", b.Name(), "topic", sub.Topic, "group", sub.Group)}
	labels := prometheus.Labels{"stream": stream, "source": o.name}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels})
	}
	s.m = metrics{
		received: counter("msgx_source_broker_received_total", "Deliveries a broker source received (redeliveries included)."),
		stored:   counter("msgx_source_broker_stored_total", "Deliveries a broker source stored in its stream (and so acknowledged)."),
		rejected: counter("msgx_source_broker_rejected_total", "Deliveries a broker source dead-lettered: over its size limit, not UTF-8 for a stream with a mailbox, or what the mailbox cannot store (too large for it, a NUL byte on PostgreSQL)."),
		retries:  counter("msgx_source_broker_store_failures_total", "Failed attempts of a broker source at storing a delivery (each retried)."),
	}
	if o.reg != nil {
		for _, c := range []prometheus.Counter{s.m.received, s.m.stored, s.m.rejected, s.m.retries} {
			if err := o.reg.Register(c); err != nil {
				return nil, fmt.Errorf("brokersource: metrics: %w", err)
			}
		}
	}
	return s, nil
}

// Run implements inbox.Source: it listens until ctx ends, then stops the
// listener, waiting up to the stop timeout for the delivery in hand.
func (s *Source) Run(ctx context.Context, wake func()) error {
	// A broker that was unreachable when the service started is started in
	// the background: listen once it is up, and keep the stream's other
	// sources running meanwhile.
	select {
	case <-s.b.Started():
	default:
		s.log.Warn("broker source waiting for its broker to connect", "broker", s.b.Name())
		select {
		case <-s.b.Started():
		case <-ctx.Done():
			return nil
		}
	}
	l, err := s.b.Listen(ctx, s.sub, func(hctx context.Context, d *broker.Delivery) error {
		return s.handle(hctx, d, wake)
	})
	if err != nil {
		return fmt.Errorf("brokersource %s: listen on %s/%s: %w", s.o.name, s.sub.Topic, s.sub.Group, err)
	}
	s.log.Info("broker source listening")
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.o.stopTimeout)
	defer cancel()
	if err := l.Stop(sctx); err != nil {
		s.log.Warn("broker source: stop", "err", err)
	}
	return nil
}

// Handle stores one delivery in the stream; it is the listener's handler
// (wake, when not nil, is called after a new message is stored). It returns
// nil once the inbox (or the mailbox) has committed the message, a poison
// error for a payload it refuses (over the limit; not UTF-8 for a stream
// with a mailbox), and the context's error when ctx ends first (the delivery
// then stays unsettled).
func (s *Source) Handle(ctx context.Context, d *broker.Delivery, wake func()) error {
	return s.handle(ctx, d, wake)
}

func (s *Source) handle(ctx context.Context, d *broker.Delivery, wake func()) error {
	s.m.received.Inc()
	parent := tracing.Extract(ctx, d.Headers)
	ctx, span := s.o.tracer.Start(parent, tracing.SpanIngest, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(
		attribute.String("messaging.destination.name", d.Topic),
		attribute.String("messaging.consumer.group.name", d.Group),
		attribute.String("msgx.stream", s.stream),
		attribute.Int("msgx.redelivery_count", d.RedeliveryCount),
	))
	defer span.End()
	if int64(len(d.Payload)) > s.o.maxBytes {
		s.m.rejected.Inc()
		err := fmt.Errorf("payload of %d bytes exceeds the source's limit of %d", len(d.Payload), s.o.maxBytes)
		s.log.Error("broker source: message too large; dead-lettered", "bytes", len(d.Payload), "limit", s.o.maxBytes, "key", d.Key)
		span.RecordError(err)
		return broker.Poison(err)
	}
	if s.o.mailbox != nil && !utf8.Valid(d.Payload) {
		// The mailbox column is text: such a message could never be stored.
		s.m.rejected.Inc()
		err := errors.New("payload is not UTF-8, which the stream's mailbox (a text column) cannot hold")
		s.log.Error("broker source: message not UTF-8; dead-lettered", "bytes", len(d.Payload), "key", d.Key)
		span.RecordError(err)
		return broker.Poison(err)
	}
	in := inbox.Incoming{Payload: d.Payload}
	in.TraceParent, in.TraceState = tracing.Context(ctx)
	for attempt := 1; ; attempt++ {
		id, err := s.store(ctx, in)
		if err == nil {
			span.SetAttributes(attribute.Int64("msgx.msg_id", id))
			s.m.stored.Inc()
			if wake != nil {
				wake()
			}
			return nil
		}
		if ctx.Err() != nil {
			// A stop: the delivery stays unsettled and comes back.
			return fmt.Errorf("brokersource: stopped before the message was stored: %w", context.Cause(ctx))
		}
		if errors.Is(err, mailbox.ErrTooLarge) || errors.Is(err, mailbox.ErrUnstorable) {
			// The mailbox can never store it: retrying would stall the source.
			s.m.rejected.Inc()
			s.log.Error("broker source: the mailbox cannot store the message; dead-lettered", "err", err, "bytes", len(d.Payload), "key", d.Key)
			span.RecordError(err)
			return broker.Poison(err)
		}
		s.m.retries.Inc()
		delay := s.o.retry.Delay(attempt)
		if delay <= 0 {
			delay = time.Second
		}
		s.log.Warn("broker source: storing the message failed; retrying", "err", err, "attempt", attempt, "retry_in", delay)
		// A stop ends the wait at once (broker.ErrStopping): the delivery
		// stays unsettled and comes back.
		if err := broker.Pause(ctx, s.o.clock, delay); err != nil {
			return fmt.Errorf("brokersource: stopped before the message was stored: %w", err)
		}
	}
}

// store commits the message once and returns its id: in the mailbox and
// then the inbox, or in the inbox under the stream's next id.
func (s *Source) store(ctx context.Context, in inbox.Incoming) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.o.timeout)
	defer cancel()
	if s.db.Dialect() == store.Postgres && s.dbc.Due() {
		if err := s.dbc.Sync(ctx, func(ctx context.Context) (time.Time, error) { return store.Now(ctx, s.db) }); err != nil {
			s.log.Warn("broker source: the database's clock could not be read; the last offset stays", "offset", s.dbc.Offset().String(), "err", err)
		}
	}
	now := s.dbc.Now()
	if s.o.mailbox != nil {
		var meta mailbox.Meta
		if mm, ok := s.o.mailbox.(interface{ MetaOf([]byte) mailbox.Meta }); ok {
			// The subsystem columns, filled as a legacy sender fills them.
			meta = mm.MetaOf(in.Payload)
		}
		id, err := s.o.mailbox.Insert(ctx, in.Payload, s.o.clock.Now(), meta)
		if err != nil {
			return 0, err
		}
		in.ID = id
		err = s.db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
			// A message that committed after the poller declared its id a
			// permanent gap is left to the poller's late-row policy.
			_, err := inbox.EnqueueWritten(ctx, tx, s.stream, now, in)
			return err
		})
		if err != nil {
			// The message is in the mailbox: its poller takes it in (with no
			// trace context). Storing it again would only make a duplicate.
			s.log.Warn("broker source: enqueue after the mailbox insert failed; the mailbox poller takes the message in", "msg_id", id, "err", err)
		}
		// After the enqueue, as the HTTP ingress does: the poller's scan
		// then finds the message enqueued with its trace context.
		if s.o.nudge != nil {
			s.o.nudge()
		}
		return id, nil
	}
	err := s.db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		id, err := inbox.NextID(ctx, tx, s.stream)
		if err != nil {
			return err
		}
		in.ID = id
		n, err := inbox.Enqueue(ctx, tx, s.stream, now, in)
		if err != nil {
			return err
		}
		if n == 0 {
			// A fresh id that is taken would drop the message: refuse.
			return fmt.Errorf("brokersource: id %d of stream %s is taken (was the stream fed from a mailbox before?)", id, s.stream)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return in.ID, nil
}
