// Package rabbitmq is the RabbitMQ adapter of the broker port, built on
// github.com/rabbitmq/amqp091-go.
//
// Topology is the adapter's: a topic is a durable fanout exchange; a group is
// a durable queue bound to it, named QueueName(topic, group), so every group
// receives every message and the consumers of one group share its queue. Each
// group queue names the exchange of its dead-letter topic as its
// x-dead-letter-exchange, so messages the broker itself rejects or expires are
// dead-lettered too. Messages are persistent.
//
// Publish uses publisher confirms with the mandatory flag: it returns nil only
// when every message was acked and none was returned as unroutable. Publishing
// channels come from a small pool, each used by one Publish at a time, so a
// return is always attributed to the call that caused it.
//
// Consumption is manual-ack with basic.qos set to the subscription's prefetch.
// A requeue is a confirmed publish of the port's updated message straight to
// the group's queue followed by an ack of the original; a dead letter is a
// confirmed, mandatory publish to the dead-letter exchange followed by an ack.
//
// amqp091 does not reconnect on its own: the driver watches both of its
// connections (one publishing, one consuming, so that broker flow control on
// publishers never stalls acks), reports every loss on Errors(), reconnects
// with bounded backoff and lets each subscription re-declare its topology and
// resume consuming. Deliveries received on a channel that died can no longer
// be settled (their Ack, Requeue and DeadLetter fail); the broker redelivers
// them.
package rabbitmq

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/msgx/msgx/backoff"
	"github.com/msgx/msgx/broker/driver"
)

// DefaultURL is the broker address used when WithURL is not given.
const DefaultURL = "amqp://guest:guest@127.0.0.1:5672/"

// HeaderKey carries the message key on the wire when it differs from the
// partition-key header (which normally mirrors it). The driver removes it on
// receive, so handlers see exactly the headers that were sent.
const HeaderKey = "msgx-key"

var (
	// ErrClosed is returned by operations on a closed driver.
	ErrClosed = errors.New("rabbitmq: driver closed")
	// ErrNotStarted is returned by Subscribe before Start succeeded.
	ErrNotStarted = fmt.Errorf("rabbitmq: driver %w", driver.ErrNotStarted)
	// ErrReturned is returned by Publish when the broker returned a message as
	// unroutable (no queue is bound to the exchange, or the queue is gone).
	ErrReturned = errors.New("rabbitmq: message returned unroutable")
	// ErrNacked is returned by Publish when the broker nacked a message.
	ErrNacked = errors.New("rabbitmq: message nacked by broker")
	// ErrDeliveryChannelClosed is returned when settling a delivery whose
	// channel has closed: the broker redelivers it instead.
	ErrDeliveryChannelClosed = fmt.Errorf("rabbitmq: delivery channel closed: %w", driver.ErrNotHeld)
)

// Option configures a Driver.
type Option func(*options)

type options struct {
	url             string
	logger          *slog.Logger
	reconnect       backoff.Policy
	prefetch        int
	publishChannels int
	dialTimeout     time.Duration
	heartbeat       time.Duration
	closeTimeout    time.Duration
	tls             *tls.Config
	externalAuth    bool
	connName        string
	queueArgs       amqp.Table
	deadLetterQueue bool
	maxMessageBytes int
	registerer      prometheus.Registerer
}

// WithURL sets the AMQP URL (default DefaultURL). Credentials in the URL are
// never logged.
func WithURL(url string) Option { return func(o *options) { o.url = url } }

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithReconnectBackoff sets the delays between reconnect attempts (default
// 100 ms doubling to 10 s, 20% jitter). The driver keeps trying until Close;
// MaxAttempts is ignored.
func WithReconnectBackoff(p backoff.Policy) Option { return func(o *options) { o.reconnect = p } }

// WithPrefetch sets basic.qos for subscriptions that do not ask for a
// prefetch themselves (default 64). The port always asks for its listener's
// window, so this applies to subscriptions made on the driver directly.
func WithPrefetch(n int) Option { return func(o *options) { o.prefetch = n } }

// WithPublishChannels bounds the confirm-mode channels used by concurrent
// publishes, requeues and dead letters (default 8). Each Publish holds one
// channel for its duration; callers beyond the bound wait for a free one.
func WithPublishChannels(n int) Option { return func(o *options) { o.publishChannels = n } }

// WithDialTimeout bounds each TCP connect and AMQP handshake (default 10 s);
// the context given to Start bounds it too.
func WithDialTimeout(d time.Duration) Option { return func(o *options) { o.dialTimeout = d } }

// WithHeartbeat sets the AMQP heartbeat interval (default 10 s), which bounds
// how long a silently dead connection goes unnoticed.
func WithHeartbeat(d time.Duration) Option { return func(o *options) { o.heartbeat = d } }

// WithCloseTimeout bounds the connection close handshake at Close (default 5 s).
func WithCloseTimeout(d time.Duration) Option { return func(o *options) { o.closeTimeout = d } }

// WithTLS sets the TLS configuration for amqps URLs.
func WithTLS(c *tls.Config) Option { return func(o *options) { o.tls = c } }

// WithExternalAuth logs in with SASL EXTERNAL: the broker takes the user
// from the client certificate of the TLS connection (rabbitmq_auth_mechanism_ssl)
// instead of the URL's user and password.
func WithExternalAuth() Option { return func(o *options) { o.externalAuth = true } }

// WithConnectionName sets the name the connections show in the management UI
// (default "msgx"; " publish" or " consume" is appended).
func WithConnectionName(name string) Option { return func(o *options) { o.connName = name } }

// WithQueueArguments adds arguments to every group queue declaration, for
// example {"x-queue-type": "quorum"} or a length limit. The driver's own
// x-dead-letter-exchange and x-expires take precedence.
func WithQueueArguments(args amqp.Table) Option {
	return func(o *options) {
		o.queueArgs = make(amqp.Table, len(args))
		for k, v := range args {
			o.queueArgs[k] = v
		}
	}
}

// WithDeadLetterQueue controls whether subscribing also declares a durable
// queue named after the dead-letter topic and bound to its exchange (default
// true), so dead letters are kept even before any group consumes them.
// Without it a dead-letter publish fails as unroutable until some group of the
// dead-letter topic exists, and broker-side dead letters are dropped.
func WithDeadLetterQueue(enabled bool) Option {
	return func(o *options) { o.deadLetterQueue = enabled }
}

// DefaultMaxMessageBytes is RabbitMQ's default max_message_size (128 MiB).
const DefaultMaxMessageBytes = 128 << 20

// WithMaxMessageBytes sets the largest message body Publish sends (default
// DefaultMaxMessageBytes; 0 or less: no limit). A larger message is refused
// before the send as Rejected, naming its size and the limit. AMQP does not
// tell the client the broker's limit: set this to the broker's
// max_message_size when it is not the default. A body the broker refuses
// anyway closes the publishing channel with 406 PRECONDITION_FAILED, which is
// Rejected too.
func WithMaxMessageBytes(n int) Option { return func(o *options) { o.maxMessageBytes = n } }

// WithRegisterer registers the adapter's connection metrics (default: not
// registered).
func WithRegisterer(r prometheus.Registerer) Option { return func(o *options) { o.registerer = r } }

// QueueName is the queue of a group on a topic. The group may not contain
// "/", which keeps the name unambiguous.
func QueueName(topic, group string) string { return topic + "/" + group }

// Driver is the RabbitMQ adapter; it implements driver.Broker.
type Driver struct {
	opts options
	met  *metrics
	pub  *link // publishing connection
	con  *link // consuming connection
	pool *pool

	// ctx ends at Close; it bounds reconnect attempts. done is ctx.Done().
	ctx    context.Context
	cancel context.CancelFunc
	done   <-chan struct{}
	wg     sync.WaitGroup

	mu      sync.Mutex
	started bool
	closed  bool
	subs    map[*subscription]struct{}

	errs *driver.ErrorFeed
}

var _ driver.Broker = (*Driver)(nil)

// New returns an unstarted driver.
func New(opts ...Option) *Driver {
	o := options{
		url:             DefaultURL,
		logger:          slog.Default(),
		reconnect:       backoff.Policy{Initial: 100 * time.Millisecond, Max: 10 * time.Second, Jitter: 0.2},
		prefetch:        64,
		publishChannels: 8,
		dialTimeout:     10 * time.Second,
		heartbeat:       10 * time.Second,
		closeTimeout:    5 * time.Second,
		connName:        "msgx",
		deadLetterQueue: true,
		maxMessageBytes: DefaultMaxMessageBytes,
	}
	for _, opt := range opts {
		opt(&o)
	}
	o.prefetch = max(o.prefetch, 1)
	o.publishChannels = max(o.publishChannels, 1)
	ctx, cancel := context.WithCancel(context.Background())
	d := &Driver{
		opts:   o,
		met:    newMetrics(o.registerer),
		ctx:    ctx,
		cancel: cancel,
		done:   ctx.Done(),
		subs:   map[*subscription]struct{}{},
		errs: driver.NewErrorFeed(64, func(err error) {
			// Nobody drains the channel: never block the driver on it, but never
			// lose the error silently either.
			o.logger.Error("rabbitmq error (error channel full or closed)", "err", err)
		}),
	}
	d.pub = &link{d: d, role: "publish", up: make(chan struct{})}
	d.con = &link{d: d, role: "consume", up: make(chan struct{})}
	d.pool = newPool(d, o.publishChannels)
	return d
}

// Capabilities implements driver.Broker.
func (d *Driver) Capabilities() driver.Capabilities {
	return driver.Capabilities{
		Persistent:         true,
		Batch:              true,
		LoadBalance:        true,
		Broadcast:          true,
		SubscriptionExpiry: true,
		CountsRedeliveries: true,
	}
}

// Start implements driver.Broker: it opens both connections or returns why it
// could not.
func (d *Driver) Start(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return ErrClosed
	}
	if d.started {
		return errors.New("rabbitmq: already started")
	}
	if _, err := amqp.ParseURI(d.opts.url); err != nil {
		return fmt.Errorf("rabbitmq: bad URL: %w", err)
	}
	if err := d.pub.connect(ctx); err != nil {
		return err
	}
	if err := d.con.connect(ctx); err != nil {
		d.pub.close()
		return err
	}
	d.started = true
	d.opts.logger.Info("rabbitmq connected", "addr", d.addr())
	return nil
}

// Errors implements driver.Broker: connection losses, failed reconnects and
// flow-control blocks are reported here.
func (d *Driver) Errors() <-chan error { return d.errs.C() }

// DroppedErrors implements driver.DroppedErrorCounter: the errors that did
// not fit the Errors channel (each was logged instead).
func (d *Driver) DroppedErrors() uint64 { return d.errs.Dropped() }

func (d *Driver) report(err error) { d.errs.Report(err) }

// Close implements driver.Broker. Subscriptions close with their unsettled
// deliveries unacked, so the broker redelivers them.
func (d *Driver) Close(ctx context.Context) error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.cancel()
	subs := slices.Collect(maps.Keys(d.subs))
	d.mu.Unlock()

	errs := []error{driver.CloseAll(ctx, subs)}
	d.pool.drain()
	if err := d.pub.close(); err != nil {
		errs = append(errs, err)
	}
	if err := d.con.close(); err != nil {
		errs = append(errs, err)
	}
	d.wg.Wait()
	d.errs.Close()
	return errors.Join(errs...)
}

func (d *Driver) isClosed() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// addr is the broker address without credentials, for logs and errors.
func (d *Driver) addr() string {
	u, err := amqp.ParseURI(d.opts.url)
	if err != nil {
		return "(bad url)"
	}
	vhost := u.Vhost
	if vhost == "" {
		vhost = "/"
	}
	return fmt.Sprintf("%s://%s vhost %s", u.Scheme, net.JoinHostPort(u.Host, fmt.Sprint(u.Port)), vhost)
}

// dial opens one AMQP connection, bounded by ctx and the dial timeout.
// sasl is the login mechanism: nil (the URL's user and password, PLAIN)
// unless WithExternalAuth.
func (d *Driver) sasl() []amqp.Authentication {
	if !d.opts.externalAuth {
		return nil
	}
	return []amqp.Authentication{&amqp.ExternalAuth{}}
}

func (d *Driver) dial(ctx context.Context, role string) (*amqp.Connection, error) {
	deadline := time.Now().Add(d.opts.dialTimeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(d.opts.connName + " " + role)
	var stop func() bool
	var raw net.Conn
	cfg := amqp.Config{
		Heartbeat:       d.opts.heartbeat,
		TLSClientConfig: d.opts.tls,
		Properties:      props,
		SASL:            d.sasl(),
		Dial: func(network, addr string) (net.Conn, error) {
			dctx, cancel := context.WithDeadline(ctx, deadline)
			defer cancel()
			c, err := (&net.Dialer{}).DialContext(dctx, network, addr)
			if err != nil {
				return nil, err
			}
			// The handshake must not outlive the deadline either; amqp091
			// clears it once the connection is open.
			if err := c.SetDeadline(deadline); err != nil {
				_ = c.Close()
				return nil, err
			}
			// A cancelled ctx ends the handshake at once.
			stop = context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
			raw = c
			return c, nil
		},
	}
	conn, err := amqp.DialConfig(d.opts.url, cfg)
	if stop != nil && !stop() && err == nil {
		// ctx ended just as the handshake finished: the socket's deadline
		// is already in the past, so the connection is unusable.
		_ = conn.Close()
		err = ctx.Err()
	}
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: connect %s (%s): %w", d.addr(), role, err)
	}
	// amqp091 clears the socket's deadlines when the handshake ends and
	// arms its heartbeat read deadline (three half-intervals) only when the
	// next frame arrives: a connection that goes silent before that would
	// never be found dead. Arm it now; every frame read re-arms it.
	if hb := conn.Config.Heartbeat; hb > 0 && raw != nil {
		_ = raw.SetReadDeadline(time.Now().Add(3 * hb / 2))
	}
	return conn, nil
}

// Publish implements driver.Broker: msgs go to the topic's exchange with
// confirms and the mandatory flag.
func (d *Driver) Publish(ctx context.Context, topic string, msgs []*driver.Message) error {
	if topic == "" {
		return errors.New("rabbitmq: publish: empty topic")
	}
	return d.publish(ctx, topic, "", msgs)
}

// Subscribe implements driver.Broker: it declares the topology and starts a
// consumer on the group's queue.
func (d *Driver) Subscribe(ctx context.Context, spec driver.SubscriptionSpec) (driver.Subscription, error) {
	if spec.Topic == "" || spec.Group == "" {
		return nil, errors.New("rabbitmq: subscription needs a topic and a group")
	}
	if strings.Contains(spec.Group, "/") {
		return nil, fmt.Errorf("rabbitmq: group %q may not contain \"/\"", spec.Group)
	}
	if err := checkSpec(spec); err != nil {
		return nil, err
	}
	if spec.Prefetch <= 0 {
		spec.Prefetch = d.opts.prefetch
	}
	s := &subscription{d: d, spec: spec, queue: QueueName(spec.Topic, spec.Group), done: make(chan struct{})}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, ErrClosed
	}
	if !d.started {
		d.mu.Unlock()
		return nil, ErrNotStarted
	}
	d.subs[s] = struct{}{}
	d.mu.Unlock()
	c, err := s.open(ctx)
	if err != nil {
		d.forget(s)
		return nil, err
	}
	s.mu.Lock()
	if s.closed { // the driver closed meanwhile
		s.mu.Unlock()
		_ = d.closeChannel(c.conn, c.ch)
		return nil, ErrClosed
	}
	s.cur = c
	s.mu.Unlock()
	return s, nil
}

// checkSpec refuses names AMQP cannot carry before they reach the wire.
func checkSpec(spec driver.SubscriptionSpec) error {
	if err := checkName("topic", spec.Topic); err != nil {
		return err
	}
	if err := checkName("dead-letter topic", spec.DeadLetterTopic); err != nil {
		return err
	}
	return checkName("queue", QueueName(spec.Topic, spec.Group))
}

func (d *Driver) forget(s *subscription) {
	d.mu.Lock()
	delete(d.subs, s)
	d.mu.Unlock()
}

// DeclareSubscription creates the topology of spec (exchange, dead-letter
// exchange and queue, group queue and binding) without consuming, so that
// publishes are routable before any consumer runs.
func (d *Driver) DeclareSubscription(ctx context.Context, spec driver.SubscriptionSpec) error {
	if spec.Topic == "" || spec.Group == "" || strings.Contains(spec.Group, "/") {
		return fmt.Errorf("rabbitmq: bad subscription %q/%q", spec.Topic, spec.Group)
	}
	if err := checkSpec(spec); err != nil {
		return err
	}
	conn, err := d.con.current(ctx)
	if err != nil {
		return err
	}
	return d.declare(conn, spec, QueueName(spec.Topic, spec.Group))
}

// Ping implements driver.Pinger: on the publishing and the consuming
// connection, a channel is opened and closed again (a round trip to the
// broker), bounded by ctx. While a connection is down and being redialled it
// fails.
func (d *Driver) Ping(ctx context.Context) error {
	d.mu.Lock()
	started, closed := d.started, d.closed
	d.mu.Unlock()
	switch {
	case closed:
		return ErrClosed
	case !started:
		return ErrNotStarted
	}
	for _, l := range []*link{d.pub, d.con} {
		if err := l.ping(ctx); err != nil {
			return err
		}
	}
	return nil
}

var _ driver.Pinger = (*Driver)(nil)
