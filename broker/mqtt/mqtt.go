// Package mqtt is the MQTT 5 adapter of the broker port, built on
// github.com/eclipse/paho.golang (autopaho manages the connections).
//
// Every message travels at QoS 1: Publish returns once the broker's PUBACK
// with a success reason code arrived for each message. Headers and the key
// are MQTT 5 user properties; the payload is carried unchanged. A consumer
// group is a shared subscription $share/<group>/<topic>, so the members of a
// group share the messages and distinct groups each receive all of them.
//
// Each subscription has its own connection with a persistent session
// (CleanStart false and a session expiry) and acknowledges manually: the
// PUBACK is sent only once the port settled the delivery and the settlement's
// action succeeded. Unacknowledged and queued messages stay in the session
// for its client id, so a consumer that restarts must come back under the same
// client id; see Slots and WithInstanceID for how ids are chosen.
//
// MQTT has no batches, delays, dead-letter queues or subscription expiry: the
// adapter declares none of them, and the port's local scheduler and
// dead-letter topic stand in. A requeue is a confirmed re-publish to the
// group's own retry topic (T/msgx-retry/G, which the group's session also
// subscribes to) followed by the PUBACK of the original.
package mqtt

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"
	"github.com/eclipse/paho.golang/paho/session"
	"github.com/eclipse/paho.golang/paho/session/state"

	"github.com/msgx/msgx/backoff"
	"github.com/msgx/msgx/broker/driver"
)

// Errors the adapter returns (wrapped).
var (
	// ErrRefused: the broker answered a PUBLISH with a failure reason code.
	ErrRefused = errors.New("mqtt: publish refused by the broker")
	// ErrConnectionLost: the connection was down or dropped before the broker
	// confirmed, or before an acknowledgement could be sent.
	ErrConnectionLost = errors.New("mqtt: connection lost")
	// ErrClosed: the driver is closed.
	ErrClosed = errors.New("mqtt: driver closed")
	// ErrTakenOver: another connection with the same client id took over a
	// subscription's session (two consumers share an instance id).
	ErrTakenOver = errors.New("mqtt: session taken over by another client with the same client id")
)

// reasonSessionTakenOver is the DISCONNECT reason code the broker sends to a
// connection whose client id was taken by a newer connection.
const reasonSessionTakenOver = 0x8e

type options struct {
	instance         string
	slots            *Slots
	sessionExpiry    time.Duration
	deadLetterExpiry time.Duration
	connectTimeout   time.Duration
	reconnect        backoff.Policy
	keepAlive        time.Duration
	packetTimeout    time.Duration
	publishWindow    int
	username         string
	password         []byte
	tls              *tls.Config
	logger           *slog.Logger
	errorBuffer      int
	maxPacketSize    int
	// wrapConn, set only by tests, wraps every connection (dialled over
	// plain TCP) before paho uses it.
	wrapConn func(net.Conn) net.Conn
}

// Option configures a Driver.
type Option func(*options)

// WithInstanceID sets the stable identity of this consumer instance (default:
// the host name). Subscription client ids derive from it, so an instance that
// restarts under the same id takes its sessions back with their unacknowledged
// and queued messages. Two processes must never share an instance id.
func WithInstanceID(id string) Option { return func(o *options) { o.instance = id } }

// WithSlots shares a slot registry between drivers of one process (see Slots).
func WithSlots(s *Slots) Option { return func(o *options) { o.slots = s } }

// WithSessionExpiry sets how long the broker keeps a subscription's session,
// with its unacknowledged and queued messages, after its connection closed
// (default 1 hour). A consumer that does not return within it loses them.
func WithSessionExpiry(d time.Duration) Option { return func(o *options) { o.sessionExpiry = d } }

// WithDeadLetterExpiry sets how long the broker keeps the session that
// collects a dead-letter topic's messages after it was last connected
// (default 30 days; see DeadLetterGroup).
func WithDeadLetterExpiry(d time.Duration) Option { return func(o *options) { o.deadLetterExpiry = d } }

// WithConnectTimeout bounds the wait for the first connection in Start and
// Subscribe, and each connection attempt (default 10 s).
func WithConnectTimeout(d time.Duration) Option { return func(o *options) { o.connectTimeout = d } }

// WithReconnectBackoff sets the delays between reconnection attempts (default
// 100 ms doubling to 5 s, 20% jitter).
func WithReconnectBackoff(initial, max time.Duration) Option {
	return func(o *options) { o.reconnect = backoff.Policy{Initial: initial, Max: max, Jitter: 0.2} }
}

// WithKeepAlive sets the MQTT keep-alive (default 30 s).
func WithKeepAlive(d time.Duration) Option { return func(o *options) { o.keepAlive = d } }

// WithPacketTimeout bounds the wait for one PUBACK or SUBACK (default 10 s).
func WithPacketTimeout(d time.Duration) Option { return func(o *options) { o.packetTimeout = d } }

// WithPublishWindow bounds the publishes of one batch in flight at once
// (default 64; the broker's Receive Maximum bounds it too).
func WithPublishWindow(n int) Option { return func(o *options) { o.publishWindow = n } }

// WithCredentials sets the CONNECT user name and password.
func WithCredentials(user string, password []byte) Option {
	return func(o *options) { o.username, o.password = user, password }
}

// WithTLS sets the TLS configuration used for mqtts:// servers.
func WithTLS(c *tls.Config) Option { return func(o *options) { o.tls = c } }

// WithMaxPacketSize bounds the PUBLISH packets Publish sends, in bytes
// (default 0: only the broker's bound). A message whose packet (payload,
// topic and user properties) is larger is refused before the send as
// Rejected, naming its size and the limit. The broker's Maximum Packet Size
// from CONNACK applies as well when it announces one; Mosquitto announces its
// max_packet_size but not its message_size_limit, which a broker enforces by
// answering PUBACK 0x95 (packet too large), Rejected too.
func WithMaxPacketSize(n int) Option { return func(o *options) { o.maxPacketSize = n } }

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// Driver is one MQTT 5 client instance; it implements driver.Broker.
type Driver struct {
	server *url.URL
	opts   options

	mu      sync.Mutex
	started bool
	closed  bool
	ctx     context.Context // lifetime of every connection of the driver
	cancel  context.CancelFunc
	pub     *autopaho.ConnectionManager
	pubSess *pubSession
	subs    map[*subscription]struct{}
	kept    map[string]bool // dead-letter topics with a keeping session

	errs *driver.ErrorFeed
}

// New returns an unstarted driver for the broker at server ("host:port",
// "mqtt://host:port" or "mqtts://host:port").
func New(server string, opts ...Option) (*Driver, error) {
	if !strings.Contains(server, "://") {
		server = "mqtt://" + server
	}
	u, err := url.Parse(server)
	if err != nil {
		return nil, fmt.Errorf("mqtt: server %q: %w", server, err)
	}
	o := options{
		sessionExpiry:    time.Hour,
		deadLetterExpiry: 30 * 24 * time.Hour,
		connectTimeout:   10 * time.Second,
		reconnect:        backoff.Policy{Initial: 100 * time.Millisecond, Max: 5 * time.Second, Jitter: 0.2},
		keepAlive:        30 * time.Second,
		packetTimeout:    10 * time.Second,
		publishWindow:    64,
		logger:           slog.Default(),
		errorBuffer:      64,
	}
	for _, opt := range opts {
		opt(&o)
	}
	if o.instance == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("mqtt: no instance id given and no host name: %w", err)
		}
		o.instance = h
	}
	if !mqttString(o.instance) {
		return nil, fmt.Errorf("mqtt: instance id %q is not a valid MQTT string", o.instance)
	}
	if o.slots == nil {
		o.slots = NewSlots()
	}
	o.publishWindow = max(o.publishWindow, 1)
	ctx, cancel := context.WithCancel(context.Background())
	return &Driver{
		server: u, opts: o, ctx: ctx, cancel: cancel,
		subs: map[*subscription]struct{}{},
		kept: map[string]bool{},
		errs: driver.NewErrorFeed(o.errorBuffer, nil),
	}, nil
}

// Capabilities implements driver.Broker. What MQTT 5 with shared subscriptions
// offers: persistent sessions keep messages for absent members, groups share,
// distinct groups each receive everything. A group's members split a key's
// messages between them, so there is no per-key order; there are no native
// batches, delays, dead letters or subscription expiry.
func (d *Driver) Capabilities() driver.Capabilities {
	return driver.Capabilities{Persistent: true, LoadBalance: true, Broadcast: true, CountsRedeliveries: true}
}

// Errors implements driver.Broker: lost connections and failed reconnection
// attempts of the publisher and of every subscription.
func (d *Driver) Errors() <-chan error { return d.errs.C() }

// DroppedErrors implements driver.DroppedErrorCounter: the errors that did
// not fit the Errors channel (each was logged instead).
func (d *Driver) DroppedErrors() uint64 { return d.errs.Dropped() }

func (d *Driver) report(err error) {
	d.opts.logger.Warn("mqtt", "err", err)
	d.errs.Report(err)
}

// clientConfig is the part of every connection's configuration that is the same.
func (d *Driver) clientConfig(clientID string) autopaho.ClientConfig {
	cfg := autopaho.ClientConfig{
		ServerUrls:       []*url.URL{d.server},
		TlsCfg:           d.opts.tls,
		KeepAlive:        uint16(min(d.opts.keepAlive/time.Second, 65535)),
		ConnectTimeout:   d.opts.connectTimeout,
		ConnectUsername:  d.opts.username,
		ConnectPassword:  d.opts.password,
		ReconnectBackoff: d.opts.reconnect.Delay,
		ClientConfig:     paho.ClientConfig{ClientID: clientID, PacketTimeout: d.opts.packetTimeout},
	}
	if wrap := d.opts.wrapConn; wrap != nil {
		cfg.AttemptConnection = func(ctx context.Context, _ autopaho.ClientConfig, u *url.URL) (net.Conn, error) {
			var dialer net.Dialer
			c, err := dialer.DialContext(ctx, "tcp", u.Host)
			if err != nil {
				return nil, err
			}
			return wrap(c), nil
		}
	}
	return cfg
}

// Start implements driver.Broker: it connects the publisher and waits, within
// ctx and the connect timeout, for the first connection.
func (d *Driver) Start(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.closed:
		return ErrClosed
	case d.started:
		return errors.New("mqtt: already started")
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	clientID := d.opts.instance + "-pub-" + hex.EncodeToString(rnd[:])
	sess := newPubSession()
	var lastErr atomic.Value
	cfg := d.clientConfig(clientID)
	// A publisher needs no session: an unconfirmed publish returns an error and
	// the caller decides.
	cfg.CleanStartOnInitialConnection = true
	cfg.SessionExpiryInterval = 0
	cfg.Session = sess
	cfg.OnConnectError = func(err error) {
		lastErr.Store(err)
		d.report(fmt.Errorf("publisher %s: connect: %w", clientID, err))
	}
	cfg.OnClientError = func(err error) {
		if d.ctx.Err() == nil {
			d.report(fmt.Errorf("publisher %s: connection lost: %w", clientID, err))
		}
	}
	cfg.OnServerDisconnect = func(dc *paho.Disconnect) {
		d.report(fmt.Errorf("publisher %s: disconnected by the broker: reason 0x%02x", clientID, dc.ReasonCode))
	}
	cm, err := autopaho.NewConnection(d.ctx, cfg)
	if err != nil {
		return fmt.Errorf("mqtt: %w", err)
	}
	wait, cancel := context.WithTimeout(ctx, d.opts.connectTimeout)
	defer cancel()
	if err := cm.AwaitConnection(wait); err != nil {
		_ = cm.Disconnect(context.WithoutCancel(ctx))
		if le, ok := lastErr.Load().(error); ok {
			err = le
		}
		return fmt.Errorf("mqtt: connect to %s: %w", d.server.Redacted(), err)
	}
	d.pub, d.pubSess, d.started = cm, sess, true
	return nil
}

// Publish implements driver.Broker: the batch is published concurrently (up to
// the publish window) and Publish returns once every message has its PUBACK
// with a success reason code. A failure reason code, a lost connection or the
// end of ctx makes it return an error; some messages may then have been
// delivered.
func (d *Driver) Publish(ctx context.Context, topic string, msgs []*driver.Message) error {
	return d.publish(ctx, topic, msgs, false)
}

// publish is Publish; with stored it also fails a message the broker
// accepted but dropped because nobody subscribes (reason code 0x10): what the
// port re-publishes or dead-letters must be kept.
func (d *Driver) publish(ctx context.Context, topic string, msgs []*driver.Message, stored bool) error {
	return classify(d.publishUnclassified(ctx, topic, msgs, stored))
}

func (d *Driver) publishUnclassified(ctx context.Context, topic string, msgs []*driver.Message, stored bool) error {
	if err := validTopic(topic); err != nil {
		return err
	}
	d.mu.Lock()
	cm, sess, closed := d.pub, d.pubSess, d.closed
	d.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if cm == nil {
		return fmt.Errorf("mqtt: driver %w", driver.ErrNotStarted)
	}
	if len(msgs) == 0 {
		return nil
	}
	connCtx := sess.current()
	if connCtx.Err() != nil {
		return fmt.Errorf("%w: publisher not connected", ErrConnectionLost)
	}
	if limit := packetLimit(d.opts.maxPacketSize, sess.maxPacketSize()); limit > 0 {
		for _, m := range msgs {
			if n := packetSize(toPublish(topic, m)); n > limit {
				return fmt.Errorf("mqtt: PUBLISH packet: %w", driver.TooLarge(topic, n, limit))
			}
		}
	}
	// paho waits for a PUBACK until its packet timeout even when the connection
	// drops; cancelling on connection loss makes Publish fail at once instead.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(connCtx, func() { cancel(ErrConnectionLost) })
	defer stop()

	if len(msgs) == 1 {
		return publishOne(ctx, cm, topic, msgs[0], stored)
	}
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		errMu sync.Mutex
		first error
	)
	for range min(len(msgs), d.opts.publishWindow) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(msgs) || ctx.Err() != nil {
					return
				}
				if err := publishOne(ctx, cm, topic, msgs[i], stored); err != nil {
					errMu.Lock()
					if first == nil {
						first = err
						cancel(err)
					}
					errMu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		first = context.Cause(ctx)
	}
	return first
}

func publishOne(ctx context.Context, cm *autopaho.ConnectionManager, topic string, m *driver.Message, stored bool) error {
	resp, err := cm.Publish(ctx, toPublish(topic, m))
	if err == nil {
		if stored && resp != nil && resp.ReasonCode == reasonNoSubscribers {
			// Like a message returned unroutable: sending it again fails
			// the same way until someone subscribes.
			return driver.Classify(driver.Rejected,
				fmt.Errorf("%w: topic %q: reason code 0x10, no subscriber: the message was not kept", ErrRefused, topic))
		}
		return nil
	}
	if resp != nil && resp.ReasonCode >= 0x80 {
		reason := ""
		if resp.Properties != nil && resp.Properties.ReasonString != "" {
			reason = ": " + resp.Properties.ReasonString
		}
		return driver.Classify(reasonClass(resp.ReasonCode),
			fmt.Errorf("%w: topic %q: reason code 0x%02x%s", ErrRefused, topic, resp.ReasonCode, reason))
	}
	// The connection is down, or going down under the session (between
	// the loss and the next CONNACK the session refuses packets).
	if errors.Is(err, autopaho.ConnectionDownError) || errors.Is(err, session.ErrNoConnection) {
		return fmt.Errorf("%w: publish to %q: %v", ErrConnectionLost, topic, err)
	}
	if cause := context.Cause(ctx); cause != nil && ctx.Err() != nil {
		if errors.Is(cause, ErrConnectionLost) {
			return fmt.Errorf("%w before the broker confirmed a publish to %q", ErrConnectionLost, topic)
		}
		return fmt.Errorf("mqtt: publish to %q: %w", topic, cause)
	}
	return fmt.Errorf("mqtt: publish to %q: %w", topic, err)
}

// Close implements driver.Broker: it closes every subscription (their sessions
// stay on the broker with whatever is unacknowledged) and the publisher, then
// closes the Errors channel.
func (d *Driver) Close(ctx context.Context) error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	subs := slices.Collect(maps.Keys(d.subs))
	pub := d.pub
	d.mu.Unlock()

	errs := []error{driver.CloseAll(ctx, subs)}
	if pub != nil {
		if err := pub.Disconnect(ctx); err != nil {
			errs = append(errs, fmt.Errorf("mqtt: disconnect publisher: %w", err))
		}
	}
	d.cancel()
	if pub != nil {
		select {
		case <-pub.Done():
			_ = d.pubSess.State.Close()
		case <-ctx.Done():
			errs = append(errs, ctx.Err())
		}
	}
	d.errs.Close()
	return errors.Join(errs...)
}

func (d *Driver) forget(s *subscription) {
	d.mu.Lock()
	delete(d.subs, s)
	d.mu.Unlock()
}

// pubSession is the publisher's paho session state plus a context that ends
// when the current connection is lost.
type pubSession struct {
	*state.State
	mu     sync.Mutex
	conn   context.Context
	cancel context.CancelFunc
	// maxPacket is the Maximum Packet Size of the last CONNACK (0: none).
	maxPacket uint32
}

func newPubSession() *pubSession {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // not connected yet
	return &pubSession{State: state.NewInMemory(), conn: ctx, cancel: cancel}
}

func (s *pubSession) ConAckReceived(w io.Writer, cp *packets.Connect, ca *packets.Connack) error {
	err := s.State.ConAckReceived(w, cp, ca)
	if err == nil {
		s.mu.Lock()
		s.conn, s.cancel = context.WithCancel(context.Background())
		s.maxPacket = 0
		if ca.Properties != nil && ca.Properties.MaximumPacketSize != nil {
			s.maxPacket = *ca.Properties.MaximumPacketSize
		}
		s.mu.Unlock()
	}
	return err
}

// maxPacketSize is the broker's Maximum Packet Size from the last CONNACK
// (0: it announced none).
func (s *pubSession) maxPacketSize() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int(s.maxPacket)
}

func (s *pubSession) ConnectionLost(dp *packets.Disconnect) error {
	s.mu.Lock()
	s.cancel()
	s.mu.Unlock()
	return s.State.ConnectionLost(dp)
}

// current returns a context that ends when the current connection is lost
// (already ended when there is none).
func (s *pubSession) current() context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conn
}

// Ping implements driver.Pinger: the publishing connection is up (the
// connection manager's state, which its keep-alive keeps true), waiting at
// most until ctx ends for a reconnect.
func (d *Driver) Ping(ctx context.Context) error {
	d.mu.Lock()
	cm, closed := d.pub, d.closed
	d.mu.Unlock()
	switch {
	case closed:
		return ErrClosed
	case cm == nil:
		return fmt.Errorf("mqtt: driver %w", driver.ErrNotStarted)
	}
	if err := cm.AwaitConnection(ctx); err != nil {
		return fmt.Errorf("mqtt: not connected to %s: %w", d.server.Redacted(), err)
	}
	return nil
}

var _ driver.Pinger = (*Driver)(nil)
