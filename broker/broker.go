// Package broker is the portable broker port business code uses: confirmed
// sends, single and batch listeners whose returned error decides the
// settlement, and capabilities declared by the adapter.
//
// The completion contract: a delivery is settled only after its handler has
// returned. nil → ACK; an ordinary error → REQUEUE (redelivery count + 1, with
// the retry policy's backoff) until the policy is exhausted, then DEAD_LETTER; a
// Poison error → DEAD_LETTER at once; cancellation → no settlement (the broker
// redelivers later); an outcome asking for two dispositions → an adapter error
// and no settlement. That decision is made in one function (decide) and carried
// out in one method (Listener.settle); adapters in the sub-packages implement the
// narrow driver interface and never decide anything.
package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgx/msgx/backoff"
	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/clock"
)

// Capabilities is what the adapter declared at Start.
type Capabilities = driver.Capabilities

// ErrUnsupported is returned for a feature the adapter did not declare.
var ErrUnsupported = errors.New("broker: not supported by this adapter")

// ErrNotStarted is returned by operations on a broker that is not running; an
// adapter's own not-started errors match it too.
var ErrNotStarted = driver.ErrNotStarted

// Event is an asynchronous failure reported on the lifecycle channel: a lost
// connection, a failed settlement, a conflicting disposition.
type Event struct {
	Time  time.Time
	Topic string
	Group string
	Err   error
}

// Broker is the portable port over one adapter.
type Broker struct {
	drv  driver.Broker
	name string
	opts options
	met  *metrics
	// regErr is a failed metrics registration; Start returns it.
	regErr error

	// startedCh is closed when Start succeeds (Started).
	startedCh chan struct{}

	mu        sync.Mutex
	started   bool
	stopped   bool
	caps      Capabilities
	listeners map[*Listener]struct{}
	events    chan Event
	fwdDone   chan struct{}
}

type options struct {
	logger        *slog.Logger
	clock         clock.Clock
	registerer    prometheus.Registerer
	retry         backoff.Policy
	settleTimeout time.Duration
	settleRetry   backoff.Policy
	closeTimeout  time.Duration
	dlqSuffix     string
	eventBuffer   int
	// stallThreshold: deliveries unsettled for longer are reported (ErrStalled).
	stallThreshold time.Duration
}

// Option configures a Broker.
type Option func(*options)

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithClock sets the clock the local scheduler and backoff read (default wall clock).
func WithClock(c clock.Clock) Option { return func(o *options) { o.clock = c } }

// WithRegisterer registers the port's metrics (default: not registered).
func WithRegisterer(r prometheus.Registerer) Option { return func(o *options) { o.registerer = r } }

// WithRetry sets the default retry policy for listeners (default 5 attempts,
// 1 s doubling to 60 s, 20% jitter).
func WithRetry(p backoff.Policy) Option { return func(o *options) { o.retry = p } }

// WithSettleTimeout bounds each settlement call (default 30 s).
func WithSettleTimeout(d time.Duration) Option { return func(o *options) { o.settleTimeout = d } }

// WithSettleRetry sets how a failed settlement is retried before the
// delivery is released to the broker for redelivery (default 3 attempts,
// 200 ms doubling). Every attempt is bounded by the settle timeout.
func WithSettleRetry(p backoff.Policy) Option { return func(o *options) { o.settleRetry = p } }

// WithCloseTimeout bounds the closing of a subscription or of the adapter
// when the context given to Stop was spent waiting for handlers (default 5 s).
func WithCloseTimeout(d time.Duration) Option { return func(o *options) { o.closeTimeout = d } }

// WithStallThreshold sets how long a delivery may stay unsettled (its handler
// running, its settlement retried, or held after a failed release) before an
// ErrStalled event is reported for it (default 5 min; 0 turns the event off).
// The age itself is always exposed as msgx_broker_oldest_unsettled_seconds.
func WithStallThreshold(d time.Duration) Option { return func(o *options) { o.stallThreshold = d } }

// WithDeadLetterSuffix sets the suffix of the default dead-letter topic (default ".dlq").
func WithDeadLetterSuffix(s string) Option { return func(o *options) { o.dlqSuffix = s } }

// New wraps an adapter. name labels logs and metrics (e.g. "kafka").
func New(name string, drv driver.Broker, opts ...Option) *Broker {
	o := options{
		logger:        slog.Default(),
		clock:         clock.Real{},
		retry:         backoff.Policy{MaxAttempts: 5, Initial: time.Second, Max: time.Minute, Jitter: 0.2},
		settleTimeout: 30 * time.Second,
		settleRetry:   backoff.Policy{MaxAttempts: 3, Initial: 200 * time.Millisecond, Max: 2 * time.Second},
		closeTimeout:  5 * time.Second,
		dlqSuffix:     ".dlq",
		eventBuffer:   256,
		// Well beyond a settlement's retries (3 × 30 s at most) and a
		// handler's usual time, well before RabbitMQ's consumer timeout.
		stallThreshold: 5 * time.Minute,
	}
	for _, opt := range opts {
		opt(&o)
	}
	met, regErr := newMetrics(o.registerer, name, drv)
	b := &Broker{
		drv:       drv,
		name:      name,
		opts:      o,
		met:       met,
		regErr:    regErr,
		listeners: map[*Listener]struct{}{},
		events:    make(chan Event, o.eventBuffer),
		startedCh: make(chan struct{}),
	}
	met.oldest.b = b
	return b
}

// Name is the adapter name given to New.
func (b *Broker) Name() string { return b.name }

// Started is closed once Start has succeeded: a consumer of a broker that
// the service keeps trying to start (its broker was unreachable) waits on it
// before it listens.
func (b *Broker) Started() <-chan struct{} { return b.startedCh }

// Start connects the adapter. A connection failure is returned, and Start
// may be called again after one.
func (b *Broker) Start(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.started {
		return errors.New("broker: already started")
	}
	if b.regErr != nil {
		return fmt.Errorf("broker %s: %w", b.name, b.regErr)
	}
	if err := b.drv.Start(ctx); err != nil {
		b.report(Event{Err: err})
		return fmt.Errorf("broker %s: start: %w", b.name, err)
	}
	b.caps = b.drv.Capabilities()
	b.started = true
	close(b.startedCh)
	b.opts.logger.Info("broker started", "adapter", b.name, "capabilities", fmt.Sprintf("%+v", b.caps))
	if errs := b.drv.Errors(); errs != nil {
		b.fwdDone = make(chan struct{})
		go b.forward(errs)
	}
	return nil
}

func (b *Broker) forward(errs <-chan error) {
	defer close(b.fwdDone)
	for err := range errs {
		b.report(Event{Err: fmt.Errorf("broker %s: %w", b.name, err)})
	}
}

// Capabilities returns what the adapter declared at Start.
func (b *Broker) Capabilities() Capabilities {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.caps
}

// Events is the lifecycle channel: asynchronous errors are reported here and
// logged, never swallowed. When nobody reads and the buffer is full the oldest
// undelivered events are dropped (and counted), so the port never blocks on it.
func (b *Broker) Events() <-chan Event { return b.events }

func (b *Broker) report(e Event) {
	if e.Time.IsZero() {
		e.Time = b.opts.clock.Now()
	}
	b.opts.logger.Error("broker error", "adapter", b.name, "topic", e.Topic, "group", e.Group, "err", e.Err)
	b.met.events.Inc()
	for {
		select {
		case b.events <- e:
			return
		default:
		}
		select {
		case <-b.events:
			b.met.eventsDropped.Inc()
		default:
		}
	}
}

// SendConfirmed publishes msgs to topic and returns nil only after the broker
// confirmed every one of them.
func (b *Broker) SendConfirmed(ctx context.Context, topic string, msgs ...*Message) error {
	return b.send(ctx, topic, 0, msgs)
}

// SendDelayed is SendConfirmed with delivery held back by delay: the message is
// stored by the broker now and handed to handlers no earlier than now+delay.
// Where the adapter has a native delay (driver.DelayedPublisher) the broker
// holds it; otherwise the listener parks it in its local scheduler.
func (b *Broker) SendDelayed(ctx context.Context, topic string, delay time.Duration, msgs ...*Message) error {
	return b.send(ctx, topic, delay, msgs)
}

func (b *Broker) send(ctx context.Context, topic string, delay time.Duration, msgs []*Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if !b.running() {
		return ErrNotStarted
	}
	wire := make([]*driver.Message, len(msgs))
	var notBefore string
	if delay > 0 {
		notBefore = notBeforeHeader(b.opts.clock.Now().Add(delay))
	}
	mirror := !b.caps.NativeKey
	for i, m := range msgs {
		w := (*driver.Message)(m)
		mirrorKey := mirror && m.Key != "" && m.Headers[HeaderPartitionKey] == ""
		if mirrorKey || notBefore != "" || hasControlHeaders(m.Headers) {
			// Copy so the caller's message is left as it was. The sender's
			// control headers are dropped: a forwarded delivery must not
			// steer its copy (another group would drop it as not its own).
			h := make(map[string]string, len(m.Headers)+2)
			for k, v := range m.Headers {
				h[k] = v
			}
			for _, name := range driver.ControlHeaders {
				delete(h, name)
			}
			if mirrorKey {
				h[HeaderPartitionKey] = m.Key
			}
			if notBefore != "" {
				h[HeaderNotBefore] = notBefore
			}
			w = &driver.Message{Key: m.Key, Payload: m.Payload, Headers: h}
		}
		wire[i] = w
	}
	var err error
	if dp, ok := b.drv.(driver.DelayedPublisher); ok && delay > 0 {
		// The broker holds it back; the not-before header stays as the guard
		// for subscriptions that deliver it early.
		err = dp.PublishDelayed(ctx, topic, wire, delay)
	} else {
		err = b.drv.Publish(ctx, topic, wire)
	}
	if err != nil {
		b.met.publishErrors.WithLabelValues(topic).Inc()
		return fmt.Errorf("broker %s: publish to %q: %w", b.name, topic, err)
	}
	b.met.published.WithLabelValues(topic).Add(float64(len(msgs)))
	return nil
}

// Ping checks that the broker answers now, with the adapter's own cheap
// round trip (driver.Pinger), bounded by ctx. It returns an error wrapping
// ErrUnsupported when the adapter has none, and ErrNotStarted before Start
// or after Stop.
func (b *Broker) Ping(ctx context.Context) error {
	if !b.running() {
		return ErrNotStarted
	}
	p, ok := b.drv.(driver.Pinger)
	if !ok {
		return fmt.Errorf("broker %s: ping: %w", b.name, ErrUnsupported)
	}
	if err := p.Ping(ctx); err != nil {
		return fmt.Errorf("broker %s: ping: %w", b.name, err)
	}
	return nil
}

func (b *Broker) running() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.started && !b.stopped
}

// Stop stops every listener (each waits for its in-flight handlers until ctx
// ends, then cancels them without settlement) and closes the adapter. Every
// step is bounded by ctx, or by the close timeout once ctx has ended.
func (b *Broker) Stop(ctx context.Context) error {
	b.mu.Lock()
	if !b.started || b.stopped {
		b.mu.Unlock()
		return nil
	}
	b.stopped = true
	ls := make([]*Listener, 0, len(b.listeners))
	for l := range b.listeners {
		ls = append(ls, l)
	}
	b.mu.Unlock()

	var errs []error
	var wg sync.WaitGroup
	var emu sync.Mutex
	for _, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := l.Stop(ctx); err != nil {
				emu.Lock()
				errs = append(errs, err)
				emu.Unlock()
			}
		}()
	}
	wg.Wait()
	closeErr := boundedClose(ctx, b.opts.closeTimeout, b.drv.Close)
	if closeErr != nil {
		errs = append(errs, fmt.Errorf("broker %s: close: %w", b.name, closeErr))
	}
	// The adapter closes its error channel as its Close ends, so there is
	// nothing to wait for while that Close is still going on.
	if b.fwdDone != nil && !errors.Is(closeErr, errStillClosing) {
		t := b.opts.clock.NewTimer(b.opts.closeTimeout)
		select {
		case <-b.fwdDone:
		case <-t.C():
			errs = append(errs, fmt.Errorf("broker %s: error channel not closed within %v", b.name, b.opts.closeTimeout))
		}
		t.Stop()
	}
	return errors.Join(errs...)
}

func (b *Broker) forget(l *Listener) {
	b.mu.Lock()
	delete(b.listeners, l)
	b.mu.Unlock()
}
