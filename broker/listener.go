package broker

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/internal/backoff"
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
	// that many of them never slow down other keys (default Prefetch, at
	// least 16). More than that fill the prefetch window until they are due.
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
		sub.MaxParked = max(sub.Prefetch, 16)
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
	// Listener lifetimes are not bound to the ctx that created them: Stop ends them.
	l.recvCtx, l.stopRecv = context.WithCancel(context.WithoutCancel(ctx))
	l.handlerCtx, l.cancelH = context.WithCancel(context.WithoutCancel(ctx))
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
	return l, nil
}

func (l *Listener) receive() {
	var t tally // the counts of the handlers run on this goroutine
	defer func() {
		l.met.flush(&t)
		l.unpark()
		for _, c := range l.work {
			close(c)
		}
		if l.anyW != nil {
			close(l.anyW)
		}
		l.loop.Done()
	}()
	// Take whatever the adapter has buffered, up to the prefetch window: one
	// Receive call per message would cost a lock round per message.
	max := l.sub.Prefetch
	if l.bh != nil {
		max = l.sub.BatchSize
	}
	failures := 0
	for {
		if due := l.due(); len(due) > 0 && !l.handle(due, &t) {
			return
		}
		l.met.flush(&t) // before Receive may block
		rctx, cancel := l.receiveContext()
		raw, err := l.ds.Receive(rctx, max)
		cancel()
		if err != nil {
			if l.recvCtx.Err() != nil || errors.Is(err, driver.ErrClosed) {
				return
			}
			if rctx.Err() != nil {
				continue // a parked delivery is due
			}
			failures++
			l.b.report(Event{Topic: l.sub.Topic, Group: l.sub.Group, Err: fmt.Errorf("receive: %w", err)})
			wait := backoff.Policy{Initial: 100 * time.Millisecond, Max: 5 * time.Second}.Delay(failures)
			select {
			case <-l.b.opts.clock.After(wait):
			case <-l.recvCtx.Done():
				return
			}
			continue
		}
		failures = 0
		// One allocation for the whole receive instead of one per delivery.
		backing := make([]Delivery, len(raw))
		ds := make([]*Delivery, 0, len(raw))
		for i, r := range raw {
			d := &backing[i]
			initDelivery(d, r, l)
			// Deliveries requeued by another group on a re-publishing broker
			// are not ours; early ones wait in the scheduler.
			if !l.foreign(d, &t) && !l.parkIfEarly(d) {
				ds = append(ds, d)
			}
		}
		l.met.received.Add(float64(len(raw)))
		if len(ds) > 0 && !l.handle(ds, &t) {
			return
		}
	}
}

// handle runs the handlers of ds: a batch listener's at once, otherwise on
// this goroutine (one worker) or on the workers. It reports false when the
// listener is stopping.
func (l *Listener) handle(ds []*Delivery, t *tally) bool {
	if l.bh != nil {
		// A batch listener has one worker: the receive loop itself.
		l.processBatch(ds, t)
		return true
	}
	var since time.Duration // Receive may have waited: read the clock anew
	for _, d := range ds {
		if l.recvCtx.Err() != nil {
			return false // stopping: what has not started stays unsettled
		}
		if l.work == nil {
			// One worker: run it here and save a goroutine hand-off per message.
			since = l.process(d, t, since)
			continue
		}
		if !l.dispatch(l.workerFor(d), d) {
			return false
		}
	}
	return true
}

// workerFor picks the worker for a delivery: the same key always goes to the same
// worker, which keeps per-key order with concurrent handlers. An unkeyed
// delivery goes to whichever worker is free, so it never waits behind a slow
// handler while another worker idles.
func (l *Listener) workerFor(d *Delivery) chan *Delivery {
	if d.Key == "" {
		return l.anyW
	}
	return l.work[maphash.String(l.seed, d.Key)%uint64(len(l.work))]
}

func (l *Listener) dispatch(c chan *Delivery, d *Delivery) bool {
	select {
	case c <- d:
		return true
	case <-l.recvCtx.Done():
		return false
	}
}

func (l *Listener) worker(c chan *Delivery) {
	var t tally // the counts of the handlers run on this goroutine
	defer func() {
		l.met.flush(&t)
		l.loop.Done()
	}()
	own, shared := c, l.anyW
	var since time.Duration
	for own != nil || shared != nil {
		var d *Delivery
		var ok bool
		select {
		case d, ok = <-own:
			if !ok {
				own = nil
				continue
			}
		case d, ok = <-shared:
			if !ok {
				shared = nil
				continue
			}
		default:
			// Nothing queued: publish the counts before waiting, and read
			// the clock anew after it.
			l.met.flush(&t)
			since = 0
			select {
			case d, ok = <-own:
				if !ok {
					own = nil
					continue
				}
			case d, ok = <-shared:
				if !ok {
					shared = nil
					continue
				}
			}
		}
		since = l.process(d, &t, since)
	}
}

// process runs the handler for one delivery and settles it; t is the calling
// goroutine's tally.
//
// The handler's run time is timed from since, the end of the previous
// handler this goroutine ran back to back (zero: read the clock), and process
// returns the end of its own handler when the next may start from it. So a
// goroutine running deliveries back to back reads the clock once per message
// (a read costs as much as a quarter of the rest of a delivery's way through
// the port), and a handler's time includes the acknowledgement of the one
// before it, a fraction of a microsecond. Anything slower — a held delivery,
// a settlement that publishes — makes the next handler read the clock anew.
func (l *Listener) process(d *Delivery, t *tally, since time.Duration) time.Duration {
	ctx := l.handlerCtx
	if ctx.Err() != nil {
		return 0 // stopping: leave it unsettled for redelivery
	}
	start := since
	if start == 0 {
		start = time.Since(l.epoch)
	}
	err := l.call(d)
	end := time.Since(l.epoch)
	if t.observe(end - start) {
		l.met.flush(t)
	}
	disp := decide(ctx, err)
	if !l.settles(disp, 1, err, t) {
		return 0
	}
	attempts := d.RedeliveryCount + 1
	disp, err = l.exhaust(disp, err, attempts)
	if !l.settle(d, disp, err, attempts, t) || disp != Ack {
		return 0
	}
	return end
}

// processBatch runs the batch handler and settles the batch as a whole.
func (l *Listener) processBatch(ds []*Delivery, t *tally) {
	ctx := l.handlerCtx
	if ctx.Err() != nil {
		return // stopping: leave it unsettled for redelivery
	}
	start := time.Since(l.epoch)
	err := l.callBatch(ds)
	t.observe(time.Since(l.epoch) - start)
	disp := decide(ctx, err)
	if !l.settles(disp, len(ds), err, t) {
		return
	}
	// One decision for the whole batch (exhaustion included): a batch never
	// ends part dead-lettered and part requeued. Its attempts are those of the
	// delivery that has been handled most often. A delivery whose settlement
	// fails is released (see settleOne), so none stays held.
	attempts := 0
	for _, d := range ds {
		attempts = max(attempts, d.RedeliveryCount+1)
	}
	disp, err = l.exhaust(disp, err, attempts)
	for _, d := range ds {
		l.settle(d, disp, err, attempts, t)
	}
}

// foreign settles a delivery that a re-publishing broker requeued for another
// group: it is not ours to handle.
func (l *Listener) foreign(d *Delivery, t *tally) bool {
	g := d.forGroup
	if g == "" || g == l.sub.Group {
		return false
	}
	l.settle(d, Ack, nil, d.RedeliveryCount+1, t)
	return true
}

func (l *Listener) call(d *Delivery) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler panic: %v\n%s", r, debug.Stack())
		}
	}()
	return l.h((*deliveryCtx)(d), d)
}

func (l *Listener) callBatch(ds []*Delivery) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("batch handler panic: %v\n%s", r, debug.Stack())
		}
	}()
	return l.bh((*deliveryCtx)(ds[0]), ds)
}

// Stop stops receiving, waits for in-flight handlers until ctx ends, then
// cancels them: whatever they return after that is not settled. It closes the
// adapter subscription, so unsettled messages are redelivered to the group.
// Every step is bounded: the close by ctx, or by the close timeout when ctx
// ended during the wait for the handlers; a close that overruns goes on in
// the background and Stop reports it.
func (l *Listener) Stop(ctx context.Context) error {
	l.stopped.Do(func() {
		l.stopRecv()
		done := make(chan struct{})
		go func() { l.loop.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			l.closing.Store(true)
		}
		l.cancelH()
		// Closing the subscription gives the stuck deliveries back.
		l.met.stuck.Sub(float64(l.stuck.Load()))
		if err := boundedClose(ctx, l.b.opts.closeTimeout, l.ds.Close); err != nil {
			l.stopErr = fmt.Errorf("broker %s: close subscription %q/%q: %w", l.b.name, l.sub.Topic, l.sub.Group, err)
		}
		l.b.forget(l)
	})
	return l.stopErr
}

// boundedClose runs closeFn with ctx, or with a context of grace when ctx
// has ended, and returns no later than that context does.
func boundedClose(ctx context.Context, grace time.Duration, closeFn func(context.Context) error) error {
	cctx, cancel := ctx, context.CancelFunc(func() {})
	if ctx.Err() != nil {
		cctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), grace)
	}
	errc := make(chan error, 1)
	go func() {
		defer cancel()
		errc <- closeFn(cctx)
	}()
	select {
	case err := <-errc:
		return err
	case <-cctx.Done():
		select {
		case err := <-errc: // it finished as the context ended
			return err
		default:
		}
		return fmt.Errorf("not closed in time, still closing: %w", cctx.Err())
	}
}

type deliveryKey struct{}

// deliveryCtx is the context a handler runs with: the listener's handler
// context plus the delivery, for Logger. It is the Delivery itself under
// another type, so handing it over allocates nothing and the Delivery's own
// method set stays as it is.
type deliveryCtx Delivery

func (c *deliveryCtx) parent() context.Context { return c.l.handlerCtx }

func (c *deliveryCtx) Deadline() (time.Time, bool) { return c.parent().Deadline() }
func (c *deliveryCtx) Done() <-chan struct{}       { return c.parent().Done() }
func (c *deliveryCtx) Err() error                  { return c.parent().Err() }

func (c *deliveryCtx) Value(key any) any {
	if _, ok := key.(deliveryKey); ok {
		return (*Delivery)(c)
	}
	return c.parent().Value(key)
}

// Logger returns a logger carrying the request id, correlation id, event id,
// topic and redelivery count of the delivery being handled in ctx, or base when
// ctx carries none. The attributes are built only when asked for.
func Logger(ctx context.Context, base *slog.Logger) *slog.Logger {
	if base == nil {
		base = slog.Default()
	}
	d, _ := ctx.Value(deliveryKey{}).(*Delivery)
	if d == nil {
		return base
	}
	return deliveryLogger(base, d)
}

func (l *Listener) logFor(d *Delivery) *slog.Logger { return deliveryLogger(l.b.opts.logger, d) }

func deliveryLogger(base *slog.Logger, d *Delivery) *slog.Logger {
	attrs := []any{"topic", d.Topic, "group", d.Group, "redelivery_count", d.RedeliveryCount}
	for _, h := range [...]struct{ header, attr string }{
		{HeaderRequestID, "request_id"}, {HeaderCorrelationID, "correlation_id"},
		{HeaderEventID, "event_id"}, {HeaderTenantID, "tenant_id"}, {HeaderType, "type"},
	} {
		if v := d.Header(h.header); v != "" {
			attrs = append(attrs, h.attr, v)
		}
	}
	return base.With(attrs...)
}
