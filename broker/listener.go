package broker

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/msgx/msgx/backoff"
	"github.com/msgx/msgx/broker/driver"
)

// Handler processes one delivery. Its returned error decides the settlement;
// see the package documentation.
type Handler func(ctx context.Context, d *Delivery) error

// BatchHandler processes a batch and settles it as a whole.
type BatchHandler func(ctx context.Context, ds []*Delivery) error

// Subscription says what a listener consumes and how.
type Subscription struct {
	Topic string
	// Group: listeners in one group share the messages; groups each get all.
	Group string
	// DeadLetterTopic defaults to Topic plus the broker's dead-letter suffix.
	DeadLetterTopic string
	// Expiry asks for a per-instance subscription removed after this idle time
	// (only where the adapter declares SubscriptionExpiry).
	Expiry time.Duration
	// Concurrency is the number of handlers running at once (default 1).
	// Messages with the same key are always handled one at a time, in order.
	Concurrency int
	// Prefetch bounds unsettled deliveries held from the broker (default
	// 2×Concurrency, or 2×BatchSize for batch listeners).
	Prefetch int
	// MaxParked is the room for delayed deliveries (SendDelayed, a requeue's
	// backoff) waiting in the port-local scheduler, on top of Prefetch: up to
	// that many of them never slow down other keys (default 16). More than
	// that fill the prefetch window until they are due.
	MaxParked int
	// BatchSize is the largest batch handed to a BatchHandler (default 100).
	BatchSize int
	// Retry overrides the broker's retry policy when MaxAttempts > 0.
	Retry backoff.Policy
}

// Listener is a running subscription.
type Listener struct {
	b     *Broker
	sub   Subscription
	ds    driver.Subscription
	h     Handler
	bh    BatchHandler
	retry backoff.Policy
	met   listenerMetrics

	recvCtx    context.Context
	stopRecv   context.CancelFunc
	handlerCtx context.Context
	cancelH    context.CancelFunc

	// closing is set when Stop gave up waiting for the handlers: what they
	// return afterwards is not settled. Settlements already under way finish
	// on their own (each is bounded by the settle timeout).
	closing atomic.Bool
	loop    sync.WaitGroup // the receive loop and the workers
	work    []chan *Delivery
	anyW    chan *Delivery // unkeyed deliveries: whichever worker is free takes them
	seed    maphash.Seed
	// epoch is the base of the handler timings: time.Since reads only the
	// monotonic clock, half the cost of time.Now, and it runs twice per message.
	epoch   time.Time
	sched   scheduler // owned by the receive loop
	stopped sync.Once
	stopErr error
	stuck   atomic.Int64 // deliveries held because settlement and release failed
	held    unsettled    // the age of the unsettled deliveries
}

// Listen starts a single-message listener.
func (b *Broker) Listen(ctx context.Context, sub Subscription, h Handler) (*Listener, error) {
	if h == nil {
		return nil, errors.New("broker: nil handler")
	}
	return b.listen(ctx, sub, h, nil)
}

// ListenBatch starts a batch listener; the adapter must declare Batch.
func (b *Broker) ListenBatch(ctx context.Context, sub Subscription, h BatchHandler) (*Listener, error) {
	if h == nil {
		return nil, errors.New("broker: nil handler")
	}
	if !b.Capabilities().Batch {
		return nil, fmt.Errorf("broker %s: batch listener: %w", b.name, ErrUnsupported)
	}
	return b.listen(ctx, sub, nil, h)
}

func (b *Broker) listen(ctx context.Context, sub Subscription, h Handler, bh BatchHandler) (*Listener, error) {
	if !b.running() {
		return nil, ErrNotStarted
	}
	if sub.Topic == "" || sub.Group == "" {
		return nil, errors.New("broker: subscription needs a topic and a group")
	}
	if sub.Expiry > 0 && !b.Capabilities().SubscriptionExpiry {
		return nil, fmt.Errorf("broker %s: subscription expiry: %w", b.name, ErrUnsupported)
	}
	if sub.Concurrency <= 0 {
		sub.Concurrency = 1
	}
	if sub.BatchSize <= 0 {
		sub.BatchSize = 100
	}
	if sub.Prefetch <= 0 {
		if bh != nil {
			sub.Prefetch = 2 * sub.BatchSize
		} else {
			sub.Prefetch = 2 * sub.Concurrency
		}
	}
	if sub.DeadLetterTopic == "" {
		sub.DeadLetterTopic = sub.Topic + b.opts.dlqSuffix
	}
	if sub.MaxParked <= 0 {
		sub.MaxParked = 16
	}
	// Parked deliveries stay unsettled: the adapter's window has room for
	// them on top of the prefetch, so that they do not stop other keys.
	window := sub.Prefetch
	if !b.Capabilities().NativeDelay {
		window += sub.MaxParked
	}
	retry := b.opts.retry
	if sub.Retry.MaxAttempts > 0 {
		retry = sub.Retry
	}
	ds, err := b.drv.Subscribe(ctx, driver.SubscriptionSpec{
		Topic: sub.Topic, Group: sub.Group, DeadLetterTopic: sub.DeadLetterTopic,
		Expiry: sub.Expiry, Prefetch: window,
	})
	if err != nil {
		return nil, fmt.Errorf("broker %s: subscribe %q/%q: %w", b.name, sub.Topic, sub.Group, err)
	}
	l := &Listener{b: b, sub: sub, ds: ds, h: h, bh: bh, retry: retry, seed: maphash.MakeSeed(),
		met: b.met.forListener(sub.Topic, sub.Group), epoch: time.Now()}
	l.held.wake = make(chan struct{}, 1)
	// Listener lifetimes are not bound to the ctx that created them: Stop ends them.
	l.recvCtx, l.stopRecv = context.WithCancel(context.WithoutCancel(ctx))
	// The handler's context carries the start of the stop (Stopping), so
	// that a handler waiting to retry gives up at once instead of holding
	// the stop until its deadline.
	l.handlerCtx, l.cancelH = context.WithCancel(context.WithValue(context.WithoutCancel(ctx), stoppingKey{}, l.recvCtx.Done()))
	// With one handler at a time (and for batches) the receive loop runs the
	// handler itself; otherwise each worker owns a key shard.
	if bh == nil && sub.Concurrency > 1 {
		l.work = make([]chan *Delivery, sub.Concurrency)
		l.anyW = make(chan *Delivery)
		for i := range l.work {
			l.work[i] = make(chan *Delivery, 1)
			l.loop.Add(1)
			go l.worker(l.work[i])
		}
	}
	b.mu.Lock()
	b.listeners[l] = struct{}{}
	b.mu.Unlock()
	l.loop.Add(1)
	go l.receive()
	if b.opts.stallThreshold > 0 {
		l.loop.Add(1)
		go l.watch()
	}
	return l, nil
}
