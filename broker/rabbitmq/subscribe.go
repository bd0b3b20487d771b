package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/msgx/msgx/broker/driver"
)

// declare creates the topology of spec on conn. Every step uses a throwaway
// channel because a refused declaration closes the channel it was made on.
func (d *Driver) declare(conn *amqp.Connection, spec driver.SubscriptionSpec, queue string) error {
	if err := onChannel(conn, func(ch *amqp.Channel) error {
		return ch.ExchangeDeclare(spec.Topic, amqp.ExchangeFanout, true, false, false, false, nil)
	}); err != nil {
		return fmt.Errorf("rabbitmq: declare exchange %q: %w", spec.Topic, err)
	}
	if spec.DeadLetterTopic != "" {
		// The dead-letter destination may be refused (a reserved name, missing
		// permissions): consuming must still work, and only the dead-letter
		// publish fails later, leaving the message unacked.
		if err := d.declareDeadLetter(conn, spec.DeadLetterTopic); err != nil {
			d.opts.logger.Warn("rabbitmq: dead-letter destination not declared; dead letters will fail until it exists",
				"topic", spec.Topic, "group", spec.Group, "dead_letter_topic", spec.DeadLetterTopic, "err", err)
		}
	}
	args := make(amqp.Table, len(d.opts.queueArgs)+2)
	for k, v := range d.opts.queueArgs {
		args[k] = v
	}
	if spec.DeadLetterTopic != "" {
		args["x-dead-letter-exchange"] = spec.DeadLetterTopic
	}
	if spec.Expiry > 0 {
		args["x-expires"] = max(spec.Expiry.Milliseconds(), 1)
	}
	err := onChannel(conn, func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclare(queue, true, false, false, false, args)
		return err
	})
	var aerr *amqp.Error
	if errors.As(err, &aerr) && aerr.Code == amqp.PreconditionFailed {
		// The queue exists with other arguments (typically another dead-letter
		// topic). Queue arguments cannot change in place; consume the queue as
		// it is rather than refuse the group.
		perr := onChannel(conn, func(ch *amqp.Channel) error {
			_, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
			return err
		})
		if perr != nil {
			return fmt.Errorf("rabbitmq: declare queue %q: %w", queue, err)
		}
		d.opts.logger.Warn("rabbitmq: queue exists with different arguments; using it as declared",
			"queue", queue, "err", err)
		err = nil
	}
	if err != nil {
		return fmt.Errorf("rabbitmq: declare queue %q: %w", queue, err)
	}
	if err := onChannel(conn, func(ch *amqp.Channel) error {
		return ch.QueueBind(queue, "", spec.Topic, false, nil)
	}); err != nil {
		return fmt.Errorf("rabbitmq: bind queue %q to %q: %w", queue, spec.Topic, err)
	}
	// The group's retry queue: a requeue with a delay waits there (each
	// message with its own TTL) and is dead-lettered back to the group's
	// queue when due, so the consumer holds nothing while it waits. Without
	// it (a refused or overlong name) requeues go straight to the group's
	// queue and the port's scheduler waits instead.
	retryArgs := amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": queue}
	if spec.Expiry > 0 {
		retryArgs["x-expires"] = max(spec.Expiry.Milliseconds(), 1)
	}
	if err := onChannel(conn, func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclare(retryQueue(queue), true, false, false, false, retryArgs)
		return err
	}); err != nil {
		d.opts.logger.Warn("rabbitmq: retry queue not declared; delayed requeues wait in the consumer",
			"queue", queue, "err", err)
	}
	return nil
}

// retryQueue names the retry queue of a group's queue. Group names hold no
// "/", so it is never another group's queue.
func retryQueue(queue string) string { return queue + "/retry" }

// declareDeadLetter declares the dead-letter exchange and, unless disabled,
// the queue of its driver.DeadLetterGroup, which keeps dead letters until
// someone reads them (by listening to the dead-letter topic in that group).
func (d *Driver) declareDeadLetter(conn *amqp.Connection, topic string) error {
	return onChannel(conn, func(ch *amqp.Channel) error {
		if err := ch.ExchangeDeclare(topic, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
			return err
		}
		if !d.opts.deadLetterQueue {
			return nil
		}
		queue := QueueName(topic, driver.DeadLetterGroup)
		if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
			return err
		}
		return ch.QueueBind(queue, "", topic, false, nil)
	})
}

func onChannel(conn *amqp.Connection, f func(*amqp.Channel) error) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	err = f(ch)
	if cerr := ch.Close(); err == nil && cerr != nil && !errors.Is(cerr, amqp.ErrClosed) {
		err = cerr
	}
	return err
}

// subscription consumes one group queue. Its consumer is replaced after the
// channel or connection dies, on the next Receive.
type subscription struct {
	d     *Driver
	spec  driver.SubscriptionSpec
	queue string

	recvMu sync.Mutex // one Receive (and so one re-subscription) at a time

	mu     sync.Mutex
	cur    *consumer // nil when a new consumer must be opened
	closed bool
	done   chan struct{}
}

type consumer struct {
	conn       *amqp.Connection
	ch         *amqp.Channel
	deliveries <-chan amqp.Delivery
	closes     chan *amqp.Error
}

// dead reports whether the consumer's deliveries can no longer be settled.
// The connection is marked closed before its channels are, so both are asked.
func (c *consumer) dead() bool { return c.conn.IsClosed() || c.ch.IsClosed() }

// open declares the topology and starts a consumer, waiting for the consuming
// connection (bounded by ctx) if it is down.
func (s *subscription) open(ctx context.Context) (*consumer, error) {
	conn, err := s.d.con.current(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.d.declare(conn, s.spec, s.queue); err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: open consumer channel: %w", err)
	}
	c := &consumer{conn: conn, ch: ch, closes: ch.NotifyClose(make(chan *amqp.Error, 1))}
	if err := ch.Qos(s.spec.Prefetch, 0, false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("rabbitmq: set prefetch %d: %w", s.spec.Prefetch, err)
	}
	c.deliveries, err = ch.Consume(s.queue, "", false, false, false, false, nil)
	if err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("rabbitmq: consume %q: %w", s.queue, err)
	}
	return c, nil
}

// batchYields is how often Receive lets amqp091's delivery goroutine run
// before it ends a batch. Measured draining a 2 000-message backlog with
// prefetch 200 in batches of up to 100: without yielding batches averaged 1.9
// messages, with 3 yields 10 to 30 (the broker's push rate bounds the rest).
const batchYields = 3

// Receive implements driver.Subscription: it blocks for one delivery and adds
// whatever else is already buffered, up to max.
func (s *subscription) Receive(ctx context.Context, n int) ([]driver.Delivery, error) {
	s.recvMu.Lock()
	defer s.recvMu.Unlock()
	n = max(n, 1)
	for {
		s.mu.Lock()
		cur, closed := s.cur, s.closed
		s.mu.Unlock()
		if closed {
			return nil, driver.ErrClosed
		}
		if cur == nil {
			c, err := s.reopen(ctx)
			if err != nil {
				return nil, err
			}
			s.mu.Lock()
			if s.closed {
				s.mu.Unlock()
				_ = c.ch.Close()
				return nil, driver.ErrClosed
			}
			s.cur = c
			s.mu.Unlock()
			continue
		}
		select {
		case m, ok := <-cur.deliveries:
			if !ok {
				if err := s.lost(cur); err != nil {
					return nil, err
				}
				continue
			}
			out := make([]driver.Delivery, 1, min(n, 64))
			out[0] = s.wrap(cur, &m)
			for yields := 0; len(out) < n; {
				select {
				case m, ok := <-cur.deliveries:
					if !ok {
						return out, nil // the next Receive notices
					}
					out = append(out, s.wrap(cur, &m))
					yields = 0
					continue
				default:
				}
				if yields == batchYields {
					break
				}
				// amqp091 hands prefetched deliveries over one at a time from
				// its own goroutine; let it run before calling the batch
				// complete, or batches stay near one message long.
				runtime.Gosched()
				yields++
			}
			return out, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.done:
			return nil, driver.ErrClosed
		}
	}
}

// reopen opens a new consumer; waiting for the connection ends with Close too.
func (s *subscription) reopen(ctx context.Context) (*consumer, error) {
	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.done:
			cancel()
		case <-octx.Done():
		}
	}()
	c, err := s.open(octx)
	if err != nil {
		select {
		case <-s.done:
			return nil, driver.ErrClosed
		default:
		}
		if errors.Is(err, ErrClosed) {
			return nil, driver.ErrClosed
		}
		return nil, err
	}
	return c, nil
}

// lost drops a consumer whose delivery channel ended. If the connection is
// gone, the next open waits for the reconnect (the link reports the loss);
// otherwise the channel or consumer alone died, which is reported here.
func (s *subscription) lost(c *consumer) error {
	s.mu.Lock()
	if s.cur == c {
		s.cur = nil
	}
	s.mu.Unlock()
	var reason error = errors.New("consumer cancelled by the broker (queue deleted?)")
	select {
	case cerr, ok := <-c.closes:
		if ok && cerr != nil {
			reason = cerr
		}
	default:
	}
	// Unacked deliveries of a cancelled consumer return to the queue.
	_ = s.d.closeChannel(c.conn, c.ch)
	if s.d.isClosed() || c.conn.IsClosed() {
		// The connection died; the link reports that and the next open
		// waits for its replacement.
		return nil
	}
	return fmt.Errorf("rabbitmq: consumer of %q stopped: %w", s.queue, reason)
}

// Close implements driver.Subscription: closing the channel returns every
// unacked delivery to the queue.
func (s *subscription) Close(context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	cur := s.cur
	s.cur = nil
	s.mu.Unlock()
	s.d.forget(s)
	if cur == nil {
		return nil
	}
	if err := s.d.closeChannel(cur.conn, cur.ch); err != nil {
		return fmt.Errorf("rabbitmq: close consumer of %q: %w", s.queue, err)
	}
	return nil
}

// closeChannel closes ch, waiting at most the close timeout: on a connection
// that died unnoticed the close handshake would wait for the heartbeat to give
// up. The broker requeues the channel's unacked deliveries either way.
func (d *Driver) closeChannel(conn *amqp.Connection, ch *amqp.Channel) error {
	if ch.IsClosed() || conn.IsClosed() {
		return nil
	}
	done := make(chan error, 1)
	go func() { done <- ch.Close() }()
	t := time.NewTimer(d.opts.closeTimeout)
	defer t.Stop()
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, amqp.ErrClosed) && !conn.IsClosed() {
			return err
		}
		// With the connection gone the broker has requeued everything.
		return nil
	case <-t.C:
		return fmt.Errorf("channel close not confirmed within %v", d.opts.closeTimeout)
	}
}

func (s *subscription) wrap(c *consumer, m *amqp.Delivery) *delivery {
	msg := &driver.Message{Payload: m.Body, Headers: make(map[string]string, len(m.Headers))}
	key, ownKey := "", false
	for k, v := range m.Headers {
		if k == HeaderKey {
			key, ownKey = headerString(v)
			continue
		}
		if sv, ok := headerString(v); ok {
			msg.Headers[k] = sv
		}
	}
	if ownKey {
		msg.Key = key
	} else {
		msg.Key = msg.Headers[driver.HeaderPartitionKey]
	}
	if m.Redelivered {
		// Handed out before and not acknowledged: an attempt that ended
		// without a settlement (a crash, a lost channel, a stop).
		driver.CountRedelivery(msg.Headers)
	}
	return &delivery{s: s, c: c, tag: m.DeliveryTag, msg: msg}
}

// headerString renders a header value as text. Nested tables and arrays (such
// as the broker's x-death) are not representable as one string and are left
// out.
func headerString(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case []byte:
		return string(x), true
	case bool:
		return strconv.FormatBool(x), true
	case int8, int16, int32, int64, int, uint8, uint16, uint32, float32, float64:
		return fmt.Sprint(x), true
	case time.Time:
		return x.UTC().Format(time.RFC3339), true
	case amqp.Decimal:
		return fmt.Sprintf("%de-%d", x.Value, x.Scale), true
	}
	return "", false
}

type delivery struct {
	s     *subscription
	c     *consumer
	tag   uint64
	msg   *driver.Message
	guard driver.SettleGuard // a second ack of a tag would close the channel
}

func (d *delivery) Message() *driver.Message { return d.msg }

// Ack implements driver.Delivery.
func (d *delivery) Ack(context.Context) error { return d.ack() }

func (d *delivery) ack() error {
	if d.c.dead() {
		return ErrDeliveryChannelClosed
	}
	if err := d.guard.Claim(); err != nil {
		return err
	}
	if err := d.c.ch.Ack(d.tag, false); err != nil {
		if errors.Is(err, amqp.ErrClosed) {
			return ErrDeliveryChannelClosed
		}
		return fmt.Errorf("rabbitmq: ack: %w", err)
	}
	return nil
}

// Release implements driver.Delivery: msg goes to the back of the group's
// queue (a basic.nack with requeue would put it back at the head, where a
// message whose settlement keeps failing would starve the rest); if that
// publish fails, basic.nack gives it back where it was.
func (d *delivery) Release(ctx context.Context, msg *driver.Message, delay time.Duration) error {
	err := d.Requeue(ctx, msg, delay)
	if err == nil || errors.Is(err, driver.ErrNotHeld) || errors.Is(err, driver.ErrSettled) {
		return err
	}
	if cerr := d.guard.Claim(); cerr != nil {
		return cerr
	}
	if nerr := d.c.ch.Nack(d.tag, false, true); nerr != nil {
		if errors.Is(nerr, amqp.ErrClosed) {
			return ErrDeliveryChannelClosed
		}
		return fmt.Errorf("rabbitmq: nack after %w: %w", err, nerr)
	}
	return nil
}

// Requeue implements driver.Delivery: a confirmed publish of msg to the
// group's own queue, then an ack of the original. With a delay the copy goes
// to the group's retry queue with that TTL, which dead-letters it back to the
// group's queue when due (falling back to the group's queue when the retry
// queue does not exist).
func (d *delivery) Requeue(ctx context.Context, msg *driver.Message, delay time.Duration) error {
	if err := d.guard.Check(); err != nil {
		return err
	}
	if d.c.dead() {
		// Publishing a copy now would duplicate the original the broker
		// already redelivers.
		return ErrDeliveryChannelClosed
	}
	if delay <= 0 || d.s.d.publishTTL(ctx, "", retryQueue(d.s.queue), []*driver.Message{msg}, delay) != nil {
		if err := d.s.d.publish(ctx, "", d.s.queue, []*driver.Message{msg}); err != nil {
			return fmt.Errorf("rabbitmq: requeue to %q: %w", d.s.queue, err)
		}
	}
	return d.ack()
}

// DeadLetter implements driver.Delivery: a confirmed, mandatory publish to the
// dead-letter exchange, then an ack. If the publish fails nothing is acked.
func (d *delivery) DeadLetter(ctx context.Context, msg *driver.Message) error {
	if err := d.guard.Check(); err != nil {
		return err
	}
	if d.c.dead() {
		return ErrDeliveryChannelClosed
	}
	dl := d.s.spec.DeadLetterTopic
	if dl == "" {
		return errors.New("rabbitmq: dead letter: subscription has no dead-letter topic")
	}
	if err := d.s.d.publish(ctx, dl, "", []*driver.Message{msg}); err != nil {
		return fmt.Errorf("rabbitmq: dead letter to %q: %w", dl, err)
	}
	return d.ack()
}
