// Package kafka is the Kafka adapter of the broker port, on franz-go.
//
// Publishing uses an idempotent producer with acks=all; Publish returns only
// when every record is acknowledged. Consuming uses one consumer group client
// per subscription with automatic commits off: the adapter tracks each
// partition's outstanding offsets and commits only the contiguous prefix of
// settled ones, so a committed position never passes an unfinished message
// while handlers complete out of order. Kafka has no per-message nack:
// REQUEUE (and Release) re-publishes the message (with the port's updated
// headers) with its key to the group's own retry topic (RetryTopic, created
// at Subscribe and consumed by the same client in the same group, so no other
// group and no other reader of the topic sees the copy), then settles the
// original; DEAD_LETTER publishes to the dead-letter topic, then settles.
// Both are confirmed publishes, so a message is never settled before its copy
// is stored, and a crash between the two yields a duplicate, never a loss.
package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/msgx/msgx/broker/driver"
)

// ErrRevoked is returned by a settlement whose partition was revoked from
// this consumer (a rebalance or lost group membership): the message is
// redelivered to the partition's new owner.
var ErrRevoked = fmt.Errorf("kafka: partition no longer owned by this consumer: %w", driver.ErrNotHeld)

// ErrNotStarted is returned by operations on a driver that is not running.
var ErrNotStarted = fmt.Errorf("kafka: driver %w", driver.ErrNotStarted)

// Driver is the Kafka adapter; it implements driver.Broker.
type Driver struct {
	cfg config
	rep *reporter

	mu      sync.Mutex
	prod    *kgo.Client
	subs    map[*subscription]struct{}
	members map[string]bool // static member ids of open subscriptions (see claimMember)
	started bool
	closed  bool
	// produced holds the topics a publish was confirmed on: a later publish
	// to one that runs out of time found the broker unavailable, not the
	// topic missing, and asks the cluster nothing (see topicMissing).
	produced sync.Map
}

// New returns an unstarted driver.
func New(opts ...Option) *Driver {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	return &Driver{cfg: cfg, rep: newReporter(cfg.logger), subs: map[*subscription]struct{}{}, members: map[string]bool{}}
}

// Capabilities implements driver.Broker.
func (d *Driver) Capabilities() driver.Capabilities {
	return driver.Capabilities{
		Persistent:   true,
		PerKeyOrder:  true,
		NativeKey:    true,
		OffsetCommit: true,
		Batch:        true,
		LoadBalance:  true,
		Broadcast:    true,
	}
}

// baseOpts are the options every client of the driver shares.
func (d *Driver) baseOpts() []kgo.Opt {
	opts := []kgo.Opt{
		kgo.SeedBrokers(d.cfg.seeds...),
		kgo.WithLogger(kgoLogger{d.cfg.logger}),
		kgo.WithHooks(d.rep.hooks()),
	}
	if d.cfg.dialer != nil {
		opts = append(opts, kgo.Dialer(d.cfg.dialer))
	}
	return append(opts, d.cfg.clientOpts...)
}

// Start implements driver.Broker: it builds the producer and checks that a
// broker answers within the start timeout.
func (d *Driver) Start(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.started || d.closed {
		return errors.New("kafka: driver already started")
	}
	if d.cfg.instanceID != "" {
		if err := ValidInstanceID(d.cfg.instanceID); err != nil {
			return fmt.Errorf("kafka: %w", err)
		}
	}
	opts := append(append([]kgo.Opt{
		kgo.ProducerLinger(d.cfg.linger),
		kgo.UnknownTopicRetries(d.cfg.unknownRetries),
	}, d.cfg.producerLimits()...), d.baseOpts()...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("kafka: new client: %w", err)
	}
	if err := d.checkDurability(cl); err != nil {
		cl.Close()
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, d.cfg.startTimeout)
	defer cancel()
	if err := cl.Ping(pctx); err != nil {
		cl.Close()
		return fmt.Errorf("kafka: no broker reachable at %v: %w", d.cfg.seeds, err)
	}
	if err := ensureTopics(pctx, cl, d.cfg.topics...); err != nil {
		cl.Close()
		return fmt.Errorf("kafka: declared topics: %w", err)
	}
	d.prod = cl
	d.started = true
	return nil
}

// checkDurability refuses producer settings that could lose a confirmed
// message, unless the caller explicitly allowed them.
func (d *Driver) checkDurability(cl *kgo.Client) error {
	if d.cfg.weakDurability {
		return nil
	}
	if acks, _ := cl.OptValue(kgo.RequiredAcks).(kgo.Acks); acks != kgo.AllISRAcks() {
		return errors.New("kafka: refusing producer acks other than all (use AllowWeakDurability to permit)")
	}
	if off, _ := cl.OptValue(kgo.DisableIdempotentWrite).(bool); off {
		return errors.New("kafka: refusing non-idempotent producer (use AllowWeakDurability to permit)")
	}
	if on, _ := cl.OptValue(kgo.AllowIdempotentProduceCancellation).(bool); on {
		return errors.New("kafka: refusing idempotent produce cancellation (use AllowWeakDurability to permit)")
	}
	return nil
}

func (d *Driver) producer() (*kgo.Client, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.started || d.closed {
		return nil, ErrNotStarted
	}
	return d.prod, nil
}

// Publish implements driver.Broker: it produces every message and returns
// when all are acknowledged by the in-sync replicas, or with the first error.
// When ctx ends first it returns ctx's error; records already handed to the
// client may still be written (a confirmed publish that reports failure is a
// possible duplicate, never a loss).
func (d *Driver) Publish(ctx context.Context, topic string, msgs []*driver.Message) error {
	cl, err := d.producer()
	if err != nil {
		return err
	}
	err = produce(ctx, cl, topic, msgs)
	switch {
	case err == nil:
		d.produced.Store(topic, struct{}{})
	case errors.Is(err, context.DeadlineExceeded):
		if _, ok := d.produced.Load(topic); ok {
			break
		}
		if missing := topicMissing(cl, topic); missing != nil {
			return driver.Classify(driver.Rejected, fmt.Errorf("%w: %w", err, missing))
		}
	}
	return err
}

// produceWait collects the promises of one Publish.
type produceWait struct {
	maxBytes int32 // the client's ProducerBatchMaxBytes for the topic
	left     atomic.Int64
	done     chan struct{}
	mu       sync.Mutex
	err      error
}

func (w *produceWait) promise(r *kgo.Record, err error) {
	if err != nil {
		if errors.Is(err, kerr.MessageTooLarge) && w.maxBytes > 0 {
			// franz-go refuses a record that does not fit a batch before
			// sending it; say which limit it exceeded.
			err = fmt.Errorf("%w (the producer's batch limit is %d bytes)", err, w.maxBytes)
		}
		w.mu.Lock()
		if w.err == nil {
			w.err = classify(fmt.Errorf("produce to %s: %w", r.Topic, err))
		}
		w.mu.Unlock()
	}
	if w.left.Add(-1) == 0 {
		close(w.done)
	}
}

func produce(ctx context.Context, cl *kgo.Client, topic string, msgs []*driver.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	w := &produceWait{done: make(chan struct{})}
	if limit, ok := cl.OptValue(kgo.ProducerBatchMaxBytesFn).(func(string) int32); ok {
		w.maxBytes = limit(topic)
	}
	w.left.Store(int64(len(msgs)))
	recs := make([]kgo.Record, len(msgs))
	for i, m := range msgs {
		r := &recs[i]
		r.Topic = topic
		if m.Key != "" {
			r.Key = []byte(m.Key)
		}
		r.Value = m.Payload
		if n := len(m.Headers); n > 0 {
			r.Headers = make([]kgo.RecordHeader, 0, n)
			for k, v := range m.Headers {
				r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
			}
		}
		cl.Produce(ctx, r, w.promise)
	}
	select {
	case <-w.done:
		return w.err
	case <-ctx.Done():
		// Produce returns early (and promises fail) only where it is safe;
		// the caller must not take an unconfirmed publish for a success.
		select {
		case <-w.done:
			return w.err
		default:
		}
		err := fmt.Errorf("kafka: publish to %s not confirmed: %w", topic, ctx.Err())
		if errors.Is(err, context.DeadlineExceeded) {
			// The records are still waiting for a broker.
			return driver.Classify(driver.Unavailable, err)
		}
		return err
	}
}

// Errors implements driver.Broker: asynchronous client failures (lost broker
// connections, group session errors, failed commits, fetch errors). Sends
// never block; when nobody reads, errors beyond the buffer are logged and
// counted (DroppedErrors) instead.
func (d *Driver) Errors() <-chan error { return d.rep.C() }

// Close implements driver.Broker: it closes every subscription (committing
// what was settled, leaving unsettled messages for redelivery), then the
// producer, then the Errors channel.
func (d *Driver) Close(ctx context.Context) error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	subs := slices.Collect(maps.Keys(d.subs))
	prod := d.prod
	d.mu.Unlock()

	err := driver.CloseAll(ctx, subs)
	if prod != nil {
		prod.Close()
	}
	d.rep.Close()
	return err
}

func (d *Driver) forget(s *subscription) {
	d.mu.Lock()
	delete(d.subs, s)
	if s.member != "" {
		delete(d.members, s.spec.Group+"\x00"+s.member)
	}
	d.mu.Unlock()
}

// reporter feeds Errors() and remembers which brokers are failing, so that a
// broker becoming unreachable is reported once, not on every retry.
type reporter struct {
	*driver.ErrorFeed

	mu      sync.Mutex
	failing map[string]bool // broker address -> its last dial failed
}

func newReporter(logger *slog.Logger) *reporter {
	r := &reporter{failing: map[string]bool{}}
	r.ErrorFeed = driver.NewErrorFeed(64, func(err error) {
		// Nobody drains the channel: never block the client, but never lose
		// the error silently either (the feed counts it).
		logger.Error("kafka error (error channel full or closed)", "err", err)
	})
	return r
}

// DroppedErrors implements driver.DroppedErrorCounter: the asynchronous
// errors that did not fit the Errors channel (each was logged instead).
func (d *Driver) DroppedErrors() uint64 { return d.rep.Dropped() }

func (r *reporter) hooks() kgo.Hook { return hooks{r} }

type hooks struct{ r *reporter }

// OnBrokerConnect reports a broker becoming unreachable once, not every
// retry, and forgets it when a connection succeeds again.
func (h hooks) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	addr := net.JoinHostPort(meta.Host, fmt.Sprint(meta.Port))
	h.r.mu.Lock()
	was := h.r.failing[addr]
	if err == nil {
		delete(h.r.failing, addr)
	} else {
		h.r.failing[addr] = true
	}
	h.r.mu.Unlock()
	if err != nil && !was {
		h.r.Report(fmt.Errorf("kafka: connect to broker %s: %w", addr, err))
	}
}

// OnGroupManageError reports a failed group session (the client rejoins).
func (h hooks) OnGroupManageError(err error) {
	if !errors.Is(err, context.Canceled) && !errors.Is(err, kgo.ErrClientClosed) {
		h.r.Report(fmt.Errorf("kafka: consumer group: %w", err))
	}
}

// kgoLogger forwards franz-go's log lines to slog.
type kgoLogger struct{ l *slog.Logger }

func (k kgoLogger) Level() kgo.LogLevel {
	ctx := context.Background()
	switch {
	case k.l.Enabled(ctx, slog.LevelDebug):
		return kgo.LogLevelDebug
	case k.l.Enabled(ctx, slog.LevelInfo):
		return kgo.LogLevelInfo
	case k.l.Enabled(ctx, slog.LevelWarn):
		return kgo.LogLevelWarn
	case k.l.Enabled(ctx, slog.LevelError):
		return kgo.LogLevelError
	}
	return kgo.LogLevelNone
}

func (k kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	l := slog.LevelDebug
	switch level {
	case kgo.LogLevelError:
		l = slog.LevelError
	case kgo.LogLevelWarn:
		l = slog.LevelWarn
	case kgo.LogLevelInfo:
		l = slog.LevelInfo
	}
	k.l.Log(context.Background(), l, "kafka client: "+msg, keyvals...)
}

// Ping implements driver.Pinger: the producer client asks a broker for its
// API versions (a metadata-free round trip), bounded by ctx.
func (d *Driver) Ping(ctx context.Context) error {
	cl, err := d.producer()
	if err != nil {
		return err
	}
	if err := cl.Ping(ctx); err != nil {
		return fmt.Errorf("kafka: no broker answers at %v: %w", d.cfg.seeds, err)
	}
	return nil
}

var _ driver.Pinger = (*Driver)(nil)
