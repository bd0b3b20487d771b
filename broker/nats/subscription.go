package nats

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	natsio "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgx/msgx/broker/driver"
)

// subscription pulls from one consumer. It keeps the messages it holds from
// the server (buffered + handed out unsettled + requested in open pulls) within
// the prefetch, and keeps them alive with in-progress acks while open.
type subscription struct {
	d        *Driver
	cons     jetstream.Consumer
	spec     driver.SubscriptionSpec
	prefetch int

	ctx    context.Context // ends at Close: stops the puller, the keeper and open pulls
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu        sync.Mutex
	buf       []*delivery            // arrived, not yet handed out
	held      map[*delivery]struct{} // handed out, unsettled
	requested int                    // asked for by open pulls, not arrived
	pulls     int                    // open pulls
	failures  int                    // pulls failed in a row: the puller backs off
	closed    bool
	ready     chan struct{} // cap 1: a Receive may find messages
	wake      chan struct{} // cap 1: the puller may have room
	closedCh  chan struct{}
}

func newSubscription(d *Driver, cons jetstream.Consumer, spec driver.SubscriptionSpec) *subscription {
	ctx, cancel := context.WithCancel(context.Background())
	return &subscription{
		d: d, cons: cons, spec: spec, prefetch: max(spec.Prefetch, 1),
		ctx: ctx, cancel: cancel,
		held:     map[*delivery]struct{}{},
		ready:    make(chan struct{}, 1),
		wake:     make(chan struct{}, 1),
		closedCh: make(chan struct{}),
	}
}

func (s *subscription) start() {
	s.wg.Add(2)
	go s.puller()
	go s.keeper()
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// puller keeps pull requests open for the room left in the prefetch. A new
// pull is sent when at least half the prefetch is free, or when none is open
// and any room is left, so small prefetches stay responsive and large ones
// pull in big batches.
func (s *subscription) puller() {
	defer s.wg.Done()
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return
		}
		if failures := s.failures; failures > 0 {
			s.mu.Unlock()
			if !s.pause(failures) {
				return
			}
			s.mu.Lock()
		}
		room := s.prefetch - len(s.buf) - len(s.held) - s.requested
		if !s.needPull() {
			s.mu.Unlock()
			select {
			case <-s.wake:
			case <-s.ctx.Done():
			}
			continue
		}
		s.requested += room
		s.pulls++
		s.mu.Unlock()

		batch, err := s.pull(room)
		if err != nil {
			s.mu.Lock()
			s.requested -= room
			s.pulls--
			s.failures++
			s.mu.Unlock()
			if s.ctx.Err() != nil {
				return
			}
			s.d.report(fmt.Errorf("pull %s/%s: %w", s.spec.Topic, s.spec.Group, err))
			continue
		}
		s.wg.Add(1)
		go s.drain(batch, room)
	}
}

func (s *subscription) pull(n int) (jetstream.MessageBatch, error) {
	expiry := s.d.o.pullExpiry
	// Close cancels s.ctx and with it every open pull.
	ctx, cancel := context.WithTimeout(s.ctx, expiry)
	batch, err := s.cons.Fetch(n, jetstream.FetchContext(ctx), jetstream.FetchHeartbeat(expiry/5))
	if err != nil {
		cancel()
		return nil, err
	}
	return &cancelBatch{MessageBatch: batch, cancel: cancel}, nil
}

type cancelBatch struct {
	jetstream.MessageBatch
	cancel context.CancelFunc
}

// pause backs off after failed pulls (a lost connection, a missing
// consumer); false when the subscription closed.
func (s *subscription) pause(failures int) bool {
	wait := min(100*time.Millisecond<<min(failures-1, 6), 5*time.Second)
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.ctx.Done():
		return false
	}
}

// drain moves the messages of one pull into the buffer as they arrive.
func (s *subscription) drain(batch jetstream.MessageBatch, n int) {
	defer s.wg.Done()
	defer batch.(*cancelBatch).cancel()
	got := 0
	for m := range batch.Messages() {
		got++
		now := time.Now()
		s.mu.Lock()
		s.requested--
		if s.closed {
			s.mu.Unlock()
			// Never handed out: give it back to the group at once.
			_ = m.Nak()
			continue
		}
		s.buf = append(s.buf, &delivery{s: s, m: m, got: now, touched: now})
		s.failures = 0
		s.mu.Unlock()
		signal(s.ready)
	}
	err := batch.Error()
	failed := err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
	s.mu.Lock()
	s.requested -= n - got
	s.pulls--
	if failed {
		s.failures++
	} else {
		s.failures = 0
	}
	closed := s.closed
	s.mu.Unlock()
	signal(s.wake)
	if !failed || closed {
		return
	}
	s.d.report(fmt.Errorf("pull %s/%s: %w", s.spec.Topic, s.spec.Group, err))
	switch {
	case errors.Is(err, jetstream.ErrConsumerDeleted), errors.Is(err, jetstream.ErrConsumerNotFound),
		errors.Is(err, natsio.ErrNoResponders):
		// The consumer (or its stream) was removed under a live subscription:
		// recreate it so the group keeps consuming.
		s.recreate(false)
	case errors.Is(err, jetstream.ErrNoHeartbeat):
		// A lost connection, or a consumer removed while no pull was open:
		// the server answers a pull for a missing consumer with silence.
		s.recreate(true)
	}
}

// recreate puts the stream and the consumer back; ifGone first asks the server
// whether the consumer still exists.
func (s *subscription) recreate(ifGone bool) {
	ctx, cancel := context.WithTimeout(s.ctx, s.d.o.requestTimeout)
	defer cancel()
	if ifGone {
		_, err := s.cons.Info(ctx)
		if !errors.Is(err, jetstream.ErrConsumerNotFound) && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return
		}
	}
	if err := s.d.ensureStream(ctx, s.spec.Topic, false, true); err != nil {
		s.d.report(fmt.Errorf("recreate stream of %s: %w", s.spec.Topic, err))
		return
	}
	if _, err := s.d.ensureConsumer(ctx, s.spec); err != nil {
		s.d.report(fmt.Errorf("recreate consumer %s/%s: %w", s.spec.Topic, s.spec.Group, err))
	}
}

// keeper sends in-progress acks for held messages so the server does not
// redeliver them while a handler runs (or the port's scheduler holds them),
// and gives up on those held longer than MaxHold. The acks also count as
// activity of an expiring consumer: with the prefetch full no pull is open,
// and a consumer without pulls or acks for its Expiry is deleted.
func (s *subscription) keeper() {
	defer s.wg.Done()
	every := s.d.o.ackWait / 3
	if s.spec.Expiry > 0 {
		every = min(every, s.spec.Expiry/3)
	}
	every = max(every, 10*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	var touch []jetstream.Msg
	for {
		select {
		case <-t.C:
		case <-s.ctx.Done():
			return
		}
		now := time.Now()
		touch = touch[:0]
		dropped := false
		s.mu.Lock()
		keep := s.buf[:0]
		for _, e := range s.buf {
			if now.Sub(e.got) >= s.d.o.maxHold {
				dropped = true
				continue
			}
			if now.Sub(e.touched) >= every {
				e.touched = now
				touch = append(touch, e.m)
			}
			keep = append(keep, e)
		}
		clear(s.buf[len(keep):])
		s.buf = keep
		for e := range s.held {
			if now.Sub(e.got) >= s.d.o.maxHold {
				delete(s.held, e)
				dropped = true
				continue
			}
			if now.Sub(e.touched) >= every {
				e.touched = now
				touch = append(touch, e.m)
			}
		}
		s.mu.Unlock()
		if dropped {
			signal(s.wake)
		}
		for _, m := range touch {
			// Best effort: a lost in-progress ack at worst lets the server
			// redeliver, which at-least-once delivery allows.
			_ = m.InProgress()
		}
	}
}

// Receive implements driver.Subscription.
func (s *subscription) Receive(ctx context.Context, limit int) ([]driver.Delivery, error) {
	limit = min(max(limit, 1), s.prefetch)
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, driver.ErrClosed
		}
		if n := min(len(s.buf), limit); n > 0 {
			taken := s.buf[:n]
			out := make([]driver.Delivery, n)
			for i, d := range taken {
				s.held[d] = struct{}{}
				out[i] = d
			}
			// Reslicing instead of copying the rest down keeps Receive O(n);
			// append moves the live entries to a new array when it runs out.
			clear(taken)
			s.buf = s.buf[n:]
			more := len(s.buf) > 0
			s.mu.Unlock()
			if more {
				signal(s.ready)
			}
			for _, d := range out {
				d := d.(*delivery)
				d.msg = toDriver(d.m)
			}
			return out, nil
		}
		s.mu.Unlock()
		select {
		case <-s.ready:
		case <-s.closedCh:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func toDriver(m jetstream.Msg) *driver.Message {
	h := m.Headers()
	out := &driver.Message{Payload: m.Data(), Headers: make(map[string]string, len(h)+1)}
	key, explicit := "", false
	for k, v := range h {
		if len(v) == 0 {
			continue
		}
		if k == keyHeader {
			key, explicit = v[0], true
			continue
		}
		out.Headers[k] = v[0]
	}
	if !explicit {
		key = out.Headers[driver.HeaderPartitionKey]
	}
	out.Key = key
	// The server counts deliveries, including those after a lost or expired
	// one; that native count is the redelivery count the port acts on.
	if n, ok := numDelivered(m); ok && n > 0 {
		out.Headers[driver.HeaderRedeliveryCount] = strconv.FormatUint(n-1, 10)
	}
	return out
}

// numDelivered reads the delivery count from the ack subject
// ($JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<dseq>.<ts>.<pending>, or
// the form with domain and account hash before the stream) without the
// allocations of a full Metadata parse.
func numDelivered(m jetstream.Msg) (uint64, bool) {
	reply := m.Reply()
	idx := -1
	switch strings.Count(reply, ".") + 1 {
	case 9:
		idx = 4
	case 11, 12:
		idx = 6
	}
	if idx >= 0 && strings.HasPrefix(reply, "$JS.ACK.") {
		tok := reply
		for range idx {
			tok = tok[strings.IndexByte(tok, '.')+1:]
		}
		if end := strings.IndexByte(tok, '.'); end >= 0 {
			tok = tok[:end]
		}
		if n, err := strconv.ParseUint(tok, 10, 64); err == nil {
			return n, true
		}
	}
	md, err := m.Metadata()
	if err != nil {
		return 0, false
	}
	return md.NumDelivered, true
}

// release ends the driver's hold on a delivery (no more in-progress acks) and
// frees its place in the prefetch.
func (s *subscription) release(d *delivery) {
	s.mu.Lock()
	delete(s.held, d)
	wake := s.needPull()
	s.mu.Unlock()
	// Waking the puller only when it would pull saves a goroutine switch per message.
	if wake {
		signal(s.wake)
	}
}

// needPull reports whether the puller would send a pull now. s.mu is held.
func (s *subscription) needPull() bool {
	room := s.prefetch - len(s.buf) - len(s.held) - s.requested
	return room >= max(1, s.prefetch/2) || (room > 0 && s.pulls == 0)
}

// Close implements driver.Subscription. Handed-out deliveries are not settled:
// they stop being kept alive and the server redelivers them to the group after
// the ack wait. Buffered messages never handed out are nak'ed so the group
// gets them again at once.
func (s *subscription) Close(context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	buf := s.buf
	s.buf = nil
	s.held = map[*delivery]struct{}{}
	close(s.closedCh)
	s.mu.Unlock()
	s.cancel()
	for _, d := range buf {
		_ = d.m.Nak()
	}
	s.wg.Wait()
	s.d.forget(s)
	return nil
}

// delivery is one message pulled from the server and not yet settled.
type delivery struct {
	s       *subscription
	m       jetstream.Msg
	msg     *driver.Message // set when handed out
	got     time.Time       // when it arrived: MaxHold counts from here
	touched time.Time       // last arrival or in-progress ack (under s.mu)
	guard   driver.SettleGuard
}

func (d *delivery) Message() *driver.Message { return d.msg }

// Ack implements driver.Delivery.
func (d *delivery) Ack(ctx context.Context) error {
	if err := d.guard.Claim(); err != nil {
		return err
	}
	defer d.s.release(d)
	var err error
	if d.s.d.o.ackSync {
		err = d.m.DoubleAck(ctx)
	} else {
		err = d.m.Ack()
	}
	if err != nil {
		return fmt.Errorf("nats: ack: %w", err)
	}
	return nil
}

// Requeue implements driver.Delivery with a native nak: the server redelivers
// the stored message after delay and counts the delivery, so msg (the port's
// re-publishable copy) is not needed.
func (d *delivery) Requeue(_ context.Context, _ *driver.Message, delay time.Duration) error {
	if err := d.guard.Claim(); err != nil {
		return err
	}
	defer d.s.release(d)
	var err error
	if delay > 0 {
		err = d.m.NakWithDelay(delay)
	} else {
		err = d.m.Nak()
	}
	if err != nil {
		return fmt.Errorf("nats: nak: %w", err)
	}
	return nil
}

// Release implements driver.Delivery with a delayed nak: the server
// redelivers the stored message after delay.
func (d *delivery) Release(_ context.Context, _ *driver.Message, delay time.Duration) error {
	if err := d.guard.Claim(); err != nil {
		return err
	}
	defer d.s.release(d)
	if err := d.m.NakWithDelay(delay); err != nil {
		return fmt.Errorf("nats: nak: %w", err)
	}
	return nil
}

// DeadLetter implements driver.Delivery: a confirmed publish to the
// dead-letter topic, then Term so the server never redelivers the original. If
// the publish fails nothing is settled and the original is redelivered after
// the ack wait.
func (d *delivery) DeadLetter(ctx context.Context, msg *driver.Message) error {
	if err := d.guard.Check(); err != nil {
		return err
	}
	defer d.s.release(d)
	if err := d.s.d.Publish(ctx, d.s.spec.DeadLetterTopic, []*driver.Message{msg}); err != nil {
		return fmt.Errorf("nats: dead letter to %q: %w", d.s.spec.DeadLetterTopic, err)
	}
	if err := d.guard.Claim(); err != nil {
		return err
	}
	if err := d.m.Term(); err != nil {
		return fmt.Errorf("nats: term after dead letter: %w", err)
	}
	return nil
}
