package broker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/msgx/msgx/backoff"
	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/internal/testkit"
)

// limitDriver is a broker with a client limit (driver.Limiter, counting key,
// payload and headers), topics with lower limits of their own (a send over
// them is Rejected), and an outage switch (sends are Unavailable). It hands
// out one delivery, whose dead letter goes through the same checks.
type limitDriver struct {
	limit  int
	topics map[string]int // topic -> the broker's limit for it
	down   atomic.Bool

	mu        sync.Mutex
	published map[string][]*driver.Message
	attempts  atomic.Int64 // dead-letter attempts of the delivery
	released  atomic.Int64
	delivery  driver.Message
}

func (d *limitDriver) MaxMessageBytes() int { return d.limit }
func (d *limitDriver) MessageBytes(m *driver.Message) int {
	n := len(m.Key) + len(m.Payload)
	for k, v := range m.Headers {
		n += len(k) + len(v)
	}
	return n
}
func (*limitDriver) Capabilities() driver.Capabilities { return driver.Capabilities{NativeKey: true} }
func (*limitDriver) Start(context.Context) error       { return nil }
func (*limitDriver) Errors() <-chan error              { return nil }
func (*limitDriver) Close(context.Context) error       { return nil }

func (d *limitDriver) Publish(_ context.Context, topic string, msgs []*driver.Message) error {
	if d.down.Load() {
		return driver.Classify(driver.Unavailable, errors.New("broker down"))
	}
	for _, m := range msgs {
		if lim, ok := d.topics[topic]; ok && d.MessageBytes(m) > lim {
			return driver.Classify(driver.Rejected, errors.New("message too large for the topic"))
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.published[topic] = append(d.published[topic], msgs...)
	return nil
}

func (d *limitDriver) sent(topic string) []*driver.Message {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*driver.Message(nil), d.published[topic]...)
}

func (d *limitDriver) Subscribe(context.Context, driver.SubscriptionSpec) (driver.Subscription, error) {
	return &limitSub{d: d}, nil
}

type limitSub struct {
	d    *limitDriver
	sent bool
}

func (s *limitSub) Receive(ctx context.Context, _ int) ([]driver.Delivery, error) {
	if !s.sent {
		s.sent = true
		return []driver.Delivery{&limitDelivery{d: s.d, msg: s.d.delivery}}, nil
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

func (s *limitSub) Close(context.Context) error { return nil }

type limitDelivery struct {
	d   *limitDriver
	msg driver.Message
}

func (l *limitDelivery) Message() *driver.Message  { return &l.msg }
func (l *limitDelivery) Ack(context.Context) error { return nil }
func (l *limitDelivery) Requeue(ctx context.Context, m *driver.Message, _ time.Duration) error {
	return l.d.Publish(ctx, "in", []*driver.Message{m})
}
func (l *limitDelivery) Release(context.Context, *driver.Message, time.Duration) error {
	l.d.released.Add(1)
	return nil
}
func (l *limitDelivery) DeadLetter(ctx context.Context, m *driver.Message) error {
	l.d.attempts.Add(1)
	return l.d.Publish(ctx, "dlq", []*driver.Message{m})
}
func (l *limitDelivery) Position() (int32, int64) { return 3, 42 }

func newLimitDriver(limit int, topics map[string]int, payload []byte) *limitDriver {
	return &limitDriver{limit: limit, topics: topics, published: map[string][]*driver.Message{},
		delivery: driver.Message{Key: "k", Payload: payload, Headers: map[string]string{"own": "header"}}}
}

func startDriver(t *testing.T, drv driver.Broker, reg prometheus.Registerer) *Broker {
	t.Helper()
	b := New("limit", drv, WithLogger(testkit.Quiet()), WithRegisterer(reg),
		WithSettleRetry(backoff.Policy{MaxAttempts: 3, Initial: time.Millisecond, Max: 5 * time.Millisecond}))
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Stop(context.Background()) })
	return b
}

func checkByReference(t *testing.T, m *driver.Message, payload []byte) {
	t.Helper()
	sum := sha256.Sum256(payload)
	if len(m.Payload) != 0 || m.Headers[HeaderDeadPayloadOmitted] == "" ||
		m.Headers[HeaderDeadPayloadSize] != strconv.Itoa(len(payload)) || m.Headers[HeaderDeadPayloadSHA256] != hex.EncodeToString(sum[:]) {
		t.Errorf("not a copy by reference: %d bytes, headers %v", len(m.Payload), m.Headers)
	}
}

// A dead-letter copy over the adapter's limit, and one the broker refuses
// (its topic's limit is lower), go by reference; one that fits goes whole;
// each by reference is counted.
func TestSendDeadLetterByReference(t *testing.T) {
	drv := newLimitDriver(1000, map[string]int{"small-dlq": 500}, nil)
	reg := prometheus.NewRegistry()
	b := startDriver(t, drv, reg)
	huge, mid, fine := make([]byte, 2000), make([]byte, 700), []byte("fine")
	msgs := []*Message{
		{Key: "a", Payload: huge, Headers: map[string]string{HeaderDeadTopic: "in"}},
		{Key: "b", Payload: mid},
		{Key: "c", Payload: fine},
	}
	n, err := b.SendDeadLetter(context.Background(), "small-dlq", msgs...)
	if err != nil || n != 2 {
		t.Fatalf("SendDeadLetter: %d by reference, %v", n, err)
	}
	byKey := map[string]*driver.Message{}
	for _, m := range drv.sent("small-dlq") {
		byKey[m.Key] = m // the refused batch was sent again one by one
	}
	checkByReference(t, byKey["a"], huge)
	checkByReference(t, byKey["b"], mid)
	if byKey["a"].Headers[HeaderDeadTopic] != "in" {
		t.Errorf("the copy lost its headers: %v", byKey["a"].Headers)
	}
	if string(byKey["c"].Payload) != "fine" {
		t.Errorf("a copy that fits went by reference: %v", byKey["c"])
	}
	if v := testutil.ToFloat64(b.met.deadByRef.WithLabelValues("small-dlq")); v != 2 {
		t.Errorf("counted %v copies by reference, want 2", v)
	}

	// Headers of its own too large even without the payload: they are left
	// out as well, the msgx-* ones stay.
	own := &Message{Key: "d", Payload: fine, Headers: map[string]string{"big": string(huge), HeaderDeadTopic: "in"}}
	if n, err := b.SendDeadLetter(context.Background(), "dlq", own); err != nil || n != 1 {
		t.Fatalf("SendDeadLetter: %d by reference, %v", n, err)
	}
	d := drv.sent("dlq")[0]
	checkByReference(t, d, fine)
	if _, ok := d.Headers["big"]; ok || d.Headers[HeaderDeadHeadersOmitted] != "1" || d.Headers[HeaderDeadTopic] != "in" {
		t.Errorf("headers of a copy too large without its payload: %v", d.Headers)
	}

	drv.down.Store(true)
	if _, err := b.SendDeadLetter(context.Background(), "small-dlq", &Message{Payload: fine}); !IsUnavailable(err) {
		t.Fatalf("send during an outage: %v", err)
	}
}

// The port's own dead letter (a poison message) that the broker refuses as
// too large goes by reference, with the source position, instead of being
// released to come back for ever.
func TestListenerDeadLetterRefusedGoesByReference(t *testing.T) {
	payload := make([]byte, 800)
	drv := newLimitDriver(10_000, map[string]int{"dlq": 600}, payload)
	b := startDriver(t, drv, prometheus.NewRegistry())
	l, err := b.Listen(context.Background(), Subscription{Topic: "in", Group: "g", DeadLetterTopic: "dlq"},
		func(context.Context, *Delivery) error { return Poison(errors.New("bad")) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Stop(context.Background()) })
	deadline := time.Now().Add(10 * time.Second)
	for len(drv.sent("dlq")) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no dead letter; %d attempts, %d releases", drv.attempts.Load(), drv.released.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	m := drv.sent("dlq")[0]
	checkByReference(t, m, payload)
	if m.Headers[HeaderDeadPartition] != "3" || m.Headers[HeaderDeadOffset] != "42" || m.Headers[HeaderDeadTopic] != "in" || m.Headers["own"] != "header" {
		t.Errorf("headers %v", m.Headers)
	}
	if n := drv.released.Load(); n != 0 {
		t.Errorf("released %d times", n)
	}
}

// A dead letter while the broker is down waits for it: it is neither given
// up nor released (which would only bring the message back to fail the
// same way), and a stop during the wait returns at once.
func TestListenerDeadLetterWaitsForTheBroker(t *testing.T) {
	drv := newLimitDriver(10_000, nil, []byte("x"))
	drv.down.Store(true)
	b := startDriver(t, drv, prometheus.NewRegistry())
	l, err := b.Listen(context.Background(), Subscription{Topic: "in", Group: "g", DeadLetterTopic: "dlq"},
		func(context.Context, *Delivery) error { return Poison(errors.New("bad")) })
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for drv.attempts.Load() < 10 { // well past the settle retry's 3 attempts
		if time.Now().After(deadline) {
			t.Fatalf("%d dead-letter attempts", drv.attempts.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := drv.released.Load(); n != 0 {
		t.Fatalf("released %d times during the outage", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	_ = l.Stop(ctx)
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("stop took %v", d)
	}
	if len(drv.sent("dlq")) != 0 || drv.released.Load() != 0 {
		t.Fatal("settled during the outage")
	}
}

// A handler that gives up waiting because its listener stops (Stopping,
// ErrStopping) leaves its delivery unsettled, and the stop does not wait for
// its deadline (decide's own cases are in TestDecide).
func TestStoppingLeavesTheDeliveryUnsettled(t *testing.T) {
	drv := newLimitDriver(10_000, nil, []byte("x"))
	b := startDriver(t, drv, prometheus.NewRegistry())
	entered := make(chan struct{})
	ln, err := b.Listen(context.Background(), Subscription{Topic: "in", Group: "g"}, func(ctx context.Context, _ *Delivery) error {
		close(entered)
		<-Stopping(ctx)
		return ErrStopping
	})
	if err != nil {
		t.Fatal(err)
	}
	waitChan(t, entered, "the handler")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	_ = ln.Stop(ctx)
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("stop took %v", d)
	}
	if len(drv.sent("in")) != 0 || drv.released.Load() != 0 {
		t.Fatal("the delivery was requeued or released")
	}
	if Stopping(context.Background()) != nil {
		t.Fatal("Stopping outside a handler is not nil")
	}
}
