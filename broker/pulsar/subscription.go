package pulsar

import (
	"context"

	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/msgx/msgx/broker/driver"
)

// Subscribe implements driver.Broker: a consumer on the group's durable
// subscription, prefetching at most spec.Prefetch messages.
func (d *Driver) Subscribe(ctx context.Context, spec driver.SubscriptionSpec) (driver.Subscription, error) {
	d.mu.Lock()
	if d.closed || !d.started {
		d.mu.Unlock()
		return nil, fmt.Errorf("pulsar: subscribe %q/%q: %w", spec.Topic, spec.Group, ErrClosed)
	}
	client := d.client
	d.mu.Unlock()

	if spec.DeadLetterTopic != "" {
		// Without a subscription Pulsar keeps nothing: dead letters need a
		// durable one before the first is sent. A destination that cannot have
		// one (refused) still lets the subscription consume.
		if err := d.keepDeadLetters(ctx, client, spec.DeadLetterTopic); err != nil {
			d.opts.logger.Warn("pulsar: dead letters have no keeping subscription; they may be lost until they have one",
				"topic", spec.Topic, "group", spec.Group, "dead_letter_topic", spec.DeadLetterTopic, "err", err)
		}
	}
	s := &subscription{d: d, spec: spec, closed: make(chan struct{}), nack: &nackDelay{}}
	s.nack.next.Store(int64(d.opts.nackDelay))
	opts := pulsar.ConsumerOptions{
		Topic:                       d.topic(spec.Topic),
		SubscriptionName:            spec.Group,
		Type:                        d.opts.subType.native(),
		SubscriptionInitialPosition: d.opts.initial,
		ReceiverQueueSize:           max(spec.Prefetch, 1),
		AckWithResponse:             d.opts.ackResponse,
		NackBackoffPolicy:           s.nack,
		// Redeliver at the requested time, not rounded down to 256 ms slots.
		NackPrecisionBit: new(int64),
	}
	type result struct {
		c   pulsar.Consumer
		err error
	}
	res := make(chan result, 1)
	go func() {
		c, err := client.Subscribe(opts)
		res <- result{c, err}
	}()
	var r result
	select {
	case r = <-res:
	case <-ctx.Done():
		// Close the consumer if it is created after all.
		go func() {
			if r := <-res; r.err == nil {
				r.c.Close()
			}
		}()
		return nil, fmt.Errorf("pulsar: subscribe %q/%q: %w", spec.Topic, spec.Group, ctx.Err())
	}
	if r.err != nil {
		return nil, fmt.Errorf("pulsar: subscribe %q/%q: %w", spec.Topic, spec.Group, r.err)
	}
	s.c = r.c
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		r.c.Close()
		return nil, fmt.Errorf("pulsar: subscribe %q/%q: %w", spec.Topic, spec.Group, ErrClosed)
	}
	d.subs[s] = struct{}{}
	d.mu.Unlock()
	return s, nil
}

// nackDelay is the consumer's negative-acknowledgement backoff: the client asks
// it for the delay of each Nack, synchronously inside the call, so Requeue sets
// the delay the port chose just before nacking.
type nackDelay struct{ next atomic.Int64 }

func (n *nackDelay) Next(uint32) time.Duration { return time.Duration(n.next.Load()) }

type subscription struct {
	d      *Driver
	spec   driver.SubscriptionSpec
	c      pulsar.Consumer
	nack   *nackDelay
	nackMu sync.Mutex // pairs setting the delay with the Nack that reads it

	closeOnce sync.Once
	closed    chan struct{}
	closeErr  error
}

// Receive implements driver.Subscription: it waits for one message and adds
// whatever else the client has prefetched, up to max.
func (s *subscription) Receive(ctx context.Context, max int) ([]driver.Delivery, error) {
	select {
	case <-s.closed:
		return nil, driver.ErrClosed
	default:
	}
	var out []driver.Delivery
	select {
	case cm := <-s.c.Chan():
		out = append(out, s.delivery(cm.Message))
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.closed:
		return nil, driver.ErrClosed
	}
	for len(out) < max {
		select {
		case cm := <-s.c.Chan():
			out = append(out, s.delivery(cm.Message))
		default:
			return out, nil
		}
	}
	return out, nil
}

func (s *subscription) delivery(m pulsar.Message) *delivery {
	// The client builds a fresh property map for every message it hands out,
	// so it becomes the delivery's header map without a copy.
	h := m.Properties()
	if h == nil {
		h = make(map[string]string, 1)
	}
	// The broker counts redeliveries; its count replaces whatever the sender set.
	h[driver.HeaderRedeliveryCount] = strconv.FormatUint(uint64(m.RedeliveryCount()), 10)
	return &delivery{s: s, m: m, msg: &driver.Message{Key: m.Key(), Payload: m.Payload(), Headers: h}}
}

// Close implements driver.Subscription: closing the consumer makes the broker
// redeliver what it had handed over and was not acknowledged.
func (s *subscription) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		close(s.closed)
		done := make(chan struct{})
		go func() {
			s.c.Close()
			close(done)
		}()
		select {
		case <-done:
		case <-ctx.Done():
			s.closeErr = fmt.Errorf("pulsar: close consumer %q/%q: %w", s.spec.Topic, s.spec.Group, ctx.Err())
		}
		s.d.mu.Lock()
		delete(s.d.subs, s)
		s.d.mu.Unlock()
	})
	return s.closeErr
}

// keepDeadLetters creates the durable subscription driver.DeadLetterGroup on
// the dead-letter topic (from the earliest message) unless the driver did
// already: it keeps every dead letter until someone reads it.
func (d *Driver) keepDeadLetters(ctx context.Context, client pulsar.Client, topic string) error {
	d.mu.Lock()
	kept := d.kept[topic]
	d.mu.Unlock()
	if kept {
		return nil
	}
	res := make(chan error, 1)
	go func() {
		c, err := client.Subscribe(pulsar.ConsumerOptions{
			Topic:                       d.topic(topic),
			SubscriptionName:            driver.DeadLetterGroup,
			Type:                        pulsar.Shared,
			SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
		})
		if err == nil {
			c.Close()
		}
		res <- err
	}()
	select {
	case err := <-res:
		if err != nil {
			return err
		}
	case <-ctx.Done():
		return ctx.Err()
	}
	d.mu.Lock()
	d.kept[topic] = true
	d.mu.Unlock()
	return nil
}

type delivery struct {
	s     *subscription
	m     pulsar.Message
	msg   *driver.Message
	guard driver.SettleGuard
}

func (d *delivery) Message() *driver.Message { return d.msg }

// Ack implements driver.Delivery: a native acknowledgement by message id.
func (d *delivery) Ack(context.Context) error {
	if err := d.guard.Claim(); err != nil {
		return err
	}
	if err := d.s.c.Ack(d.m); err != nil {
		return fmt.Errorf("pulsar: ack %v: %w", d.m.ID(), err)
	}
	return nil
}

// Requeue implements driver.Delivery with a negative acknowledgement: the
// broker redelivers the original message after delay and counts the
// redelivery, so msg (the port's copy with updated headers) is not sent.
func (d *delivery) Requeue(_ context.Context, _ *driver.Message, delay time.Duration) error {
	return d.nack(delay)
}

// Release implements driver.Delivery with a delayed negative acknowledgement.
func (d *delivery) Release(_ context.Context, _ *driver.Message, delay time.Duration) error {
	return d.nack(delay)
}

func (d *delivery) nack(delay time.Duration) error {
	if err := d.guard.Claim(); err != nil {
		return err
	}
	s := d.s
	select {
	case <-s.closed:
		// The broker redelivers it anyway once the consumer is gone.
		return fmt.Errorf("pulsar: nack on a closed subscription: %w", driver.ErrNotHeld)
	default:
	}
	delay = max(delay, 0)
	if delay > 0 {
		// The client files the redelivery under a whole-millisecond time,
		// truncated: one more millisecond keeps it from coming back early.
		delay += time.Millisecond
	}
	s.nackMu.Lock()
	s.nack.next.Store(int64(delay))
	s.c.Nack(d.m)
	s.nackMu.Unlock()
	return nil
}

// DeadLetter implements driver.Delivery: a confirmed publish to the dead-letter
// topic, then the acknowledgement. If the publish fails nothing is settled.
func (d *delivery) DeadLetter(ctx context.Context, msg *driver.Message) error {
	if err := d.guard.Check(); err != nil {
		return err
	}
	if err := d.s.d.Publish(ctx, d.s.spec.DeadLetterTopic, []*driver.Message{msg}); err != nil {
		return fmt.Errorf("pulsar: dead-letter publish to %q: %w", d.s.spec.DeadLetterTopic, err)
	}
	return d.Ack(ctx)
}
