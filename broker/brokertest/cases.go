package brokertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/msgx/msgx/backoff"
	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/broker/driver"
)

var errTransient = errors.New("transient failure")

// waitEntered waits until a handler signals on entered.
func waitEntered(t *testing.T, entered <-chan struct{}) {
	t.Helper()
	select {
	case <-entered:
	case <-time.After(timeout()):
		t.Fatal("handler never entered")
	}
}

func caseConfirmedPublish(t *testing.T, s *suite) {
	b := s.start(t)
	topic := s.topic(t, "confirm")
	c := newCollector(nil)
	// Create the group first so brokers that route only to existing queues keep it.
	l := listen(t, b, broker.Subscription{Topic: topic, Group: "g"}, c.handle)
	send(t, b, topic, msg("k", "m1"))
	c.waitCount(t, "m1", 1)
	stopListener(t, l, 5*time.Second)

	if err := b.SendConfirmed(ctxT(t), s.h.RefusedTopic(), msg("k", "refused")); err == nil {
		t.Errorf("SendConfirmed to refused topic %q returned nil", s.h.RefusedTopic())
	} else if code := broker.Code(err); code != broker.Rejected {
		t.Errorf("SendConfirmed to refused topic %q: class %v, want %v: %v", s.h.RefusedTopic(), code, broker.Rejected, err)
	}

	// With every byte from the broker late, a confirmed send takes at least
	// that long: it waits for the confirm.
	if nw, ok := s.h.(Network); ok {
		const latency = 300 * time.Millisecond
		restore, err := nw.Latency(ctxT(t), latency)
		if err != nil {
			t.Fatalf("latency: %v", err)
		}
		start := time.Now()
		err = b.SendConfirmed(ctxT(t), topic, msg("k", "slow-confirm"))
		took := time.Since(start)
		restore()
		if err != nil {
			t.Errorf("SendConfirmed with a slow network: %v", err)
		} else if took < latency {
			t.Errorf("SendConfirmed returned after %v, before the confirm could arrive (every byte takes %v)", took, latency)
		}
	} else {
		t.Logf("%s: no network between driver and broker to slow down", s.h.Name())
	}

	restore, err := s.h.Outage(ctxT(t))
	if err != nil {
		t.Fatalf("outage: %v", err)
	}
	defer restore()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := b.SendConfirmed(ctx, topic, msg("k", "down")); err == nil {
		t.Errorf("SendConfirmed while the broker is unreachable returned nil")
	}
}

func caseRoundTrip(t *testing.T, s *suite) {
	b := s.start(t)
	topic := s.topic(t, "roundtrip")
	c := newCollector(nil)
	listen(t, b, broker.Subscription{Topic: topic, Group: "g"}, c.handle)
	payload := []byte{0x00, 0xff, 0xfe, 'a', 0x80, 0xc3, 0x28, 0x00, '\n'}
	headers := map[string]string{
		broker.HeaderType:          "flight.update",
		broker.HeaderRequestID:     "req-1",
		broker.HeaderTenantID:      "tenant-7",
		broker.HeaderCorrelationID: "corr-9",
		broker.HeaderPartitionKey:  "FLID-42",
		broker.HeaderEventID:       "ev-round",
		"x-custom":                 "Ünïcødé ✓",
	}
	send(t, b, topic, &broker.Message{Key: "FLID-42", Payload: payload, Headers: headers})
	c.waitCount(t, "ev-round", 1)
	d := c.order[0]
	if !bytes.Equal(d.Payload, payload) {
		t.Errorf("payload = %x, want %x", d.Payload, payload)
	}
	if d.Key != "FLID-42" {
		t.Errorf("key = %q, want FLID-42", d.Key)
	}
	for k, v := range headers {
		if got := d.Header(k); got != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
	if d.RedeliveryCount != 0 {
		t.Errorf("redelivery count = %d on first delivery", d.RedeliveryCount)
	}
	if len(d.Headers) != len(headers) {
		t.Errorf("headers = %v, want exactly %v", d.Headers, headers)
	}
}

// controlHeaders are the port's steering headers no handler may see.
var controlHeaders = []string{broker.HeaderRedeliveryCount, broker.HeaderNotBefore, broker.HeaderForGroup}

// caseForwardedDelivery: a handler forwards a requeued, delayed delivery as
// it received it; the forwarded copy steers nothing. Every group of the
// destination gets it, first time, and no handler ever sees a control
// header, not even one the sender set.
func caseForwardedDelivery(t *testing.T, s *suite) {
	b := s.start(t)
	src := s.topic(t, "fwd-src")
	dst := s.topic(t, "fwd-dst")
	var leaked atomic.Int64
	checkClean := func(d *broker.Delivery) {
		for _, h := range controlHeaders {
			if _, ok := d.Headers[h]; ok {
				leaked.Add(1)
				t.Errorf("handler of %s/%s saw control header %s=%q", d.Topic, d.Group, h, d.Headers[h])
			}
		}
	}
	x := newCollector(func(d *broker.Delivery) error { checkClean(d); return nil })
	y := newCollector(func(d *broker.Delivery) error { checkClean(d); return nil })
	listen(t, b, broker.Subscription{Topic: dst, Group: "x"}, x.handle)
	listen(t, b, broker.Subscription{Topic: dst, Group: "y"}, y.handle)
	fwd := newCollector(func(d *broker.Delivery) error {
		checkClean(d)
		if d.RedeliveryCount == 0 {
			return errTransient // requeued: the copy carries for-group, count and not-before
		}
		return b.SendConfirmed(context.Background(), dst, &d.Message)
	})
	listen(t, b, broker.Subscription{Topic: src, Group: "fwd", Retry: fastRetry(5)}, fwd.handle)
	send(t, b, src, msg("k", "forwarded"))
	x.waitCount(t, "forwarded", 1)
	y.waitCount(t, "forwarded", 1)
	for _, c := range []*collector{x, y} {
		c.mu.Lock()
		if n := c.order[0].RedeliveryCount; n != 0 {
			t.Errorf("forwarded copy arrived with redelivery count %d, want 0", n)
		}
		c.mu.Unlock()
	}

	// Control headers set by a sender are dropped too.
	forged := msg("k", "forged")
	forged.SetHeader(broker.HeaderForGroup, "nobody")
	forged.SetHeader(broker.HeaderRedeliveryCount, "7")
	forged.SetHeader(broker.HeaderNotBefore, strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10))
	send(t, b, dst, forged)
	x.waitCount(t, "forged", 1)
	y.waitCount(t, "forged", 1)
	if forged.Header(broker.HeaderForGroup) != "nobody" {
		t.Errorf("send changed the caller's message headers")
	}
	if leaked.Load() != 0 {
		t.Errorf("%d deliveries showed control headers", leaked.Load())
	}
}

func caseCompletionBeforeAck(t *testing.T, s *suite) {
	b1 := s.start(t)
	topic := s.topic(t, "completion")
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	defer close(release)
	blocking := func(ctx context.Context, d *broker.Delivery) error {
		entered <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return ctx.Err()
	}
	l1 := listen(t, b1, broker.Subscription{Topic: topic, Group: "g"}, blocking)
	send(t, b1, topic, msg("k", "blocked"))
	waitEntered(t, entered)
	stopListener(t, l1, 200*time.Millisecond)
	stopBroker(t, b1)

	b2 := s.start(t)
	c := newCollector(nil)
	listen(t, b2, broker.Subscription{Topic: topic, Group: "g"}, c.handle)
	c.waitCount(t, "blocked", 1)
}

func caseRequeue(t *testing.T, s *suite) {
	b := s.start(t)
	topic := s.topic(t, "requeue")
	var counts []int
	var mu sync.Mutex
	c := newCollector(func(d *broker.Delivery) error {
		if d.Header(broker.HeaderEventID) != "rq" {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		counts = append(counts, d.RedeliveryCount)
		if len(counts) < 4 {
			return errTransient
		}
		return nil
	})
	listen(t, b, broker.Subscription{Topic: topic, Group: "g", Retry: fastRetry(10)}, c.handle)
	send(t, b, topic, msg("k", "rq"))
	c.waitCount(t, "rq", 4)
	quiet()
	mu.Lock()
	defer mu.Unlock()
	want := []int{0, 1, 2, 3}
	if fmt.Sprint(counts) != fmt.Sprint(want) {
		t.Errorf("redelivery counts = %v, want %v", counts, want)
	}
}

// dlq starts reading a dead-letter topic, in the group adapters keep dead
// letters for (driver.DeadLetterGroup). The cases start it only after the
// dead letters were sent: nothing may depend on a reader being there first.
func dlq(t *testing.T, b *broker.Broker, topic string) *collector {
	c := newCollector(nil)
	listen(t, b, broker.Subscription{Topic: topic, Group: driver.DeadLetterGroup}, c.handle)
	return c
}

func casePoison(t *testing.T, s *suite) {
	b := s.start(t)
	topic := s.topic(t, "poison")
	c := newCollector(func(d *broker.Delivery) error {
		if d.Header(broker.HeaderEventID) == "bad" {
			return broker.Poison(errors.New("schema violation: no FLID"))
		}
		return nil
	})
	l := listen(t, b, broker.Subscription{Topic: topic, Group: "g"}, c.handle)
	send(t, b, topic, msg("k", "bad"))
	c.waitCount(t, "bad", 1)
	stopListener(t, l, 5*time.Second) // its settlement is done: the dead letter was sent
	dead := dlq(t, b, topic+".dlq")
	dead.waitCount(t, "bad", 1)
	d := dead.order[0]
	if got := d.Header(broker.HeaderDeadClass); got != "poison" {
		t.Errorf("dead class = %q, want poison", got)
	}
	if got := d.Header(broker.HeaderDeadReason); !strings.Contains(got, "schema violation") {
		t.Errorf("dead reason = %q, want the handler's error", got)
	}
	if got := d.Header(broker.HeaderDeadTopic); got != topic {
		t.Errorf("dead topic header = %q, want %q", got, topic)
	}
	listen(t, b, broker.Subscription{Topic: topic, Group: "g"}, c.handle)
	quiet()
	if n := c.count("bad"); n != 1 {
		t.Errorf("poison message handled %d times, want 1", n)
	}
}

func caseDeadLetterFailure(t *testing.T, s *suite) {
	b1 := s.start(t)
	topic := s.topic(t, "dlfail")
	c1 := newCollector(func(d *broker.Delivery) error {
		if d.Header(broker.HeaderEventID) == "dl" {
			return broker.Poison(errors.New("bad schema"))
		}
		return nil
	})
	l1 := listen(t, b1, broker.Subscription{Topic: topic, Group: "g", DeadLetterTopic: s.h.RefusedTopic()}, c1.handle)
	send(t, b1, topic, msg("k", "dl"))
	c1.waitCount(t, "dl", 1)
	waitEvent(t, b1, "failed dead-letter settlement", func(e broker.Event) bool { return e.Err != nil && strings.Contains(e.Err.Error(), "dead_letter") })
	// The running consumer keeps consuming.
	send(t, b1, topic, msg("other", "after"))
	c1.waitCount(t, "after", 1)
	stopListener(t, l1, 2*time.Second)
	stopBroker(t, b1)

	// Not acked: a new consumer of the group gets it again.
	b2 := s.start(t)
	c2 := newCollector(nil)
	listen(t, b2, broker.Subscription{Topic: topic, Group: "g"}, c2.handle)
	c2.waitCount(t, "dl", 1)
}

func caseRetryExhaustion(t *testing.T, s *suite) {
	const n = 3
	b := s.start(t)
	topic := s.topic(t, "exhaust")
	c := newCollector(func(d *broker.Delivery) error {
		if d.Header(broker.HeaderEventID) == "always" {
			return errTransient
		}
		return nil
	})
	l := listen(t, b, broker.Subscription{Topic: topic, Group: "g", Retry: fastRetry(n)}, c.handle)
	send(t, b, topic, msg("k", "always"))
	c.waitCount(t, "always", n)
	stopListener(t, l, 5*time.Second) // the last settlement is done
	dead := dlq(t, b, topic+".dlq")
	dead.waitCount(t, "always", 1)
	listen(t, b, broker.Subscription{Topic: topic, Group: "g", Retry: fastRetry(n)}, c.handle)
	quiet()
	if got := c.count("always"); got != n {
		t.Errorf("handler called %d times, want exactly %d", got, n)
	}
	d := dead.order[0]
	if got := d.Header(broker.HeaderDeadClass); got != "exhausted" {
		t.Errorf("dead class = %q, want exhausted", got)
	}
	if got := d.Header(broker.HeaderDeadAttempts); got != strconv.Itoa(n) {
		t.Errorf("dead attempts = %q, want %d", got, n)
	}
}

func caseCancellation(t *testing.T, s *suite) {
	b1 := s.start(t)
	topic := s.topic(t, "cancel")
	entered := make(chan struct{}, 1)
	var mu sync.Mutex
	var wrappedCounts []int
	c1 := newCollector(nil)
	l1 := listen(t, b1, broker.Subscription{Topic: topic, Group: "g"}, func(ctx context.Context, d *broker.Delivery) error {
		if d.Header(broker.HeaderEventID) == "wrapped" {
			// An error that merely wraps context.Canceled while the listener
			// runs is an ordinary failure: requeued, never held. The count
			// is recorded before the collector counts the delivery, which
			// is what the test waits for.
			mu.Lock()
			wrappedCounts = append(wrappedCounts, d.RedeliveryCount)
			first := len(wrappedCounts) == 1
			mu.Unlock()
			_ = c1.handle(ctx, d)
			if first {
				return fmt.Errorf("db call abandoned: %w", context.Canceled)
			}
			return nil
		}
		_ = c1.handle(ctx, d)
		switch d.Header(broker.HeaderEventID) {
		case "cx":
			entered <- struct{}{}
			<-ctx.Done() // cancelled by the listener's stop
			return fmt.Errorf("work abandoned: %w", ctx.Err())
		}
		return nil
	})
	send(t, b1, topic, msg("k", "wrapped"))
	c1.waitCount(t, "wrapped", 2)
	mu.Lock()
	if fmt.Sprint(wrappedCounts) != "[0 1]" {
		t.Errorf("redelivery counts of a handler error wrapping context.Canceled = %v, want [0 1] (an ordinary requeue)", wrappedCounts)
	}
	mu.Unlock()

	send(t, b1, topic, msg("k", "cx"))
	waitEntered(t, entered)
	stopListener(t, l1, 200*time.Millisecond)

	b2 := s.start(t)
	c2 := newCollector(nil)
	listen(t, b2, broker.Subscription{Topic: topic, Group: "g"}, c2.handle)
	c2.waitCount(t, "cx", 1)
	dead := dlq(t, b2, topic+".dlq")
	quiet()
	if n := c1.count("cx") + c2.count("cx"); n != 2 {
		t.Errorf("cancelled message handled %d times in total, want 2 (no requeue copy)", n)
	}
	if dead.count("cx") != 0 {
		t.Errorf("cancelled message was dead-lettered")
	}
}

func caseConflict(t *testing.T, s *suite) {
	b1 := s.start(t)
	topic := s.topic(t, "conflict")
	entered := make(chan struct{}, 1)
	l1 := listen(t, b1, broker.Subscription{Topic: topic, Group: "g"}, func(ctx context.Context, d *broker.Delivery) error {
		entered <- struct{}{}
		<-ctx.Done()
		// Poison and cancelled at once: two dispositions.
		return errors.Join(broker.Poison(errors.New("bad")), ctx.Err())
	})
	send(t, b1, topic, msg("k", "cf"))
	waitEntered(t, entered)
	stopListener(t, l1, 200*time.Millisecond)
	waitEvent(t, b1, "conflicting disposition", func(e broker.Event) bool { return errors.Is(e.Err, broker.ErrConflictingDisposition) })

	// Nothing was settled: neither acked nor dead-lettered.
	b2 := s.start(t)
	c2 := newCollector(nil)
	listen(t, b2, broker.Subscription{Topic: topic, Group: "g"}, c2.handle)
	c2.waitCount(t, "cf", 1)
	dead := dlq(t, b2, topic+".dlq")
	quiet()
	if dead.count("cf") != 0 {
		t.Errorf("conflicting message was dead-lettered")
	}

	settlesOnce(t, s)
}

// settlesOnce checks the adapter's own guard: the port never settles twice,
// but if anything did, the second settlement of a delivery is refused with
// an error and the subscription goes on working.
func settlesOnce(t *testing.T, s *suite) {
	ctx := ctxT(t)
	drv, err := s.h.NewDriver(ctx)
	if err != nil {
		t.Fatalf("new driver: %v", err)
	}
	if err := drv.Start(ctx); err != nil {
		t.Fatalf("start driver: %v", err)
	}
	defer drv.Close(context.Background())
	topic := s.topic(t, "settle-once")
	sub, err := drv.Subscribe(ctx, driver.SubscriptionSpec{Topic: topic, Group: "g", DeadLetterTopic: topic + ".dlq", Prefetch: 4})
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	defer sub.Close(context.Background())
	next := func(id string) driver.Delivery {
		t.Helper()
		if err := drv.Publish(ctx, topic, []*driver.Message{{Key: "k", Payload: []byte(id), Headers: map[string]string{broker.HeaderEventID: id}}}); err != nil {
			t.Fatalf("publish %s: %v", id, err)
		}
		for {
			ds, err := sub.Receive(ctx, 1)
			if err != nil {
				t.Fatalf("receive %s: %v", id, err)
			}
			if len(ds) > 0 && ds[0].Message().Headers[broker.HeaderEventID] == id {
				return ds[0]
			}
		}
	}
	d := next("once")
	if err := d.Ack(ctx); err != nil {
		t.Fatalf("first ack: %v", err)
	}
	if err := d.Ack(ctx); err == nil {
		t.Error("a second Ack of a delivery returned nil")
	}
	m := d.Message()
	if err := d.Requeue(ctx, m, 0); err == nil {
		t.Error("Requeue of an acknowledged delivery returned nil")
	}
	if err := d.DeadLetter(ctx, m); err == nil {
		t.Error("DeadLetter of an acknowledged delivery returned nil")
	}
	if err := d.Release(ctx, m, 0); err == nil {
		t.Error("Release of an acknowledged delivery returned nil")
	}
	if err := next("after").Ack(ctx); err != nil {
		t.Errorf("the subscription broke after the refused settlements: %v", err)
	}
}

// caseFailingSettlement: two poison messages whose dead-letter publish keeps
// failing must not stop a consumer whose window holds two: each failed
// settlement is released to the broker, and later messages are handled.
func caseFailingSettlement(t *testing.T, s *suite) {
	b := s.start(t)
	topic := s.topic(t, "stall")
	c := newCollector(func(d *broker.Delivery) error {
		if strings.HasPrefix(d.Header(broker.HeaderEventID), "poison") {
			return broker.Poison(errors.New("bad schema"))
		}
		return nil
	})
	// A window of two: two held deliveries would fill it.
	sub := broker.Subscription{Topic: topic, Group: "g", DeadLetterTopic: s.h.RefusedTopic(), Prefetch: 1, MaxParked: 1}
	listen(t, b, sub, c.handle)
	send(t, b, topic, msg("k1", "poison-1"), msg("k2", "poison-2"))
	c.waitCount(t, "poison-1", 1)
	c.waitCount(t, "poison-2", 1)
	var good []*broker.Message
	for i := range 5 {
		good = append(good, msg(fmt.Sprintf("g%d", i), fmt.Sprintf("good-%d", i)))
	}
	send(t, b, topic, good...)
	for i := range 5 {
		c.waitCount(t, fmt.Sprintf("good-%d", i), 1)
	}
	// The poison messages were given back, not held: they came again.
	c.waitCount(t, "poison-1", 2)
	c.waitCount(t, "poison-2", 2)
	waitEvent(t, b, "a released delivery", func(e broker.Event) bool {
		return e.Err != nil && strings.Contains(e.Err.Error(), "released")
	})
}

func caseLoadBalance(t *testing.T, s *suite) {
	const n = 1000
	b1, b2 := s.start(t), s.start(t)
	topic := s.topic(t, "lb")
	c := newCollector(nil)
	var got1, got2 atomic.Int64
	l1 := listen(t, b1, broker.Subscription{Topic: topic, Group: "g", Concurrency: 4}, func(ctx context.Context, d *broker.Delivery) error {
		got1.Add(1)
		return c.handle(ctx, d)
	})
	l2 := listen(t, b2, broker.Subscription{Topic: topic, Group: "g", Concurrency: 4}, func(ctx context.Context, d *broker.Delivery) error {
		got2.Add(1)
		return c.handle(ctx, d)
	})
	sendMany(t, b1, topic, n, 16, "lb")
	c.waitDistinct(t, n)
	// A member that joined late (a rebalance takes a while on some brokers)
	// must get its share of what follows.
	deadline := time.Now().Add(timeout())
	for extra := n; got1.Load() == 0 || got2.Load() == 0; extra += 100 {
		if time.Now().After(deadline) {
			t.Fatalf("consumers handled %d and %d messages: the group did not share them", got1.Load(), got2.Load())
		}
		sendMany(t, b1, topic, 100, 16, fmt.Sprintf("lb-%d", extra))
		c.waitDistinct(t, extra+100)
	}
	stopListener(t, l1, 5*time.Second)
	stopListener(t, l2, 5*time.Second)
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, k := range c.seen {
		if k != 1 {
			t.Errorf("message %s handled %d times, want exactly once", id, k)
		}
	}
}

// sendMany sends n messages over keys keys in batches, ids prefix-<i>.
func sendMany(t *testing.T, b *broker.Broker, topic string, n, keys int, prefix string) {
	t.Helper()
	const batch = 500
	for i := 0; i < n; i += batch {
		var ms []*broker.Message
		for j := i; j < min(i+batch, n); j++ {
			ms = append(ms, msg(fmt.Sprintf("key-%d", j%keys), fmt.Sprintf("%s-%d", prefix, j)))
		}
		send(t, b, topic, ms...)
	}
}

func caseBroadcast(t *testing.T, s *suite) {
	const n = 100
	b := s.start(t)
	topic := s.topic(t, "bcast")
	ca, cb := newCollector(nil), newCollector(nil)
	listen(t, b, broker.Subscription{Topic: topic, Group: "ga"}, ca.handle)
	listen(t, b, broker.Subscription{Topic: topic, Group: "gb"}, cb.handle)
	sendMany(t, b, topic, n, 4, "bc")
	ca.waitDistinct(t, n)
	cb.waitDistinct(t, n)
}

func caseKeyOrder(t *testing.T, s *suite) {
	const keys, per = 100, 50
	b := s.start(t)
	topic := s.topic(t, "order")
	var mu sync.Mutex
	last := map[string]int{}
	var violations atomic.Int64
	c := newCollector(func(d *broker.Delivery) error {
		seq, _ := strconv.Atoi(d.Header("seq"))
		mu.Lock()
		prev, ok := last[d.Key]
		if (ok && seq != prev+1) || (!ok && seq != 0) {
			violations.Add(1)
		}
		last[d.Key] = seq
		mu.Unlock()
		return nil
	})
	listen(t, b, broker.Subscription{Topic: topic, Group: "g", Concurrency: 8}, c.handle)
	for i := 0; i < per; i++ {
		ms := make([]*broker.Message, 0, keys)
		for k := 0; k < keys; k++ {
			m := msg(fmt.Sprintf("key-%d", k), fmt.Sprintf("o-%d-%d", k, i))
			m.SetHeader("seq", strconv.Itoa(i))
			ms = append(ms, m)
		}
		send(t, b, topic, ms...)
	}
	c.waitDistinct(t, keys*per)
	if v := violations.Load(); v != 0 {
		t.Errorf("%d per-key order violations", v)
	}
}

func caseOutOfOrderCompletion(t *testing.T, s *suite) {
	const n = 20
	b1 := s.start(t)
	topic := s.topic(t, "ooo")
	stuck := make(chan struct{})
	c1 := newCollector(nil)
	h1 := func(ctx context.Context, d *broker.Delivery) error {
		_ = c1.handle(ctx, d)
		if d.Header(broker.HeaderEventID) == "ooo-5" {
			close(stuck)
			<-ctx.Done() // never completes until the listener gives up on it
			return ctx.Err()
		}
		return nil
	}
	l1 := listen(t, b1, broker.Subscription{Topic: topic, Group: "g", Concurrency: 8}, h1)
	// No keys: the port runs unkeyed messages concurrently, so completions come
	// back out of order within a partition.
	var ms []*broker.Message
	for i := 0; i < n; i++ {
		ms = append(ms, &broker.Message{Payload: []byte{byte(i)}, Headers: map[string]string{broker.HeaderEventID: fmt.Sprintf("ooo-%d", i)}})
	}
	send(t, b1, topic, ms...)
	select {
	case <-stuck:
	case <-time.After(timeout()):
		t.Fatal("message 5 never reached the handler")
	}
	c1.waitDistinct(t, n)
	stopListener(t, l1, 500*time.Millisecond)
	stopBroker(t, b1)

	b2 := s.start(t)
	c2 := newCollector(nil)
	listen(t, b2, broker.Subscription{Topic: topic, Group: "g", Concurrency: 8}, c2.handle)
	c2.waitCount(t, "ooo-5", 1)
	quiet()
	// Everything before the unfinished message was settled: never again.
	for i := range 5 {
		if k := c2.count(fmt.Sprintf("ooo-%d", i)); k != 0 {
			t.Errorf("ooo-%d, settled before the unfinished ooo-5, was redelivered %d times", i, k)
		}
	}
}

func caseBatch(t *testing.T, s *suite) {
	const n = 10
	b := s.start(t)
	topic := s.topic(t, "batch")
	var mu sync.Mutex
	calls := 0
	var first []string
	seen := map[string]int{}
	changed := make(chan struct{}, 1)
	h := func(ctx context.Context, ds []*broker.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		calls++
		for _, d := range ds {
			seen[d.Header(broker.HeaderEventID)]++
		}
		select {
		case changed <- struct{}{}:
		default:
		}
		if calls == 1 {
			for _, d := range ds {
				first = append(first, d.Header(broker.HeaderEventID))
			}
			return errTransient
		}
		return nil
	}
	if _, err := b.ListenBatch(ctxT(t), broker.Subscription{Topic: topic, Group: "g", BatchSize: n, Retry: fastRetry(10)}, h); err != nil {
		t.Fatalf("listen batch: %v", err)
	}
	sendMany(t, b, topic, n, 1, "bt")
	deadline := time.After(timeout())
	for done := false; !done; {
		mu.Lock()
		done = len(seen) == n && len(first) > 0
		for _, id := range first {
			if seen[id] < 2 {
				done = false
			}
		}
		mu.Unlock()
		if done {
			break
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("timed out: failed batch %v not redelivered whole (seen %v)", first, seen)
		}
	}
	// A sentinel after the acked batches must arrive with nothing redelivered again.
	send(t, b, topic, msg("key-0", "bt-sentinel"))
	for {
		mu.Lock()
		got := seen["bt-sentinel"]
		mu.Unlock()
		if got > 0 {
			break
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatal("timed out waiting for the sentinel")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	inFirst := map[string]bool{}
	for _, id := range first {
		inFirst[id] = true
	}
	for id, k := range seen {
		want := 1
		if inFirst[id] {
			want = 2
		}
		if k != want {
			t.Errorf("message %s handled %d times, want %d", id, k, want)
		}
	}
}

func caseDurableBacklog(t *testing.T, s *suite) {
	const n = 50
	b := s.start(t)
	topic := s.topic(t, "backlog")
	c0 := newCollector(nil)
	l0 := listen(t, b, broker.Subscription{Topic: topic, Group: "g"}, c0.handle)
	stopListener(t, l0, 5*time.Second)

	sendMany(t, b, topic, n, 5, "bl")
	c := newCollector(nil)
	b2 := s.start(t)
	listen(t, b2, broker.Subscription{Topic: topic, Group: "g"}, c.handle)
	c.waitDistinct(t, n)
}

func caseDelay(t *testing.T, s *suite) {
	const delay = 700 * time.Millisecond
	b := s.start(t)
	topic := s.topic(t, "delay")
	var got atomic.Int64
	c := newCollector(func(d *broker.Delivery) error {
		if d.Header(broker.HeaderEventID) == "late" {
			got.Store(time.Now().UnixNano())
		}
		return nil
	})
	listen(t, b, broker.Subscription{Topic: topic, Group: "g"}, c.handle)
	sent := time.Now()
	if err := b.SendDelayed(ctxT(t), topic, delay, msg("k", "late")); err != nil {
		t.Fatalf("send delayed: %v", err)
	}
	c.waitFor(t, "delayed message", func() bool { return got.Load() != 0 })
	if early := time.Unix(0, got.Load()).Sub(sent); early < delay {
		t.Errorf("delivered after %v, want no earlier than %v", early, delay)
	}
}

// caseDelayOtherKeys: a delayed message and a requeue waiting for its
// backoff do not hold up other keys, even with one handler at a time.
func caseDelayOtherKeys(t *testing.T, s *suite) {
	const delay = 2 * time.Second
	b := s.start(t)
	topic := s.topic(t, "delaykeys")
	var mu sync.Mutex
	at := map[string][]time.Time{}
	c := newCollector(func(d *broker.Delivery) error {
		id := d.Header(broker.HeaderEventID)
		mu.Lock()
		defer mu.Unlock()
		at[id] = append(at[id], time.Now())
		if id == "retry" && len(at[id]) == 1 {
			return errTransient
		}
		return nil
	})
	retry := backoff.Policy{MaxAttempts: 5, Initial: delay, Max: delay}
	listen(t, b, broker.Subscription{Topic: topic, Group: "g", Retry: retry}, c.handle)
	send(t, b, topic, msg("k-retry", "retry"))
	c.waitCount(t, "retry", 1)
	if err := b.SendDelayed(ctxT(t), topic, delay, msg("k-late", "late")); err != nil {
		t.Fatalf("send delayed: %v", err)
	}
	send(t, b, topic, msg("k-other", "other"))
	c.waitCount(t, "other", 1)
	c.waitCount(t, "late", 1)
	c.waitCount(t, "retry", 2)
	mu.Lock()
	defer mu.Unlock()
	other := at["other"][0]
	if !other.Before(at["late"][0]) {
		t.Errorf("another key waited for a delayed message: handled %v after it", other.Sub(at["late"][0]))
	}
	if !other.Before(at["retry"][1]) {
		t.Errorf("another key waited for a requeue's backoff: handled %v after it", other.Sub(at["retry"][1]))
	}
}

// caseCountAfterCrash: a consumer dies while its handler runs (its
// subscription goes away unsettled). The redelivery count the next consumer
// sees includes that attempt where the adapter declares CountsRedeliveries,
// and is unchanged otherwise; a failure after it counts one more either way.
func caseCountAfterCrash(t *testing.T, s *suite) {
	b1 := s.start(t)
	topic := s.topic(t, "crashcount")
	entered := make(chan struct{}, 1)
	l1 := listen(t, b1, broker.Subscription{Topic: topic, Group: "g"}, func(ctx context.Context, d *broker.Delivery) error {
		entered <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	})
	send(t, b1, topic, msg("k", "crash"))
	waitEntered(t, entered)
	stopListener(t, l1, 100*time.Millisecond)
	stopBroker(t, b1)

	want := 0
	if s.caps.CountsRedeliveries {
		want = 1
	}
	b2 := s.start(t)
	var mu sync.Mutex
	var counts []int
	c := newCollector(func(d *broker.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		counts = append(counts, d.RedeliveryCount)
		if len(counts) == 1 {
			return errTransient
		}
		return nil
	})
	listen(t, b2, broker.Subscription{Topic: topic, Group: "g", Retry: fastRetry(10)}, c.handle)
	c.waitCount(t, "crash", 2)
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(counts) != fmt.Sprint([]int{want, want + 1}) {
		t.Errorf("redelivery counts after a crash = %v, want %v (CountsRedeliveries %v)", counts, []int{want, want + 1}, s.caps.CountsRedeliveries)
	}
}

func caseBurst(t *testing.T, s *suite) {
	n := s.opts.BurstN
	b := s.start(t)
	topic := s.topic(t, "burst")
	c := newCollector(nil)
	listen(t, b, broker.Subscription{Topic: topic, Group: "g", Concurrency: 16, Prefetch: 512}, c.handle)
	sendMany(t, b, topic, n, 64, "bu")
	c.waitDistinct(t, n)
}

func caseGracefulStop(t *testing.T, s *suite) {
	topic := s.topic(t, "graceful")

	// (a) Stop waits for a handler that finishes within the grace period: it is acked.
	b1 := s.start(t)
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	c1 := newCollector(nil)
	l1 := listen(t, b1, broker.Subscription{Topic: topic, Group: "g"}, func(ctx context.Context, d *broker.Delivery) error {
		_ = c1.handle(ctx, d)
		if d.Header(broker.HeaderEventID) == "slow" {
			entered <- struct{}{}
			<-release
		}
		return nil
	})
	send(t, b1, topic, msg("k", "slow"))
	<-entered
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout())
		defer cancel()
		stopped <- l1.Stop(ctx)
	}()
	close(release)
	if err := <-stopped; err != nil {
		t.Errorf("stop: %v", err)
	}
	stopBroker(t, b1)

	// (b) A handler that outlives the grace period is cancelled and not settled.
	b2 := s.start(t)
	cancelled := make(chan struct{})
	c2 := newCollector(nil)
	l2 := listen(t, b2, broker.Subscription{Topic: topic, Group: "g"}, func(ctx context.Context, d *broker.Delivery) error {
		_ = c2.handle(ctx, d)
		if d.Header(broker.HeaderEventID) == "stuck" {
			<-ctx.Done()
			close(cancelled)
			return ctx.Err()
		}
		return nil
	})
	send(t, b2, topic, msg("k", "stuck"))
	c2.waitCount(t, "stuck", 1)
	stopListener(t, l2, 300*time.Millisecond)
	select {
	case <-cancelled:
	case <-time.After(timeout()):
		t.Fatal("handler context was not cancelled after the grace period")
	}
	stopBroker(t, b2)

	b3 := s.start(t)
	c3 := newCollector(nil)
	listen(t, b3, broker.Subscription{Topic: topic, Group: "g"}, c3.handle)
	c3.waitCount(t, "stuck", 1)
	quiet()
	if c3.count("slow") != 0 {
		t.Errorf("message acked during graceful stop was redelivered")
	}
}

// outageFor is how long the reconnect case keeps the broker unreachable,
// and then silent.
const outageFor = 3 * time.Second

// sendUntilConfirmed sends m again until a send is confirmed, for as long as
// the suite's timeout: the adapter reconnects on its own after an outage.
func sendUntilConfirmed(t *testing.T, b *broker.Broker, topic string, m *broker.Message) {
	t.Helper()
	deadline := time.Now().Add(timeout())
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := b.SendConfirmed(ctx, topic, m)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("send %s never succeeded after the network came back: %v", m.Header(broker.HeaderEventID), err)
		}
		<-time.After(50 * time.Millisecond)
	}
}

func caseReconnect(t *testing.T, s *suite) {
	const n = 200
	b := s.start(t)
	topic := s.topic(t, "reconnect")
	c := newCollector(nil)
	listen(t, b, broker.Subscription{Topic: topic, Group: "g", Concurrency: 4}, c.handle)
	sendRetrying := func(from, to int) {
		for i := from; i < to; i++ {
			sendUntilConfirmed(t, b, topic, msg(fmt.Sprintf("key-%d", i%8), fmt.Sprintf("rc-%d", i)))
		}
	}
	sendRetrying(0, n/4)
	c.waitDistinct(t, n/8) // consuming mid-stream

	// An outage of several seconds: every connection closed, new ones refused.
	restore, err := s.h.Outage(ctxT(t))
	if err != nil {
		t.Fatalf("outage: %v", err)
	}
	<-time.After(outageFor)
	restore()
	sendRetrying(n/4, n/2)
	c.waitDistinct(t, n/2)

	// A half-open network: nothing closes, nothing gets through, for several
	// seconds; sends made meanwhile are retried until confirmed.
	if nw, ok := s.h.(Network); ok {
		resume, err := nw.Stall(ctxT(t))
		if err != nil {
			t.Fatalf("stall: %v", err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			<-time.After(outageFor)
			resume()
		}()
		sendRetrying(n/2, 3*n/4)
		<-done
	} else {
		t.Logf("%s: no network between driver and broker to stall", s.h.Name())
		sendRetrying(n/2, 3*n/4)
	}
	sendRetrying(3*n/4, n)
	c.waitDistinct(t, n)
}

func caseLifecycleErrors(t *testing.T, s *suite) {
	ctx := ctxT(t)
	drv, err := s.h.UnreachableDriver(ctx)
	if err != nil {
		t.Fatalf("unreachable driver: %v", err)
	}
	b := broker.New(s.h.Name(), drv)
	startCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	err = b.Start(startCtx)
	if err == nil {
		stopBroker(t, b)
		t.Fatal("Start against an unreachable broker returned nil")
	}
	select {
	case e := <-b.Events():
		if e.Err == nil {
			t.Error("lifecycle event without an error")
		}
	default:
		t.Error("connect failure was not reported on the lifecycle channel")
	}
	if err := b.SendConfirmed(ctx, "any", msg("k", "x")); !errors.Is(err, broker.ErrNotStarted) {
		t.Errorf("SendConfirmed on a broker that failed to start = %v, want ErrNotStarted", err)
	}
}

func caseSubscriptionExpiry(t *testing.T, s *suite) {
	ec, ok := s.h.(ExpiryChecker)
	if !ok {
		t.Fatalf("adapter declares SubscriptionExpiry but its harness cannot check it (implement ExpiryChecker)")
	}
	b := s.start(t)
	topic := s.topic(t, "expiry")
	sub := broker.Subscription{Topic: topic, Group: uniqueName(t, "instance"), Expiry: time.Second}
	c := newCollector(nil)
	l := listen(t, b, sub, c.handle)
	send(t, b, topic, msg("k", "ex"))
	c.waitCount(t, "ex", 1)
	spec := specOf(sub)
	if ok, err := ec.SubscriptionExists(ctxT(t), spec); err != nil || !ok {
		t.Fatalf("subscription should exist while listening: exists=%v err=%v", ok, err)
	}
	stopListener(t, l, 5*time.Second)
	deadline := time.Now().Add(timeout())
	for {
		ok, err := ec.SubscriptionExists(ctxT(t), spec)
		if err != nil {
			t.Fatalf("check subscription: %v", err)
		}
		if !ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("subscription still exists %v after its 1s expiry", timeout())
		}
		// The broker's own TTL timer decides; poll it at a modest rate.
		<-time.After(100 * time.Millisecond)
	}
}

// outageSendBound is the deadline of the send the outage case makes while
// the broker is cut off; the send must fail as Unavailable by then.
const outageSendBound = 5 * time.Second

// caseOutageUnavailable: while the broker is cut off, a confirmed send fails
// within a bounded time as Unavailable (the broker's state, not the
// message's: a caller waits instead of charging the message an attempt), and
// once the broker is back the adapter reconnects and sends go through.
func caseOutageUnavailable(t *testing.T, s *suite) {
	b := s.start(t)
	topic := s.topic(t, "unavailable")
	c := newCollector(nil)
	listen(t, b, broker.Subscription{Topic: topic, Group: "g"}, c.handle)
	send(t, b, topic, msg("k", "before-outage"))
	c.waitCount(t, "before-outage", 1)

	restore, err := s.h.Outage(ctxT(t))
	if err != nil {
		t.Fatalf("outage: %v", err)
	}
	var once sync.Once
	end := func() { once.Do(restore) }
	defer end()
	ctx, cancel := context.WithTimeout(context.Background(), outageSendBound)
	start := time.Now()
	err = b.SendConfirmed(ctx, topic, msg("k", "during-outage"))
	took := time.Since(start)
	cancel()
	switch {
	case err == nil:
		t.Errorf("SendConfirmed while the broker is unreachable returned nil")
	case broker.Code(err) != broker.Unavailable:
		t.Errorf("SendConfirmed while the broker is unreachable: class %v, want %v: %v", broker.Code(err), broker.Unavailable, err)
	}
	if limit := outageSendBound + time.Second; took > limit {
		t.Errorf("SendConfirmed while the broker is unreachable took %v, want at most %v", took, limit)
	}
	end()
	sendUntilConfirmed(t, b, topic, msg("k", "after-outage"))
	c.waitCount(t, "after-outage", 1)
}

// caseOversizedRejected: a message over the size limit is Rejected (sending
// it again fails the same way), is never delivered, and leaves the adapter
// able to send the next message.
func caseOversizedRejected(t *testing.T, s *suite) {
	b := s.start(t)
	topic := s.topic(t, "oversized")
	c := newCollector(nil)
	listen(t, b, broker.Subscription{Topic: topic, Group: "g"}, c.handle)
	big := msg("k", "oversized")
	big.Payload = bytes.Repeat([]byte{'x'}, s.h.MaxMessageBytes()+1)
	err := b.SendConfirmed(ctxT(t), topic, big)
	switch {
	case err == nil:
		t.Errorf("SendConfirmed of a %d-byte message over the %d-byte limit returned nil", len(big.Payload), s.h.MaxMessageBytes())
	case broker.Code(err) != broker.Rejected:
		t.Errorf("SendConfirmed of an oversized message: class %v, want %v: %v", broker.Code(err), broker.Rejected, err)
	}
	// Same key, sent after: where keys keep their order it arrives after the
	// oversized one would have.
	send(t, b, topic, msg("k", "after-oversized"))
	c.waitCount(t, "after-oversized", 1)
	if n := c.count("oversized"); n != 0 {
		t.Errorf("the rejected message was delivered %d times", n)
	}
}
