// Package nats is the NATS JetStream adapter of the broker port, built on
// nats.go's jetstream package.
//
// Topology: topic T is the subject "<prefix>.T", captured by one file-backed
// stream the driver manages (named after the subject, see StreamName). A group
// is a durable pull consumer of that stream: the instances of a group pull from
// the same consumer and share its messages; every group has its own consumer
// and receives every message. Streams use limits retention by default (seven
// days), so a confirmed publish is kept for groups that subscribe later
// (WithRetention selects interest or work-queue retention).
//
// Streams are created only for topics the driver is asked to consume
// (Subscribe), for dead-letter topics named by a subscription
// (WithDeadLetterStreams), and by EnsureTopic or EnsureGroup. Publish never
// creates one: a publish to a topic no stream captures fails with "no
// responders", so a typo in a topic name is an error rather than a silently
// discarded message.
//
// Settlement: Ack is a JetStream ack; Requeue is a Nak with the port's delay
// and the server's delivery count is reported as the redelivery count;
// DeadLetter publishes to the dead-letter topic with confirmation and then
// terminates the message. Unsettled deliveries are kept alive with in-progress
// acks while their subscription is open (up to WithMaxHold) and redelivered
// after the ack wait once it is closed.
package nats

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	natsio "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgx/msgx/broker/driver"
)

// ErrNotStarted is returned by operations on a driver that is not connected.
var ErrNotStarted = fmt.Errorf("nats: driver %w", driver.ErrNotStarted)

// keyHeader carries driver.Message.Key when the partition-key header does not
// already hold it; it is removed again on receive.
const keyHeader = "msgx-key"

// Driver is a JetStream client; it implements driver.Broker.
type Driver struct {
	o options

	mu      sync.Mutex
	nc      *natsio.Conn
	js      jetstream.JetStream
	streams map[string]bool // streams known to exist
	subs    map[*subscription]struct{}
	closed  bool
	errs    *driver.ErrorFeed
}

var _ driver.Broker = (*Driver)(nil)

// New returns an unstarted driver.
func New(opts ...Option) *Driver {
	o := defaults()
	for _, opt := range opts {
		opt(&o)
	}
	return &Driver{
		o:       o,
		streams: map[string]bool{},
		subs:    map[*subscription]struct{}{},
		errs: driver.NewErrorFeed(o.errorsBuffer, func(err error) {
			o.logger.Warn("nats: error channel full, dropping", "err", err)
		}),
	}
}

// Capabilities implements driver.Broker. A work-queue stream admits a single
// consumer per subject, so Broadcast holds only for interest and limits retention.
func (d *Driver) Capabilities() driver.Capabilities {
	return driver.Capabilities{
		Persistent:         true,
		Batch:              true,
		LoadBalance:        true,
		Broadcast:          d.o.retention != jetstream.WorkQueuePolicy,
		SubscriptionExpiry: true,
		CountsRedeliveries: true,
	}
}

// Start implements driver.Broker: it connects and checks that JetStream is
// enabled for the account. Failures are returned.
func (d *Driver) Start(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.nc != nil || d.closed {
		return errors.New("nats: driver already started")
	}
	if err := validTopic(d.o.subjectPrefix); err != nil {
		return fmt.Errorf("nats: subject prefix: %w", err)
	}
	timeout := d.o.connectTimeout
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < timeout {
		timeout = time.Until(dl)
	}
	if timeout <= 0 {
		return fmt.Errorf("nats: connect: %w", context.DeadlineExceeded)
	}
	opts := []natsio.Option{
		natsio.Name(d.o.name),
		natsio.Timeout(timeout),
		natsio.MaxReconnects(-1),
		natsio.ReconnectWait(d.o.reconnectWait),
		natsio.IgnoreDiscoveredServers(),
		natsio.DontRandomize(),
		natsio.DisconnectErrHandler(func(_ *natsio.Conn, err error) {
			if err != nil {
				d.report(fmt.Errorf("disconnected: %w", err))
			}
		}),
		natsio.ReconnectErrHandler(func(_ *natsio.Conn, err error) {
			d.report(fmt.Errorf("reconnect failed: %w", err))
		}),
		natsio.ReconnectHandler(func(nc *natsio.Conn) {
			d.o.logger.Info("nats: reconnected", "url", nc.ConnectedUrlRedacted())
		}),
		natsio.ClosedHandler(func(*natsio.Conn) {
			d.mu.Lock()
			closing := d.closed
			d.mu.Unlock()
			if !closing {
				d.report(errors.New("connection closed"))
			}
		}),
		natsio.ErrorHandler(func(_ *natsio.Conn, _ *natsio.Subscription, err error) {
			d.report(fmt.Errorf("async error: %w", err))
		}),
	}
	nc, err := natsio.Connect(d.o.url, append(opts, d.o.natsOpts...)...)
	if err != nil {
		return fmt.Errorf("nats: connect %s: %w", d.o.url, err)
	}
	// No per-message async publish timeout (a timer each): Publish bounds its
	// wait instead, and the client fails pending acks on reconnect.
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(d.o.requestTimeout))
	if err != nil {
		nc.Close()
		return fmt.Errorf("nats: jetstream: %w", err)
	}
	if _, err := js.AccountInfo(ctx); err != nil {
		nc.Close()
		return fmt.Errorf("nats: jetstream account info: %w", err)
	}
	d.nc, d.js = nc, js
	return nil
}

// report hands an asynchronous failure to Errors without ever blocking the
// client's callbacks: when nobody reads, the error is logged and dropped.
func (d *Driver) report(err error) { d.errs.Report(err) }

// Errors implements driver.Broker: disconnects, failed reconnect attempts,
// asynchronous client errors and failed pulls.
func (d *Driver) Errors() <-chan error { return d.errs.C() }

// DroppedErrors implements driver.DroppedErrorCounter: the errors that did
// not fit the Errors channel (each was logged instead).
func (d *Driver) DroppedErrors() uint64 { return d.errs.Dropped() }

func (d *Driver) client() (jetstream.JetStream, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.js == nil || d.closed {
		return nil, ErrNotStarted
	}
	return d.js, nil
}

// maxPayload is the server's max_payload as its INFO announced it (0 before
// the first connection).
func (d *Driver) maxPayload() int {
	d.mu.Lock()
	nc := d.nc
	d.mu.Unlock()
	if nc == nil {
		return 0
	}
	return int(nc.MaxPayload())
}

// Subject returns the subject topic is published on.
func (d *Driver) Subject(topic string) (string, error) {
	if err := validTopic(topic); err != nil {
		return "", err
	}
	return d.o.subjectPrefix + "." + topic, nil
}

// StreamName returns the name of the stream that holds topic.
func (d *Driver) StreamName(topic string) (string, error) {
	subj, err := d.Subject(topic)
	if err != nil {
		return "", err
	}
	return jsName(subj), nil
}

// ConsumerName returns the name of the consumer of group.
func ConsumerName(group string) string { return jsName(group) }

// Publish implements driver.Broker: every message is a JetStream publish whose
// PubAck is awaited; a batch is published asynchronously and then every ack
// awaited. A topic no stream captures fails with no responders.
func (d *Driver) Publish(ctx context.Context, topic string, msgs []*driver.Message) error {
	return classify(d.publish(ctx, topic, msgs))
}

func (d *Driver) publish(ctx context.Context, topic string, msgs []*driver.Message) error {
	js, err := d.client()
	if err != nil {
		return err
	}
	subj, err := d.Subject(topic)
	if err != nil {
		return driver.Classify(driver.Rejected, err)
	}
	// The server's max_payload (from its INFO) bounds payload and headers
	// together; nats.go refuses such a message too, but without saying the
	// sizes, so the payload alone is checked here first.
	if limit := d.maxPayload(); limit > 0 {
		for _, m := range msgs {
			if len(m.Payload) > limit {
				return fmt.Errorf("nats: %w", driver.TooLarge(subj, len(m.Payload), limit))
			}
		}
	}
	if len(msgs) == 1 {
		if _, err := js.PublishMsg(ctx, toNATS(subj, msgs[0])); err != nil {
			return fmt.Errorf("nats: publish to %s: %w", subj, err)
		}
		return nil
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.o.requestTimeout)
		defer cancel()
	}
	futures := make([]jetstream.PubAckFuture, 0, min(len(msgs), d.o.publishWindow))
	// Windows keep the client's outstanding async publishes bounded for big batches.
	for start := 0; start < len(msgs); start += d.o.publishWindow {
		futures = futures[:0]
		for _, m := range msgs[start:min(start+d.o.publishWindow, len(msgs))] {
			f, err := js.PublishMsgAsync(toNATS(subj, m))
			if err != nil {
				return fmt.Errorf("nats: publish to %s: %w", subj, err)
			}
			futures = append(futures, f)
		}
		for _, f := range futures {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				return fmt.Errorf("nats: publish to %s: %w", subj, err)
			case <-ctx.Done():
				return fmt.Errorf("nats: publish to %s: %w", subj, ctx.Err())
			}
		}
	}
	return nil
}

func toNATS(subj string, m *driver.Message) *natsio.Msg {
	nm := &natsio.Msg{Subject: subj, Data: m.Payload}
	if len(m.Headers) > 0 || m.Key != "" {
		nm.Header = make(natsio.Header, len(m.Headers)+1)
		for k, v := range m.Headers {
			nm.Header[k] = []string{v}
		}
		// The port mirrors the key in the partition-key header; the key travels
		// in a header of its own only when it differs, since every header byte
		// is parsed by the server on each stored message.
		if m.Key != m.Headers[driver.HeaderPartitionKey] {
			nm.Header[keyHeader] = []string{m.Key}
		}
	}
	return nm
}

// EnsureTopic creates the stream of topic unless it exists, so that it accepts
// publishes before anyone subscribed. An existing stream is left as it is.
func (d *Driver) EnsureTopic(ctx context.Context, topic string) error {
	return d.ensureStream(ctx, topic, false, false)
}

// EnsureGroup creates the stream of topic and the consumer of group unless
// they exist. With interest retention, messages published before a group
// exists are not kept for it: create groups at deployment to keep them.
// Under the default limits retention a group created later reads the
// stream from its start.
func (d *Driver) EnsureGroup(ctx context.Context, topic, group string) error {
	if err := d.ensureStream(ctx, topic, false, false); err != nil {
		return err
	}
	_, err := d.ensureConsumer(ctx, driver.SubscriptionSpec{Topic: topic, Group: group})
	return err
}

func (d *Driver) ensureStream(ctx context.Context, topic string, deadLetter, force bool) error {
	js, err := d.client()
	if err != nil {
		return err
	}
	subj, err := d.Subject(topic)
	if err != nil {
		return err
	}
	name := jsName(subj)
	d.mu.Lock()
	known := d.streams[name]
	d.mu.Unlock()
	if known && !force {
		return nil
	}
	cfg := jetstream.StreamConfig{
		Name:        name,
		Description: "msgx topic " + topic,
		Subjects:    []string{subj},
		Storage:     jetstream.FileStorage,
		Retention:   d.o.retention,
	}
	if cfg.Retention == jetstream.LimitsPolicy {
		cfg.MaxAge = d.o.topicAge
	}
	if deadLetter {
		// Dead letters must survive without any reader: limits retention.
		cfg.Description = "msgx dead letters " + topic
		cfg.Retention = jetstream.LimitsPolicy
		cfg.MaxAge = d.o.deadLetterAge
	}
	if d.o.streamConfig != nil {
		d.o.streamConfig(&cfg)
	}
	_, err = js.CreateStream(ctx, cfg)
	if err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return fmt.Errorf("nats: create stream %s: %w", name, err)
	}
	d.mu.Lock()
	d.streams[name] = true
	d.mu.Unlock()
	return nil
}

func (d *Driver) ensureConsumer(ctx context.Context, spec driver.SubscriptionSpec) (jetstream.Consumer, error) {
	js, err := d.client()
	if err != nil {
		return nil, err
	}
	if err := validGroup(spec.Group); err != nil {
		return nil, err
	}
	stream, err := d.StreamName(spec.Topic)
	if err != nil {
		return nil, err
	}
	cfg := jetstream.ConsumerConfig{
		Durable:           ConsumerName(spec.Group),
		Description:       "msgx group " + spec.Group,
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		AckPolicy:         jetstream.AckExplicitPolicy,
		AckWait:           d.o.ackWait,
		MaxDeliver:        d.o.maxDeliver,
		MaxAckPending:     d.o.maxAckPending,
		InactiveThreshold: d.o.groupInactive,
	}
	if spec.Expiry > 0 {
		cfg.InactiveThreshold = spec.Expiry
	}
	c, err := js.CreateOrUpdateConsumer(ctx, stream, cfg)
	if err != nil {
		return nil, fmt.Errorf("nats: consumer %s on %s: %w", cfg.Durable, stream, err)
	}
	return c, nil
}

// Subscribe implements driver.Broker: it ensures the topic's stream (and the
// dead-letter topic's, see WithDeadLetterStreams) and the group's consumer,
// then pulls up to spec.Prefetch unsettled messages at a time.
func (d *Driver) Subscribe(ctx context.Context, spec driver.SubscriptionSpec) (driver.Subscription, error) {
	if err := d.ensureStream(ctx, spec.Topic, false, false); err != nil {
		return nil, err
	}
	if d.o.deadLetters && spec.DeadLetterTopic != "" {
		if err := d.ensureStream(ctx, spec.DeadLetterTopic, true, false); err != nil {
			return nil, err
		}
	}
	cons, err := d.ensureConsumer(ctx, spec)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, ErrNotStarted
	}
	s := newSubscription(d, cons, spec)
	d.subs[s] = struct{}{}
	s.start()
	return s, nil
}

func (d *Driver) forget(s *subscription) {
	d.mu.Lock()
	delete(d.subs, s)
	d.mu.Unlock()
}

// Close implements driver.Broker: it closes every subscription (unsettled
// deliveries stay unsettled and come back after the ack wait), flushes what
// the client still buffers (acknowledgements) and closes the connection and
// the Errors channel.
func (d *Driver) Close(ctx context.Context) error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	nc := d.nc
	subs := slices.Collect(maps.Keys(d.subs))
	d.mu.Unlock()
	_ = driver.CloseAll(ctx, subs) // unsettled deliveries are redelivered either way
	if nc != nil {
		// A round trip makes sure the server has read the last
		// acknowledgements. Without a connection there is nothing to wait
		// for: lost acknowledgements mean redeliveries, which are allowed.
		if nc.IsConnected() {
			fctx, cancel := context.WithTimeout(ctx, d.o.requestTimeout)
			if err := nc.FlushWithContext(fctx); err != nil {
				d.o.logger.Debug("nats: flush at close", "err", err)
			}
			cancel()
		}
		nc.Close()
	}
	d.errs.Close()
	return nil
}

// Ping implements driver.Pinger: a PING/PONG round trip to the server (a
// flush), bounded by ctx or, without a deadline, the request timeout.
func (d *Driver) Ping(ctx context.Context) error {
	d.mu.Lock()
	nc, closed := d.nc, d.closed
	d.mu.Unlock()
	if nc == nil || closed {
		return ErrNotStarted
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.o.requestTimeout)
		defer cancel()
	}
	if err := nc.FlushWithContext(ctx); err != nil {
		return fmt.Errorf("nats: no answer from %s: %w", nc.ConnectedUrlRedacted(), err)
	}
	return nil
}

var _ driver.Pinger = (*Driver)(nil)
