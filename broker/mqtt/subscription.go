package mqtt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"sync"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"
	"github.com/eclipse/paho.golang/paho/session/state"

	"github.com/msgx/msgx/broker/driver"
)

// Subscribe implements driver.Broker. It opens the subscription's own
// connection under a client id derived from the instance id, topic, group and
// a free slot (see Slots), resuming the broker session that id left, and
// returns once the shared subscription $share/<group>/<topic> is in place.
func (d *Driver) Subscribe(ctx context.Context, spec driver.SubscriptionSpec) (driver.Subscription, error) {
	if err := validTopic(spec.Topic); err != nil {
		return nil, err
	}
	if err := validGroup(spec.Group); err != nil {
		return nil, err
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, ErrClosed
	}
	if !d.started {
		d.mu.Unlock()
		return nil, errors.New("mqtt: not started")
	}
	d.mu.Unlock()

	if spec.DeadLetterTopic != "" && spec.DeadLetterTopic != spec.Topic {
		// Dead letters need a session keeping them before the first is sent.
		// A destination that cannot have one (refused, reserved) still lets
		// the subscription consume; only its dead letters fail.
		if err := validTopic(spec.DeadLetterTopic); err != nil {
			return nil, fmt.Errorf("mqtt: dead-letter topic: %w", err)
		}
		if err := d.keepDeadLetters(ctx, spec.DeadLetterTopic); err != nil {
			d.opts.logger.Warn("mqtt: dead letters have no keeping session; they will fail until they have one",
				"topic", spec.Topic, "group", spec.Group, "dead_letter_topic", spec.DeadLetterTopic, "err", err)
		}
	}

	key := slotKey(d.opts.instance, spec.Topic, spec.Group)
	slot := d.opts.slots.acquire(key)
	s := &subscription{
		d: d, spec: spec, key: key, slot: slot,
		clientID:   ClientID(d.opts.instance, spec.Topic, spec.Group, slot),
		filter:     "$share/" + spec.Group + "/" + spec.Topic,
		ready:      make(chan struct{}, 1),
		done:       make(chan struct{}),
		kick:       make(chan struct{}, 1),
		writerDone: make(chan struct{}),
		first:      make(chan error, 1),
	}
	s.sess = &subSession{State: state.NewInMemory(), s: s}
	receiveMax := uint16(min(max(spec.Prefetch, 1), 65535))

	cfg := d.clientConfig(s.clientID)
	// Resume the session this client id left: it holds what the previous
	// holder of the slot did not acknowledge and what was queued since.
	cfg.CleanStartOnInitialConnection = false
	cfg.SessionExpiryInterval = uint32(min(d.opts.sessionExpiry/time.Second, 1<<32-2))
	cfg.Session = s.sess
	cfg.ConnectPacketBuilder = func(cp *paho.Connect, _ *url.URL) (*paho.Connect, error) {
		if cp.Properties == nil {
			cp.Properties = &paho.ConnectProperties{}
		}
		// The broker hands over at most Prefetch unacknowledged messages.
		cp.Properties.ReceiveMaximum = &receiveMax
		return cp, nil
	}
	cfg.OnPublishReceived = []func(paho.PublishReceived) (bool, error){s.onPublish}
	cfg.OnConnectionUp = func(cm *autopaho.ConnectionManager, _ *paho.Connack) { go s.subscribe(cm) }
	cfg.OnConnectionDown = func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.takenOver && !s.closed {
			d.report(fmt.Errorf("subscription %s (client %s): %w; not reconnecting", s.filter, s.clientID, ErrTakenOver))
		}
		return !s.takenOver
	}
	cfg.OnConnectError = func(err error) {
		s.setFirst(err)
		d.report(fmt.Errorf("subscription %s (client %s): connect: %w", s.filter, s.clientID, err))
	}
	cfg.OnClientError = func(err error) {
		if !s.isClosed() {
			d.report(fmt.Errorf("subscription %s (client %s): connection lost: %w", s.filter, s.clientID, err))
		}
	}
	cfg.OnServerDisconnect = func(dc *paho.Disconnect) {
		if !s.isClosed() {
			d.report(fmt.Errorf("subscription %s (client %s): disconnected by the broker: reason 0x%02x", s.filter, s.clientID, dc.ReasonCode))
		}
	}
	cm, err := autopaho.NewConnection(d.ctx, cfg)
	if err != nil {
		d.opts.slots.release(key, slot)
		return nil, fmt.Errorf("mqtt: %w", err)
	}
	s.cm = cm
	go s.writeAcks()

	wait, cancel := context.WithTimeout(ctx, d.opts.connectTimeout)
	defer cancel()
	var lastErr error
	for {
		select {
		case err := <-s.first:
			if errors.Is(err, errSubscribed) {
				d.mu.Lock()
				closed := d.closed
				if !closed {
					d.subs[s] = struct{}{}
				}
				d.mu.Unlock()
				if closed {
					_ = s.Close(context.WithoutCancel(ctx))
					return nil, ErrClosed
				}
				return s, nil
			}
			lastErr = err
			continue
		case <-wait.Done():
		}
		break
	}
	_ = s.Close(context.WithoutCancel(ctx))
	if lastErr == nil {
		lastErr = wait.Err()
	}
	return nil, fmt.Errorf("mqtt: subscribe %s as %s: %w", s.filter, s.clientID, lastErr)
}

// errSubscribed marks the first successful SUBACK on the first channel.
var errSubscribed = errors.New("subscribed")

type subscription struct {
	d        *Driver
	spec     driver.SubscriptionSpec
	key      string
	slot     int
	clientID string
	filter   string
	cm       *autopaho.ConnectionManager
	sess     *subSession

	mu sync.Mutex
	// gen counts connections; a delivery can only be acknowledged on the
	// connection it arrived on (packet ids are reused on the next one).
	gen       uint64
	connected bool
	// order lists the QoS 1 deliveries of this connection not yet PUBACKed, in
	// arrival order: MQTT requires PUBACKs in that order, so a settled delivery
	// waits for the ones before it.
	order      []*inflight
	queue      []*delivery // received, not yet handed out by Receive
	due        []uint16    // packet ids whose PUBACK is due on conn
	conn       io.Writer   // the current connection
	closed     bool
	takenOver  bool
	ready      chan struct{}
	done       chan struct{}
	kick       chan struct{} // wakes the acknowledgement writer
	writerDone chan struct{}
	first      chan error
	once       sync.Once
	closeOnce  sync.Once
	closeErr   error
}

type inflight struct {
	id    uint16
	acked bool
}

func (s *subscription) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// setFirst passes connection and subscription outcomes to a waiting Subscribe.
func (s *subscription) setFirst(err error) {
	select {
	case s.first <- err:
	default:
	}
}

// subscribe (re)establishes the shared subscription on every connection: a
// session the broker lost (expired, or a broker without persistence) has none.
func (s *subscription) subscribe(cm *autopaho.ConnectionManager) {
	ctx, cancel := context.WithTimeout(s.d.ctx, s.d.opts.packetTimeout)
	defer cancel()
	// The group's own retry topic rides on the same session: requeued copies
	// wait there for the group alone.
	retry := "$share/" + s.spec.Group + "/" + retryTopic(s.spec)
	sa, err := cm.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: s.filter, QoS: 1}, {Topic: retry, QoS: 1}}})
	if err == nil {
		for _, r := range sa.Reasons {
			if r >= 0x80 {
				err = fmt.Errorf("SUBACK reason code 0x%02x", r)
			}
		}
	}
	if err != nil {
		err = fmt.Errorf("subscription %s (client %s): subscribe: %w", s.filter, s.clientID, err)
		s.setFirst(err)
		if !s.isClosed() {
			s.d.report(err)
		}
		return
	}
	s.once.Do(func() {
		// Replace a stale connect error so the success is what Subscribe sees.
		for {
			select {
			case s.first <- errSubscribed:
				return
			default:
			}
			select {
			case <-s.first:
			default:
			}
		}
	})
}

// onPublish runs on paho's delivery goroutine; it only queues.
func (s *subscription) onPublish(pr paho.PublishReceived) (bool, error) {
	p := pr.Packet
	msg := fromPublish(p)
	if p.Duplicate() {
		// The broker sent it before and got no PUBACK: an attempt that ended
		// without a settlement (a crash, a lost connection, a stop).
		msg.Headers = driver.CountRedelivery(msg.Headers)
	}
	s.mu.Lock()
	if s.closed || !s.connected {
		// The broker sends it again when the session resumes.
		s.mu.Unlock()
		return true, nil
	}
	dl := &delivery{s: s, gen: s.gen, msg: msg}
	if p.QoS > 0 {
		dl.e = &inflight{id: p.PacketID}
		s.order = append(s.order, dl.e)
	}
	s.queue = append(s.queue, dl)
	s.mu.Unlock()
	select {
	case s.ready <- struct{}{}:
	default:
	}
	return true, nil
}

// Receive implements driver.Subscription.
func (s *subscription) Receive(ctx context.Context, n int) ([]driver.Delivery, error) {
	n = max(n, 1)
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, driver.ErrClosed
		}
		if len(s.queue) > 0 {
			k := min(n, len(s.queue))
			out := make([]driver.Delivery, k)
			for i := range k {
				out[i] = s.queue[i]
				s.queue[i] = nil
			}
			s.queue = s.queue[k:]
			s.mu.Unlock()
			return out, nil
		}
		taken := s.takenOver
		s.mu.Unlock()
		if taken {
			return nil, fmt.Errorf("subscription %s (client %s): %w", s.filter, s.clientID, ErrTakenOver)
		}
		select {
		case <-s.ready:
		case <-s.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Close implements driver.Subscription: it disconnects without unsubscribing,
// so the session keeps the group membership, the unacknowledged messages and
// those published meanwhile for the next holder of the client id.
func (s *subscription) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		close(s.done)
		s.queue = nil
		s.mu.Unlock()
		// Settled deliveries' PUBACKs go out before the DISCONNECT.
		<-s.writerDone
		if err := s.cm.Disconnect(ctx); err != nil {
			s.closeErr = fmt.Errorf("mqtt: disconnect %s: %w", s.clientID, err)
		}
		// The slot is free only once the connection is gone, or the next holder
		// of the client id would take the session over from this one.
		go func() {
			<-s.cm.Done()
			_ = s.sess.State.Close()
			s.d.opts.slots.release(s.key, s.slot)
		}()
		s.d.forget(s)
	})
	return s.closeErr
}

// ack marks a delivery settled and queues every PUBACK that is now due, in
// arrival order, for the acknowledgement writer.
func (s *subscription) ack(dl *delivery) error {
	if dl.e == nil {
		return nil // QoS 0: nothing to acknowledge
	}
	s.mu.Lock()
	if err := s.liveLocked(dl); err != nil {
		s.mu.Unlock()
		return err
	}
	dl.e.acked = true
	n := len(s.due)
	for len(s.order) > 0 && s.order[0].acked {
		s.due = append(s.due, s.order[0].id)
		s.order[0] = nil
		s.order = s.order[1:]
	}
	queued := len(s.due) > n
	s.mu.Unlock()
	if queued {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
	return nil
}

// writeAcks sends the due PUBACKs. Under load several settlements pile up
// while a write is in progress and go out in one write, which spares the
// broker a wake-up per acknowledgement. It flushes once more when the
// subscription closes, before the DISCONNECT.
func (s *subscription) writeAcks() {
	defer close(s.writerDone)
	var buf []byte
	var spare []uint16
	for {
		stop := false
		select {
		case <-s.kick:
		case <-s.done:
			stop = true
		}
		s.mu.Lock()
		w, ids := s.conn, s.due
		s.due = spare[:0]
		s.mu.Unlock()
		if w != nil && len(ids) > 0 {
			buf = buf[:0]
			for _, id := range ids {
				// PUBACK, remaining length 2, packet id: reason code 0x00
				// (success) and no properties may be omitted (MQTT 5 3.4.2.1).
				buf = append(buf, packets.PUBACK<<4, 2, byte(id>>8), byte(id))
			}
			// A write to a connection that is gone fails harmlessly: its packet
			// ids were captured with it, never with a later connection.
			if err := writeFrames(w, buf); err != nil {
				s.d.opts.logger.Debug("mqtt: PUBACK write failed", "client", s.clientID, "err", err)
			}
		}
		spare = ids
		if stop {
			return
		}
	}
}

// writeFrames writes whole MQTT frames to a connection paho writes to as
// well, under paho's own write lock: paho writes a packet in several Write
// calls (its header, then its parts) holding the lock of a connection that
// has one (packets.NewThreadSafeConn, which autopaho puts around TLS and
// WebSocket connections), and a write without it would land between them.
// A plain TCP connection has no such lock and needs none: paho writes each
// packet there in one writev, and the connection serialises its writes.
func writeFrames(w io.Writer, frames []byte) error {
	if l, ok := w.(sync.Locker); ok {
		l.Lock()
		defer l.Unlock()
	}
	_, err := w.Write(frames)
	return err
}

func (s *subscription) live(dl *delivery) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.liveLocked(dl)
}

func (s *subscription) liveLocked(dl *delivery) error {
	switch {
	case dl.e != nil && dl.e.acked:
		return driver.ErrSettled
	case s.closed:
		return fmt.Errorf("%w: subscription closed before the acknowledgement: %w", ErrConnectionLost, driver.ErrNotHeld)
	case dl.e != nil && (!s.connected || dl.gen != s.gen):
		return fmt.Errorf("%w: the delivery's connection is gone: %w", ErrConnectionLost, driver.ErrNotHeld)
	}
	return nil
}

// connUp and connDown track connections (called from subSession).
func (s *subscription) connUp(w io.Writer) {
	s.gen++
	s.order = nil
	s.due = s.due[:0]
	s.conn = w
	s.connected = true
}

func (s *subscription) connDown(dp *packets.Disconnect) {
	s.gen++
	s.order = nil
	s.queue = nil // not handed out yet: the broker sends them again
	s.due = s.due[:0]
	s.conn = nil
	s.connected = false
	if dp != nil && dp.ReasonCode == reasonSessionTakenOver {
		s.takenOver = true
		select { // wake Receive to report it
		case s.ready <- struct{}{}:
		default:
		}
	}
}

// subSession is a subscription's paho session state. It stops paho from
// acknowledging on its own (the subscription sends PUBACKs itself, when the
// port settled) and tells the subscription about each connection.
type subSession struct {
	*state.State
	s *subscription
}

func (ss *subSession) ConAckReceived(w io.Writer, cp *packets.Connect, ca *packets.Connack) error {
	ss.s.mu.Lock()
	defer ss.s.mu.Unlock()
	err := ss.State.ConAckReceived(w, cp, ca)
	if err == nil {
		ss.s.connUp(w)
	}
	return err
}

func (ss *subSession) ConnectionLost(dp *packets.Disconnect) error {
	ss.s.mu.Lock()
	defer ss.s.mu.Unlock()
	ss.s.connDown(dp)
	return ss.State.ConnectionLost(dp)
}

// Ack is what paho calls once the receive callback returned; the PUBACK is
// deferred to the port's settlement instead.
func (ss *subSession) Ack(*packets.Publish) error { return nil }

type delivery struct {
	s   *subscription
	gen uint64
	e   *inflight // nil for QoS 0
	msg *driver.Message
}

func (dl *delivery) Message() *driver.Message { return dl.msg }

// Ack implements driver.Delivery.
func (dl *delivery) Ack(context.Context) error { return dl.s.ack(dl) }

// Requeue implements driver.Delivery: a confirmed publish of msg to the
// group's retry topic, which only this group subscribes to (no other group
// nor any other subscriber of the topic sees the copy), then the PUBACK of the
// original. If the publish fails nothing is settled; if only the PUBACK fails
// the original comes back as well.
func (dl *delivery) Requeue(ctx context.Context, msg *driver.Message, _ time.Duration) error {
	return dl.republish(ctx, retryTopic(dl.s.spec), msg)
}

// retryTopic is the group's private retry topic for spec's topic.
func retryTopic(spec driver.SubscriptionSpec) string {
	return spec.Topic + "/msgx-retry/" + spec.Group
}

// Release implements driver.Delivery: MQTT has no negative acknowledgement
// (a PUBACK with an error code settles the message as well), so msg is
// re-published to the group's retry topic and then the original acknowledged.
func (dl *delivery) Release(ctx context.Context, msg *driver.Message, _ time.Duration) error {
	return dl.republish(ctx, retryTopic(dl.s.spec), msg)
}

// DeadLetter implements driver.Delivery: a confirmed publish to the dead-letter
// topic, then the PUBACK; if the publish fails the original is not acknowledged.
func (dl *delivery) DeadLetter(ctx context.Context, msg *driver.Message) error {
	return dl.republish(ctx, dl.s.spec.DeadLetterTopic, msg)
}

func (dl *delivery) republish(ctx context.Context, topic string, msg *driver.Message) error {
	// A delivery whose connection is gone comes back anyway: publishing a copy
	// would only duplicate it.
	if err := dl.s.live(dl); err != nil {
		return err
	}
	if err := dl.s.d.publish(ctx, topic, []*driver.Message{msg}, true); err != nil {
		return err
	}
	return dl.s.ack(dl)
}
