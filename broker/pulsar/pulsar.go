// Package pulsar is the Apache Pulsar adapter of the broker port, built on
// pulsar-client-go.
//
// Topology: a port topic is a persistent, non-partitioned Pulsar topic
// (persistent://<tenant>/<namespace>/<topic>); a group is a durable
// subscription. Consumers of one subscription share its messages (Shared by
// default, Key_Shared or Failover as options); distinct subscriptions each get
// every message. Publishing is confirmed: every message of a call is sent
// asynchronously and the call returns after the broker's receipt for all of
// them. Producer batching is disabled so that each message is its own entry and
// can be acknowledged or redelivered on its own.
//
// Settlement is native: ACK is an acknowledgement by message id; REQUEUE is a negative acknowledgement whose
// redelivery delay is the one the port asks for, and the broker's redelivery
// count is reported in the msgx-redelivery-count header; DEAD_LETTER is a
// confirmed publish to the dead-letter topic followed by an acknowledgement.
// Messages not settled when a consumer closes or its connection drops are
// redelivered by the broker.
package pulsar

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsar/backoff"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgx/msgx/broker/driver"
)

// SubscriptionType is how the consumers of one group share its messages.
type SubscriptionType int

const (
	// Shared hands messages round-robin to every consumer of the group.
	Shared SubscriptionType = iota
	// KeyShared hands all messages of one key to the same consumer, in order;
	// the adapter then declares PerKeyOrder.
	KeyShared
	// Failover hands every message to one active consumer; the others stand by.
	// The adapter then declares PerKeyOrder and not LoadBalance.
	Failover
)

func (t SubscriptionType) native() pulsar.SubscriptionType {
	switch t {
	case KeyShared:
		return pulsar.KeyShared
	case Failover:
		return pulsar.Failover
	}
	return pulsar.Shared
}

// ErrClosed is returned by operations on a closed driver.
var ErrClosed = errors.New("pulsar: driver closed")

// probeTopic is the topic whose partition metadata Start and the health
// monitor ask for: a lookup that needs a working broker and creates nothing.
const probeTopic = "msgx-probe"

type options struct {
	subType           SubscriptionType
	namespace         string
	initial           pulsar.SubscriptionInitialPosition
	operationTimeout  time.Duration
	connectionTimeout time.Duration
	nackDelay         time.Duration
	sendTimeout       time.Duration
	ackResponse       bool
	healthInterval    time.Duration
	logger            *slog.Logger
	registerer        prometheus.Registerer
	client            func(*pulsar.ClientOptions)
	maxMessageBytes   int
}

// Option configures a Driver.
type Option func(*options)

// WithSubscriptionType sets how consumers of a group share messages (default Shared).
func WithSubscriptionType(t SubscriptionType) Option { return func(o *options) { o.subType = t } }

// WithNamespace sets the tenant/namespace of short topic names (default
// "public/default"). A topic given with a scheme (persistent://...) is used as is.
func WithNamespace(ns string) Option { return func(o *options) { o.namespace = ns } }

// WithInitialPosition sets where a new subscription starts (default Earliest:
// a group that subscribes for the first time receives what the topic retains).
func WithInitialPosition(p pulsar.SubscriptionInitialPosition) Option {
	return func(o *options) { o.initial = p }
}

// WithOperationTimeout bounds lookups, producer and consumer creation and
// acknowledgements with response (default 30 s).
func WithOperationTimeout(d time.Duration) Option { return func(o *options) { o.operationTimeout = d } }

// WithConnectionTimeout bounds establishing a TCP connection (default 10 s).
func WithConnectionTimeout(d time.Duration) Option {
	return func(o *options) { o.connectionTimeout = d }
}

// WithSendTimeout bounds how long a sent message may wait for the broker's
// receipt (default 30 s). A publish that fails or is not confirmed in time
// replaces its topic's producer, so it also bounds how long publishing on a
// connection lost while idle takes to recover when the caller's context allows
// more.
func WithSendTimeout(d time.Duration) Option { return func(o *options) { o.sendTimeout = d } }

// WithNackDelay sets the shortest redelivery delay of a requeued message and the
// resolution of the client's negative-acknowledgement timer (default 100 ms).
func WithNackDelay(d time.Duration) Option { return func(o *options) { o.nackDelay = d } }

// WithAckResponse makes each acknowledgement wait for the broker's response, so
// that a failed acknowledgement is reported (default false: acknowledgements
// are grouped and sent within 100 ms, and flushed when a consumer closes; one
// lost with a connection means a redelivery). The client sends acknowledgements
// with response one at a time per consumer, which bounds consumption to one
// message per round trip.
func WithAckResponse(on bool) Option { return func(o *options) { o.ackResponse = on } }

// WithHealthInterval sets how often the driver checks that the broker answers,
// reporting a lost broker on Errors (default 5 s; 0 disables the check).
func WithHealthInterval(d time.Duration) Option { return func(o *options) { o.healthInterval = d } }

// DefaultMaxMessageBytes is Pulsar's default maxMessageSize (5 MiB).
const DefaultMaxMessageBytes = 5 << 20

// WithMaxMessageBytes sets the largest payload Publish sends (default
// DefaultMaxMessageBytes; 0 or less: no check by the adapter). A larger
// message is refused before the send as Rejected, naming its size and the
// limit. Set it to the broker's maxMessageSize when that is not the default.
// The client also refuses a payload over the limit the broker announces when
// the connection opens (the same 5 MiB when it announces none), as Rejected
// too but without the sizes.
func WithMaxMessageBytes(n int) Option { return func(o *options) { o.maxMessageBytes = n } }

// WithLogger sets the logger; the client library's own messages go to it at
// warning level and above (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithRegisterer registers the client library's metrics (default: a private
// registry, never the global one).
func WithRegisterer(r prometheus.Registerer) Option { return func(o *options) { o.registerer = r } }

// WithClientOptions adjusts the client options before the client is created,
// for TLS, authentication and the like.
func WithClientOptions(f func(*pulsar.ClientOptions)) Option {
	return func(o *options) { o.client = f }
}

// Driver is the Pulsar adapter; it implements driver.Broker.
type Driver struct {
	url  string
	opts options

	mu        sync.Mutex
	client    pulsar.Client
	started   bool
	closed    bool
	producers map[string]*producerSlot
	subs      map[*subscription]struct{}
	kept      map[string]bool // dead-letter topics with a keeping subscription
	retiring  sync.WaitGroup  // producers being closed after a failure

	errs        chan error
	stop        chan struct{}
	monitorDone chan struct{}
}

var (
	_ driver.Broker           = (*Driver)(nil)
	_ driver.DelayedPublisher = (*Driver)(nil)
)

// New returns an unstarted driver for the service URL (pulsar://host:6650).
func New(serviceURL string, opts ...Option) *Driver {
	o := options{
		namespace:         "public/default",
		initial:           pulsar.SubscriptionPositionEarliest,
		operationTimeout:  30 * time.Second,
		connectionTimeout: 10 * time.Second,
		nackDelay:         100 * time.Millisecond,
		sendTimeout:       30 * time.Second,
		healthInterval:    5 * time.Second,
		logger:            slog.Default(),
		maxMessageBytes:   DefaultMaxMessageBytes,
	}
	for _, opt := range opts {
		opt(&o)
	}
	o.nackDelay = max(o.nackDelay, 10*time.Millisecond)
	if o.registerer == nil {
		o.registerer = prometheus.NewRegistry()
	}
	return &Driver{
		url: serviceURL, opts: o,
		producers: map[string]*producerSlot{}, subs: map[*subscription]struct{}{}, kept: map[string]bool{},
		errs: make(chan error, 16), stop: make(chan struct{}),
	}
}

// Capabilities implements driver.Broker.
func (d *Driver) Capabilities() driver.Capabilities {
	return driver.Capabilities{
		Persistent:  true,
		PerKeyOrder: d.opts.subType == KeyShared || d.opts.subType == Failover,
		// Receive hands over every prefetched message up to the batch size.
		Batch:       true,
		LoadBalance: d.opts.subType != Failover,
		Broadcast:   true,
	}
}

// Start implements driver.Broker: it connects and checks that the broker
// answers a lookup, within ctx.
func (d *Driver) Start(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.started || d.closed {
		return errors.New("pulsar: driver already started")
	}
	if err := dialAny(ctx, d.url, d.opts.connectionTimeout); err != nil {
		return err
	}
	co := pulsar.ClientOptions{
		URL:               d.url,
		OperationTimeout:  d.opts.operationTimeout,
		ConnectionTimeout: d.opts.connectionTimeout,
		Logger:            ClientLogger(d.opts.logger),
		MetricsRegisterer: d.opts.registerer,
	}
	if d.opts.client != nil {
		d.opts.client(&co)
	}
	client, err := pulsar.NewClient(co)
	if err != nil {
		return fmt.Errorf("pulsar: client for %s: %w", d.url, err)
	}
	if err := probe(ctx, client, d.topic(probeTopic)); err != nil {
		client.Close()
		return fmt.Errorf("pulsar: broker at %s does not answer: %w", d.url, err)
	}
	d.client = client
	d.started = true
	if d.opts.healthInterval > 0 {
		d.monitorDone = make(chan struct{})
		go d.monitor(client)
	}
	return nil
}

// dialAny fails fast, with the network's own error, when no host of the
// service URL accepts a TCP connection; the client library would keep retrying
// until its operation timeout.
func dialAny(ctx context.Context, serviceURL string, timeout time.Duration) error {
	u, err := url.Parse(serviceURL)
	if err != nil {
		return fmt.Errorf("pulsar: service URL %q: %w", serviceURL, err)
	}
	var errs []error
	dialer := net.Dialer{Timeout: timeout}
	for _, host := range strings.Split(u.Host, ",") {
		c, err := dialer.DialContext(ctx, "tcp", host)
		if err == nil {
			_ = c.Close()
			return nil
		}
		errs = append(errs, err)
	}
	return fmt.Errorf("pulsar: broker at %s unreachable: %w", serviceURL, errors.Join(errs...))
}

// probe asks for a topic's partition metadata, which needs the connection
// handshake and a broker that serves lookups.
func probe(ctx context.Context, client pulsar.Client, topic string) error {
	res := make(chan error, 1)
	go func() {
		_, err := client.TopicPartitions(topic)
		res <- err
	}()
	select {
	case err := <-res:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// monitor reports on Errors when the broker stops answering, once per outage.
func (d *Driver) monitor(client pulsar.Client) {
	defer close(d.monitorDone)
	tick := time.NewTicker(d.opts.healthInterval)
	defer tick.Stop()
	healthy := true
	for {
		select {
		case <-tick.C:
		case <-d.stop:
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), d.opts.healthInterval)
		go func() {
			select {
			case <-d.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		err := probe(ctx, client, d.topic(probeTopic))
		cancel()
		select {
		case <-d.stop:
			return
		default:
		}
		if err != nil {
			// Producers do not reconnect by themselves (see createProducer).
			d.retireProducers()
		}
		switch {
		case err != nil && healthy:
			healthy = false
			select {
			case d.errs <- fmt.Errorf("pulsar: broker at %s not answering: %w", d.url, err):
			case <-d.stop:
				return
			}
		case err == nil && !healthy:
			healthy = true
			d.opts.logger.Info("pulsar: broker answers again", "url", d.url)
		}
	}
}

// Errors implements driver.Broker: lost connections to the broker.
func (d *Driver) Errors() <-chan error { return d.errs }

// topic maps a port topic to a fully qualified Pulsar topic name.
func (d *Driver) topic(name string) string {
	if strings.Contains(name, "://") {
		return name
	}
	return "persistent://" + d.opts.namespace + "/" + name
}

// producerSlot is a producer being created or ready; concurrent publishers to a
// new topic wait for one creation.
type producerSlot struct {
	ready chan struct{}
	p     pulsar.Producer
	err   error
}

func (d *Driver) producer(ctx context.Context, topic string) (pulsar.Producer, error) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, ErrClosed
	}
	if !d.started {
		d.mu.Unlock()
		return nil, fmt.Errorf("pulsar: driver %w", driver.ErrNotStarted)
	}
	slot := d.producers[topic]
	if slot == nil {
		slot = &producerSlot{ready: make(chan struct{})}
		d.producers[topic] = slot
		go d.createProducer(topic, slot)
	}
	d.mu.Unlock()
	select {
	case <-slot.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return slot.p, slot.err
}

func (d *Driver) createProducer(topic string, slot *producerSlot) {
	p, err := d.client.CreateProducer(pulsar.ProducerOptions{
		Topic: d.topic(topic),
		// One entry per message: each is acknowledged and redelivered alone.
		DisableBatching: true,
		SendTimeout:     d.opts.sendTimeout,
		// The client library's producer reconnects on a goroutine of its own
		// while its event loop keeps sending, racing on the producer's fields.
		// Instead, a producer whose connection is lost is retired and replaced
		// (after a failed or unconfirmed publish, or a failed health check).
		MaxReconnectToBroker: new(uint),
		// The client asks for a reconnection backoff each time the producer
		// loses its broker: when the broker closes it (CLOSE_PRODUCER, as a
		// topic unload does) or its connection ends. It is retired then,
		// not at its next publish; with reconnection off the policy itself
		// is never used.
		BackOffPolicyFunc: func() backoff.Policy {
			d.producerLost(topic, slot)
			return &backoff.DefaultBackoff{}
		},
	})
	d.mu.Lock()
	switch {
	case err != nil:
		// Forget the failure so that a later publish tries again.
		delete(d.producers, topic)
		slot.err = fmt.Errorf("pulsar: producer for %q: %w", topic, err)
	case d.closed:
		p.Close()
		slot.err = ErrClosed
	default:
		slot.p = p
	}
	d.mu.Unlock()
	close(slot.ready)
}

// producerLost retires the producer of slot once the client reports that
// the broker closed it or its connection ended.
func (d *Driver) producerLost(topic string, slot *producerSlot) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.producers[topic] != slot {
		return // retired already
	}
	select {
	case <-slot.ready:
	default:
		return // still being created: the creation reports its own failure
	}
	delete(d.producers, topic)
	if slot.p != nil {
		d.opts.logger.Info("pulsar: producer closed by the broker or its connection lost; the next publish creates a new one", "topic", topic)
		d.closeProducerLocked(slot.p)
	}
}

// Publish implements driver.Broker: it returns after the broker's receipt for
// every message.
//
// A producer that the broker closed (a topic unload) is retired as the client
// reports it, which fails its unconfirmed sends with ErrProducerClosed; those
// are sent once more on a new producer. As with any retry of a confirmed
// send, one whose receipt alone was lost is then stored twice.
func (d *Driver) Publish(ctx context.Context, topic string, msgs []*driver.Message) error {
	return d.publish(ctx, topic, msgs, 0)
}

// PublishDelayed implements driver.DelayedPublisher with Pulsar's delayed
// delivery (deliver-after): the broker keeps each message from Shared and
// Key_Shared subscriptions until it is due. A Failover subscription gets it
// at once (Pulsar ignores the delay there) and the port holds it instead.
func (d *Driver) PublishDelayed(ctx context.Context, topic string, msgs []*driver.Message, delay time.Duration) error {
	return d.publish(ctx, topic, msgs, delay)
}

func (d *Driver) publish(ctx context.Context, topic string, msgs []*driver.Message, delay time.Duration) error {
	if limit := d.opts.maxMessageBytes; limit > 0 {
		for _, m := range msgs {
			if len(m.Payload) > limit {
				return fmt.Errorf("pulsar: %w", driver.TooLarge(topic, len(m.Payload), limit))
			}
		}
	}
	return classify(d.send(ctx, topic, msgs, delay))
}

// send publishes msgs on the topic's producer, once more on a new producer
// if the broker closed the old one.
func (d *Driver) send(ctx context.Context, topic string, msgs []*driver.Message, delay time.Duration) error {
	for attempt := 1; ; attempt++ {
		p, err := d.producer(ctx, topic)
		if err != nil {
			return err
		}
		failed, err := sendAll(ctx, p, msgs, delay)
		if err == nil {
			return nil
		}
		d.retireProducer(topic, p)
		if attempt > 1 || len(failed) == 0 || !errors.Is(err, pulsar.ErrProducerClosed) || ctx.Err() != nil {
			return err
		}
		msgs = failed
	}
}

// retireProducer replaces a topic's producer: the next publish creates a new
// one, on a new connection if the old one is gone.
func (d *Driver) retireProducer(topic string, p pulsar.Producer) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if slot := d.producers[topic]; slot != nil && slot.p == p {
		delete(d.producers, topic)
		d.closeProducerLocked(p)
	}
}

// retireProducers replaces every producer.
func (d *Driver) retireProducers() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for topic, slot := range d.producers {
		select {
		case <-slot.ready:
			delete(d.producers, topic)
			if slot.p != nil {
				d.closeProducerLocked(slot.p)
			}
		default: // still being created: it is new
		}
	}
}

// closeProducerLocked closes p in the background; Close waits for it. Its
// unconfirmed messages fail, so their publishers see an error.
func (d *Driver) closeProducerLocked(p pulsar.Producer) {
	d.retiring.Add(1)
	go func() {
		defer d.retiring.Done()
		p.Close()
	}()
}

// sendAll sends msgs and waits for every receipt; it returns the messages
// that failed (not those unconfirmed when ctx ended) with the error.
func sendAll(ctx context.Context, p pulsar.Producer, msgs []*driver.Message, delay time.Duration) ([]*driver.Message, error) {
	type result struct {
		m   *driver.Message
		err error
	}
	results := make(chan result, len(msgs))
	for _, m := range msgs {
		pm := producerMessage(m)
		pm.DeliverAfter = delay
		p.SendAsync(ctx, pm, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			results <- result{m, err}
		})
	}
	var failed []*driver.Message
	var first error
	for range msgs {
		select {
		case r := <-results:
			if r.err != nil {
				failed = append(failed, r.m)
				if first == nil {
					first = r.err
				}
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("pulsar: send not confirmed: %w", ctx.Err())
		}
	}
	if len(failed) > 0 {
		return failed, fmt.Errorf("pulsar: send failed for %d of %d messages: %w", len(failed), len(msgs), first)
	}
	return nil, nil
}

func producerMessage(m *driver.Message) *pulsar.ProducerMessage {
	payload := m.Payload
	if payload == nil {
		payload = []byte{}
	}
	return &pulsar.ProducerMessage{Key: m.Key, Payload: payload, Properties: m.Headers}
}

// Close implements driver.Broker. Unsettled deliveries are redelivered by the
// broker once the consumers are gone.
func (d *Driver) Close(ctx context.Context) error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	subs := slices.Collect(maps.Keys(d.subs))
	var producers []pulsar.Producer
	for _, slot := range d.producers {
		select {
		case <-slot.ready:
			if slot.p != nil {
				producers = append(producers, slot.p)
			}
		default: // createProducer closes it when it arrives
		}
	}
	clear(d.producers)
	client, started := d.client, d.started
	d.mu.Unlock()

	close(d.stop)
	err := driver.CloseAll(ctx, subs)
	for _, p := range producers {
		p.Close()
	}
	d.retiring.Wait()
	if d.monitorDone != nil {
		<-d.monitorDone
	}
	if started {
		client.Close()
	}
	close(d.errs)
	return err
}

// ClientLogger is the pulsar-client-go logger the adapter gives its client:
// l, at warn level and above.
func ClientLogger(l *slog.Logger) plog.Logger {
	return plog.NewLoggerWithSlog(slog.New(minLevel{h: l.Handler(), min: slog.LevelWarn}))
}

// minLevel passes on records at or above min: the client library logs every
// connection and consumer event at info level.
type minLevel struct {
	h   slog.Handler
	min slog.Level
}

func (m minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= m.min && m.h.Enabled(ctx, l)
}
func (m minLevel) Handle(ctx context.Context, r slog.Record) error { return m.h.Handle(ctx, r) }
func (m minLevel) WithAttrs(as []slog.Attr) slog.Handler {
	return minLevel{h: m.h.WithAttrs(as), min: m.min}
}
func (m minLevel) WithGroup(name string) slog.Handler {
	return minLevel{h: m.h.WithGroup(name), min: m.min}
}
