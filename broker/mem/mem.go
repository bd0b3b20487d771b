// Package mem is the in-process broker: consumer groups, broadcast, redelivery
// and dead letters without a network. It backs the embedded default and unit
// tests of pure logic; production configuration refuses it.
//
// A Server plays the broker; each Driver is a client connected to it, so tests
// can run several consumers, close a server to see connect failures, and cut
// every client's "connection" to see unsettled deliveries come back.
package mem

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/msgx/msgx/broker/driver"
)

// ErrServerClosed is returned when the server is gone.
var ErrServerClosed = errors.New("mem: server closed")

// ErrConnectionLost is returned by a settlement whose connection was cut.
var ErrConnectionLost = fmt.Errorf("mem: connection lost: %w", driver.ErrNotHeld)

// ErrRefused is returned when publishing to a refused topic.
var ErrRefused = errors.New("mem: topic refused")

// ErrUnavailable is returned while the server is down (SetDown).
var ErrUnavailable = errors.New("mem: broker unavailable")

// ErrBacklogFull is returned when a topic holds MaxBacklog messages.
var ErrBacklogFull = errors.New("mem: topic backlog full")

// Server is the in-process broker. Its topics keep a log: a group that first
// subscribes reads it from the start, so messages published while no consumer
// runs are kept (within the process).
type Server struct {
	mu         sync.Mutex
	closed     bool
	topics     map[string]*topic
	refused    map[string]bool
	maxBacklog int
	maxBytes   int    // largest payload a publish takes; 0: any
	epoch      uint64 // bumped by CutConnections
	down       bool
}

// ServerOption configures a Server.
type ServerOption func(*Server)

// MaxBacklog bounds the messages a topic keeps (default 1 000 000).
func MaxBacklog(n int) ServerOption { return func(s *Server) { s.maxBacklog = n } }

// MaxMessageBytes bounds the payload of a message (default 0: no bound). A
// larger message is refused as Rejected, like a broker's size limit.
func MaxMessageBytes(n int) ServerOption { return func(s *Server) { s.maxBytes = n } }

// NewServer starts an in-process broker.
func NewServer(opts ...ServerOption) *Server {
	s := &Server{topics: map[string]*topic{}, refused: map[string]bool{}, maxBacklog: 1_000_000}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Refuse makes publishes to topic fail, as a broker refusing a destination.
func (s *Server) Refuse(topic string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refused[topic] = true
}

// Close stops the server: clients fail from then on.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, t := range s.topics {
		for _, g := range t.groups {
			g.cond.Broadcast()
		}
	}
}

// CutConnections drops every client's in-flight deliveries back to their
// groups, as a broker does when connections break. Settlements of deliveries
// handed out before the cut fail with ErrConnectionLost.
func (s *Server) CutConnections() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.epoch++
	for _, t := range s.topics {
		for _, g := range t.groups {
			g.cond.Broadcast() // holders reclaim their cut deliveries on wake-up
		}
	}
}

// SetDown takes the server down (publishes fail, receivers wait) or back up,
// as a broker outage would.
func (s *Server) SetDown(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = down
	for _, t := range s.topics {
		for _, g := range t.groups {
			g.cond.Broadcast()
		}
	}
}

type entry struct {
	seq  uint64
	msg  *driver.Message
	held *subscription // nil when not in flight
	ep   uint64
	// redelivered counts the times it was handed out and given back
	// unsettled (a closed subscription, a cut connection).
	redelivered int
	// take counts the times it was handed out: a delivery settles only the
	// take it came from, never a later one of the same entry.
	take uint64
}

type topic struct {
	log    []*entry // entries not yet read by every group
	base   uint64   // seq of log[0]
	next   uint64
	rseq   uint64 // seq of requeued copies: after every log entry
	groups map[string]*group
}

type group struct {
	t       *topic
	cursor  uint64   // next seq to read from the log
	pending []*entry // returned, requeued or parked; delivered before the log
	subs    int
	cond    *sync.Cond
	// keys maps a key to the subscription holding unsettled deliveries of it:
	// other subscriptions of the group skip that key meanwhile, which keeps
	// per-key order across competing consumers (like Kafka partitions or
	// Pulsar's Key_Shared).
	keys map[string]*keyHold
}

type keyHold struct {
	sub *subscription
	n   int
}

func (s *Server) topicLocked(name string) *topic {
	t := s.topics[name]
	if t == nil {
		t = &topic{groups: map[string]*group{}}
		s.topics[name] = t
	}
	return t
}

// publish appends msgs to the topic's log. Its errors carry their class: a
// closed or down server and a full backlog are Unavailable (the broker cannot
// take messages now), a refused topic and an oversized message Rejected.
func (s *Server) publish(name string, msgs []*driver.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return driver.Classify(driver.Unavailable, ErrServerClosed)
	}
	if s.down {
		return driver.Classify(driver.Unavailable, ErrUnavailable)
	}
	if s.refused[name] {
		return driver.Classify(driver.Rejected, fmt.Errorf("%w: %q", ErrRefused, name))
	}
	if s.maxBytes > 0 {
		for _, m := range msgs {
			if len(m.Payload) > s.maxBytes {
				return fmt.Errorf("mem: %w", driver.TooLarge(name, len(m.Payload), s.maxBytes))
			}
		}
	}
	t := s.topicLocked(name)
	if len(t.log)+len(msgs) > s.maxBacklog {
		return driver.Classify(driver.Unavailable, fmt.Errorf("%w: %q", ErrBacklogFull, name))
	}
	for _, m := range msgs {
		t.log = append(t.log, &entry{seq: t.next, msg: clone(m)})
		t.next++
	}
	for _, g := range t.groups {
		g.cond.Broadcast()
	}
	return nil
}

// trim drops log entries every group has read. With no group the log is kept.
func (t *topic) trim() {
	if len(t.groups) == 0 {
		return
	}
	low := t.next
	for _, g := range t.groups {
		low = min(low, g.cursor)
	}
	if n := int(low - t.base); n > 0 {
		clear(t.log[:n])
		t.log = t.log[n:]
		t.base = low
	}
}

func clone(m *driver.Message) *driver.Message {
	c := &driver.Message{Key: m.Key, Payload: append([]byte(nil), m.Payload...)}
	if m.Headers != nil {
		c.Headers = make(map[string]string, len(m.Headers))
		for k, v := range m.Headers {
			c.Headers[k] = v
		}
	}
	return c
}

// Driver is a client of a Server; it implements driver.Broker.
type Driver struct {
	s      *Server
	mu     sync.Mutex
	subs   map[*subscription]struct{}
	closed bool
}

// New returns a client of s.
func New(s *Server) *Driver { return &Driver{s: s, subs: map[*subscription]struct{}{}} }

// Capabilities implements driver.Broker.
func (d *Driver) Capabilities() driver.Capabilities {
	return driver.Capabilities{Persistent: true, PerKeyOrder: true, Batch: true, LoadBalance: true, Broadcast: true, CountsRedeliveries: true}
}

// Start implements driver.Broker.
func (d *Driver) Start(context.Context) error {
	d.s.mu.Lock()
	defer d.s.mu.Unlock()
	if d.s.closed {
		return ErrServerClosed
	}
	return nil
}

// Errors implements driver.Broker; the in-process broker has no asynchronous failures.
func (d *Driver) Errors() <-chan error { return nil }

// Publish implements driver.Broker. The server holds the message once this returns.
func (d *Driver) Publish(_ context.Context, topic string, msgs []*driver.Message) error {
	return d.s.publish(topic, msgs)
}

// Subscribe implements driver.Broker.
func (d *Driver) Subscribe(_ context.Context, spec driver.SubscriptionSpec) (driver.Subscription, error) {
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrServerClosed
	}
	t := s.topicLocked(spec.Topic)
	g := t.groups[spec.Group]
	if g == nil {
		g = &group{t: t, cursor: t.base, cond: sync.NewCond(&s.mu), keys: map[string]*keyHold{}}
		t.groups[spec.Group] = g
	}
	g.subs++
	sub := &subscription{d: d, g: g, spec: spec, inflight: map[*entry]struct{}{}, prefetch: max(spec.Prefetch, 1)}
	d.mu.Lock()
	d.subs[sub] = struct{}{}
	d.mu.Unlock()
	return sub, nil
}

// Close implements driver.Broker: its subscriptions' unsettled deliveries return.
func (d *Driver) Close(ctx context.Context) error {
	d.mu.Lock()
	subs := slices.Collect(maps.Keys(d.subs))
	d.closed = true
	d.mu.Unlock()
	_ = driver.CloseAll(ctx, subs) // unsettled deliveries are redelivered either way
	return nil
}

type subscription struct {
	d        *Driver
	g        *group
	spec     driver.SubscriptionSpec
	inflight map[*entry]struct{}
	prefetch int
	closed   bool
}

// Receive implements driver.Subscription.
func (s *subscription) Receive(ctx context.Context, n int) ([]driver.Delivery, error) {
	srv := s.d.s
	stop := context.AfterFunc(ctx, func() {
		srv.mu.Lock()
		s.g.cond.Broadcast()
		srv.mu.Unlock()
	})
	defer stop()
	srv.mu.Lock()
	defer srv.mu.Unlock()
	for {
		if s.closed {
			return nil, driver.ErrClosed
		}
		if srv.closed {
			return nil, ErrServerClosed
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if srv.down {
			s.g.cond.Wait()
			continue
		}
		s.reclaimCut()
		room := min(n, s.prefetch-len(s.inflight))
		var out []driver.Delivery
		if room > 0 && len(s.g.pending) > 0 {
			kept := s.g.pending[:0]
			for _, e := range s.g.pending {
				if room > 0 && s.mayTake(e) {
					out = append(out, s.take(e))
					room--
					continue
				}
				kept = append(kept, e)
			}
			clear(s.g.pending[len(kept):])
			s.g.pending = kept
		}
		for room > 0 && s.g.cursor < s.g.t.next {
			le := s.g.t.log[s.g.cursor-s.g.t.base]
			s.g.cursor++
			// Each group gets its own copy of the entry.
			e := &entry{seq: le.seq, msg: le.msg}
			if !s.mayTake(e) {
				s.g.pending = append(s.g.pending, e) // parked behind its key's holder
				continue
			}
			out = append(out, s.take(e))
			room--
		}
		if len(out) > 0 {
			s.g.t.trim()
			return out, nil
		}
		s.g.cond.Wait()
	}
}

// reclaimCut returns deliveries handed out before a CutConnections.
func (s *subscription) reclaimCut() {
	ep := s.d.s.epoch
	var back []*entry
	for e := range s.inflight {
		if e.ep != ep {
			back = append(back, e)
		}
	}
	s.giveBack(back)
}

// mayTake reports whether no other subscription of the group holds e's key.
func (s *subscription) mayTake(e *entry) bool {
	h := s.g.keys[e.msg.Key]
	return e.msg.Key == "" || h == nil || h.sub == s
}

func (s *subscription) take(e *entry) driver.Delivery {
	e.held = s
	e.ep = s.d.s.epoch
	e.take++
	s.inflight[e] = struct{}{}
	if k := e.msg.Key; k != "" {
		h := s.g.keys[k]
		if h == nil {
			h = &keyHold{sub: s}
			s.g.keys[k] = h
		}
		h.n++
	}
	m := clone(e.msg)
	for range e.redelivered {
		m.Headers = driver.CountRedelivery(m.Headers)
	}
	return &delivery{s: s, e: e, msg: m, take: e.take}
}

// untake ends s's hold of e.
func (s *subscription) untake(e *entry) {
	delete(s.inflight, e)
	e.held = nil
	if k := e.msg.Key; k != "" {
		if h := s.g.keys[k]; h != nil && h.sub == s {
			if h.n--; h.n == 0 {
				delete(s.g.keys, k)
			}
		}
	}
}

// giveBack returns entries to the front of the group's pending list in seq order.
func (s *subscription) giveBack(es []*entry) {
	if len(es) == 0 {
		return
	}
	for _, e := range es {
		s.untake(e)
		e.redelivered++
	}
	merged := append(es, s.g.pending...)
	slices.SortFunc(merged, func(a, b *entry) int { return cmp.Compare(a.seq, b.seq) })
	s.g.pending = merged
	s.g.cond.Broadcast()
}

// Close implements driver.Subscription.
func (s *subscription) Close(context.Context) error {
	srv := s.d.s
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	back := make([]*entry, 0, len(s.inflight))
	for e := range s.inflight {
		back = append(back, e)
	}
	s.giveBack(back)
	s.g.subs--
	s.g.cond.Broadcast()
	s.d.mu.Lock()
	delete(s.d.subs, s)
	s.d.mu.Unlock()
	return nil
}

type delivery struct {
	s    *subscription
	e    *entry
	msg  *driver.Message
	take uint64
}

func (d *delivery) Message() *driver.Message { return d.msg }

// held reports why the delivery's hold is no longer valid, or nil.
func (d *delivery) held() error {
	srv := d.s.d.s
	if srv.closed {
		return ErrServerClosed
	}
	if srv.down {
		return ErrUnavailable
	}
	if d.e.held != d.s || d.e.ep != srv.epoch || d.e.take != d.take || d.s.closed {
		return ErrConnectionLost
	}
	return nil
}

// release ends the delivery's hold if it is still valid.
func (d *delivery) release() error {
	if err := d.held(); err != nil {
		return err
	}
	d.s.untake(d.e)
	d.s.g.cond.Broadcast()
	return nil
}

// Release implements driver.Delivery: the message goes to the back of its
// group's line as it was.
func (d *delivery) Release(ctx context.Context, msg *driver.Message, delay time.Duration) error {
	return d.Requeue(ctx, msg, delay)
}

func (d *delivery) Ack(context.Context) error {
	srv := d.s.d.s
	srv.mu.Lock()
	defer srv.mu.Unlock()
	return d.release()
}

func (d *delivery) Requeue(_ context.Context, msg *driver.Message, _ time.Duration) error {
	srv := d.s.d.s
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if err := d.release(); err != nil {
		return err
	}
	g := d.s.g
	t := g.t
	// A requeued message goes to the back of its group's line with a new seq:
	// behind what the group has not read from the log yet, too.
	for ; g.cursor < t.next; g.cursor++ {
		le := t.log[g.cursor-t.base]
		g.pending = append(g.pending, &entry{seq: le.seq, msg: le.msg})
	}
	t.rseq++
	g.pending = append(g.pending, &entry{seq: 1<<62 + t.rseq, msg: clone(msg)})
	d.s.g.cond.Broadcast()
	return nil
}

func (d *delivery) DeadLetter(_ context.Context, msg *driver.Message) error {
	srv := d.s.d.s
	srv.mu.Lock()
	if srv.closed {
		srv.mu.Unlock()
		return ErrServerClosed
	}
	if d.e.held != d.s || d.e.ep != srv.epoch || d.e.take != d.take {
		srv.mu.Unlock()
		return ErrConnectionLost
	}
	srv.mu.Unlock()
	// Publish first: if the dead-letter destination refuses, nothing is settled.
	if err := srv.publish(d.s.spec.DeadLetterTopic, []*driver.Message{msg}); err != nil {
		return err
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	return d.release()
}

// Ping implements driver.Pinger: the in-process server answers while it is open.
func (d *Driver) Ping(context.Context) error {
	d.s.mu.Lock()
	defer d.s.mu.Unlock()
	if d.s.closed {
		return ErrServerClosed
	}
	return nil
}

var _ driver.Pinger = (*Driver)(nil)
