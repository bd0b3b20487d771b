package rabbitmq_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/broker/rabbitmq"
	"github.com/msgx/msgx/internal/testkit"
)

// These tests drive the adapter directly (without the port) at the edges the
// conformance suite does not reach: what exactly fails during and after an
// outage, and how the driver recovers.

func startDriver(t *testing.T, h *harness, opts ...rabbitmq.Option) *rabbitmq.Driver {
	t.Helper()
	d := rabbitmq.New(h.options(opts...)...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.Start(ctx); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := d.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return d
}

func freshTopic(t *testing.T, h *harness, what string) string {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "test-rabbitmq-" + what + "-" + hex.EncodeToString(b[:])
	if err := h.CreateTopic(context.Background(), name); err != nil {
		t.Fatalf("create topic: %v", err)
	}
	return name
}

func subscribe(t *testing.T, d *rabbitmq.Driver, topic, group string) driver.Subscription {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := d.Subscribe(ctx, driver.SubscriptionSpec{Topic: topic, Group: group, DeadLetterTopic: topic + ".dlq", Prefetch: 16})
	if err != nil {
		t.Fatalf("subscribe %s/%s: %v", topic, group, err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

func publish(t *testing.T, d *rabbitmq.Driver, topic string, ids ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	msgs := make([]*driver.Message, len(ids))
	for i, id := range ids {
		msgs[i] = &driver.Message{Key: "k", Payload: []byte(id), Headers: map[string]string{"id": id}}
	}
	if err := d.Publish(ctx, topic, msgs); err != nil {
		t.Fatalf("publish %v: %v", ids, err)
	}
}

// receiveOne waits for the next delivery.
func receiveOne(t *testing.T, s driver.Subscription) driver.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for {
		ds, err := s.Receive(ctx, 1)
		if err == nil {
			return ds[0]
		}
		if ctx.Err() != nil {
			t.Fatalf("receive: %v", err)
		}
		// A consumer that had to be replaced reports why; the next call resumes.
		t.Logf("receive: %v", err)
	}
}

func expectID(t *testing.T, d driver.Delivery, id string) {
	t.Helper()
	if got := d.Message().Headers["id"]; got != id {
		t.Fatalf("received %q, want %q", got, id)
	}
}

func waitError(t *testing.T, d *rabbitmq.Driver, substr string) {
	t.Helper()
	deadline := time.After(15 * time.Second)
	for {
		select {
		case err, ok := <-d.Errors():
			if !ok {
				t.Fatalf("error channel closed before %q was reported", substr)
			}
			if strings.Contains(err.Error(), substr) {
				return
			}
		case <-deadline:
			t.Fatalf("no error containing %q reported", substr)
		}
	}
}

func TestPublishUnroutableAndMissingExchange(t *testing.T) {
	h := newHarness(t)
	d := startDriver(t, h)
	topic := freshTopic(t, h, "unroutable") // exchange exists, no queue bound

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := d.Publish(ctx, topic, []*driver.Message{{Payload: []byte("x")}})
	if !errors.Is(err, rabbitmq.ErrReturned) {
		t.Fatalf("publish with no queue bound = %v, want ErrReturned", err)
	}
	if code := driver.Code(err); code != driver.Rejected {
		t.Errorf("publish with no queue bound: class %v, want %v", code, driver.Rejected)
	}
	err = d.Publish(ctx, "test-rabbitmq-no-such-exchange", []*driver.Message{{Payload: []byte("x")}})
	var aerr *amqp.Error
	if !errors.As(err, &aerr) || aerr.Code != amqp.NotFound {
		t.Fatalf("publish to a missing exchange = %v, want 404", err)
	}
	if code := driver.Code(err); code != driver.Rejected {
		t.Errorf("publish to a missing exchange: class %v, want %v", code, driver.Rejected)
	}
	// The channel the broker closed is not reused: the next publish works.
	s := subscribe(t, d, topic, "g")
	publish(t, d, topic, "after")
	expectID(t, receiveOne(t, s), "after")
}

func TestRequeueStaysInItsGroup(t *testing.T) {
	h := newHarness(t)
	d := startDriver(t, h)
	topic := freshTopic(t, h, "requeue-group")
	sa, sb := subscribe(t, d, topic, "ga"), subscribe(t, d, topic, "gb")
	publish(t, d, topic, "m")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	da := receiveOne(t, sa)
	if err := da.Requeue(ctx, da.Message(), 0); err != nil {
		t.Fatalf("requeue: %v", err)
	}
	expectID(t, receiveOne(t, sa), "m") // the copy, in group a

	db := receiveOne(t, sb)
	expectID(t, db, "m")
	if err := db.Ack(ctx); err != nil {
		t.Fatalf("ack: %v", err)
	}
	// Group b holds nothing but what comes after: the requeue did not reach it.
	publish(t, d, topic, "barrier")
	expectID(t, receiveOne(t, sb), "barrier")
}

func TestPublishDuringOutage(t *testing.T) {
	h := newHarness(t)
	reg := prometheus.NewPedanticRegistry()
	d := startDriver(t, h, rabbitmq.WithRegisterer(reg))
	topic := freshTopic(t, h, "outage-publish")
	subscribe(t, d, topic, "g")
	publish(t, d, topic, "before")

	h.proxy.Cut()
	restored := false
	defer func() {
		if !restored {
			h.proxy.Restore()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	start := time.Now()
	err := d.Publish(ctx, topic, []*driver.Message{{Payload: []byte("down")}})
	cancel()
	if err == nil {
		t.Fatal("publish while the broker is unreachable returned nil")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("publish during the outage took %v; the context allowed 500ms", took)
	}
	if code := driver.Code(err); code != driver.Unavailable {
		t.Errorf("publish during the outage: class %v, want %v: %v", code, driver.Unavailable, err)
	}
	waitError(t, d, "connection lost")

	h.proxy.Restore()
	restored = true
	// The caller's deadline covers the reconnect: one call succeeds.
	publish(t, d, topic, "after")

	if got := testkit.MetricValue(t, reg, "msgx_rabbitmq_connection_losses_total", "role", "publish"); got != 1 {
		t.Errorf("publish connection losses = %v, want 1", got)
	}
	if got := testkit.MetricValue(t, reg, "msgx_rabbitmq_reconnects_total", "role", "publish"); got != 1 {
		t.Errorf("publish reconnects = %v, want 1", got)
	}
	if got := testkit.MetricValue(t, reg, "msgx_rabbitmq_connection_up", "role", "publish"); got != 1 {
		t.Errorf("publish connection up = %v after the reconnect, want 1", got)
	}
}

func TestDeliveriesOfADeadChannel(t *testing.T) {
	h := newHarness(t)
	d := startDriver(t, h)
	topic := freshTopic(t, h, "dead-channel")
	s := subscribe(t, d, topic, "g")
	publish(t, d, topic, "m")
	old := receiveOne(t, s)

	h.proxy.Cut()
	waitError(t, d, "consume connection lost")
	h.proxy.Restore()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := old.Ack(ctx); !errors.Is(err, rabbitmq.ErrDeliveryChannelClosed) {
		t.Errorf("ack of a delivery from the dead channel = %v, want ErrDeliveryChannelClosed", err)
	}
	if err := old.Requeue(ctx, old.Message(), 0); !errors.Is(err, rabbitmq.ErrDeliveryChannelClosed) {
		t.Errorf("requeue of a delivery from the dead channel = %v, want ErrDeliveryChannelClosed", err)
	}
	if err := old.DeadLetter(ctx, old.Message()); !errors.Is(err, rabbitmq.ErrDeliveryChannelClosed) {
		t.Errorf("dead letter of a delivery from the dead channel = %v, want ErrDeliveryChannelClosed", err)
	}
	// The subscription resumes on the new connection and the broker redelivers.
	again := receiveOne(t, s)
	expectID(t, again, "m")
	if err := again.Ack(ctx); err != nil {
		t.Fatalf("ack after reconnect: %v", err)
	}
	publish(t, d, topic, "barrier")
	expectID(t, receiveOne(t, s), "barrier") // no second copy from a requeue or dead letter
}

func TestRepeatedOutages(t *testing.T) {
	h := newHarness(t)
	d := startDriver(t, h)
	topic := freshTopic(t, h, "repeated")
	s := subscribe(t, d, topic, "g")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := 0; i < 3; i++ {
		h.proxy.Cut()
		h.proxy.Restore()
		id := fmt.Sprintf("m%d", i)
		publishRetrying(t, ctx, d, topic, id)
		for {
			got := receiveOne(t, s)
			gid := got.Message().Headers["id"]
			if err := got.Ack(ctx); err != nil {
				t.Logf("ack %s: %v", gid, err)
			}
			if gid == id {
				break
			}
			// An ack sent just before a cut may never reach the broker, which
			// then redelivers: at least once, never an unknown message.
			if !strings.HasPrefix(gid, "m") || gid > id {
				t.Fatalf("received %q while waiting for %q", gid, id)
			}
		}
	}
}

// publishRetrying publishes until the connection is back, each try bounded.
func publishRetrying(t *testing.T, ctx context.Context, d *rabbitmq.Driver, topic, id string) {
	t.Helper()
	for {
		tctx, cancel := context.WithTimeout(ctx, time.Second)
		err := d.Publish(tctx, topic, []*driver.Message{{Payload: []byte(id), Headers: map[string]string{"id": id}}})
		cancel()
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("publish %s never succeeded: %v", id, err)
		}
	}
}

func TestCloseDuringOutage(t *testing.T) {
	h := newHarness(t)
	d := rabbitmq.New(h.options()...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.Start(ctx); err != nil {
		t.Fatalf("start: %v", err)
	}
	topic := freshTopic(t, h, "close-outage")
	s, err := d.Subscribe(ctx, driver.SubscriptionSpec{Topic: topic, Group: "g", DeadLetterTopic: topic + ".dlq", Prefetch: 4})
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	received := make(chan error, 1)
	go func() {
		_, err := s.Receive(context.Background(), 1)
		received <- err
	}()
	h.proxy.Cut()
	defer h.proxy.Restore()
	waitError(t, d, "connection lost")

	// Receive now waits for the reconnect; closing the subscription ends it.
	if err := s.Close(ctx); err != nil {
		t.Errorf("close subscription during an outage: %v", err)
	}
	select {
	case err := <-received:
		if !errors.Is(err, driver.ErrClosed) {
			t.Errorf("receive after close = %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("receive still blocked after the subscription closed")
	}
	// Subscribing waits for the connection only as long as its context allows.
	sctx, scancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = d.Subscribe(sctx, driver.SubscriptionSpec{Topic: topic, Group: "g", DeadLetterTopic: topic + ".dlq", Prefetch: 4})
	scancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("subscribe during an outage = %v, want the context's deadline", err)
	}

	start := time.Now()
	if err := d.Close(ctx); err != nil {
		t.Errorf("close during an outage: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("close during an outage took %v", took)
	}
	for range d.Errors() { // must be closed, not left open
	}
}

func TestConsumerCancelledByBroker(t *testing.T) {
	h := newHarness(t)
	d := startDriver(t, h)
	topic := freshTopic(t, h, "cancelled")
	s := subscribe(t, d, topic, "g")
	publish(t, d, topic, "first")
	m := receiveOne(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Ack(ctx); err != nil {
		t.Fatalf("ack: %v", err)
	}
	// An operator deletes the queue: RabbitMQ cancels the consumer.
	if err := onAdmin(h.admin, func(ch *amqp.Channel) error {
		_, err := ch.QueueDelete(rabbitmq.QueueName(topic, "g"), false, false, false)
		return err
	}); err != nil {
		t.Fatalf("delete queue: %v", err)
	}
	_, err := s.Receive(ctx, 1)
	if err == nil || !strings.Contains(err.Error(), "consumer") {
		t.Fatalf("receive after the queue was deleted = %v, want the consumer's end reported", err)
	}
	// The next Receive re-declares the queue and consumes again.
	type result struct {
		ds  []driver.Delivery
		err error
	}
	resumed := make(chan result, 1)
	go func() {
		ds, err := s.Receive(ctx, 1)
		resumed <- result{ds, err}
	}()
	deadline := time.Now().Add(15 * time.Second)
	for exists, _ := queueExists(h.admin, rabbitmq.QueueName(topic, "g")); !exists; exists, _ = queueExists(h.admin, rabbitmq.QueueName(topic, "g")) {
		if time.Now().After(deadline) {
			t.Fatal("queue was not re-declared")
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
		}
	}
	publishRetrying(t, ctx, d, topic, "second")
	r := <-resumed // bounded by ctx
	if r.err != nil {
		t.Fatalf("receive after the queue came back: %v", r.err)
	}
	expectID(t, r.ds[0], "second")
}

func TestConcurrentPublishers(t *testing.T) {
	const writers, each = 8, 50
	h := newHarness(t)
	d := startDriver(t, h, rabbitmq.WithPublishChannels(3))
	topic := freshTopic(t, h, "concurrent")
	s := subscribe(t, d, topic, "g")
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			for i := 0; i < each; i++ {
				id := fmt.Sprintf("w%d-%d", w, i)
				if err := d.Publish(ctx, topic, []*driver.Message{{Payload: []byte(id), Headers: map[string]string{"id": id}}}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent publish: %v", err)
	}
	seen := map[string]bool{}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for len(seen) < writers*each {
		ds, err := s.Receive(ctx, 64)
		if err != nil {
			t.Fatalf("receive after %d: %v", len(seen), err)
		}
		for _, dl := range ds {
			id := dl.Message().Headers["id"]
			if seen[id] {
				t.Errorf("duplicate %s", id)
			}
			seen[id] = true
			if err := dl.Ack(ctx); err != nil {
				t.Fatalf("ack: %v", err)
			}
		}
	}
}

func TestStartHonoursContextOnSilentServer(t *testing.T) {
	// A listener that accepts TCP but never speaks AMQP.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var conns []net.Conn
	var mu sync.Mutex
	accepted := make(chan struct{}, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			accepted <- struct{}{}
		}
	}()
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	d := rabbitmq.New(rabbitmq.WithURL(url(ln.Addr().String())), rabbitmq.WithLogger(testLogger()))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := d.Start(ctx); err == nil {
		t.Fatal("Start against a server that never answers returned nil")
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Start took %v with a 300ms context", took)
	}

	// Cancelling (no deadline) ends the handshake as well.
	for len(accepted) > 0 {
		<-accepted
	}
	d = rabbitmq.New(rabbitmq.WithURL(url(ln.Addr().String())), rabbitmq.WithLogger(testLogger()))
	cctx, ccancel := context.WithCancel(context.Background())
	res := make(chan error, 1)
	go func() { res <- d.Start(cctx) }()
	select {
	case <-accepted: // connected; now in the AMQP handshake
	case <-time.After(5 * time.Second):
		t.Fatal("Start never connected")
	}
	ccancel()
	select {
	case err := <-res:
		if err == nil {
			t.Fatal("Start with a cancelled context returned nil")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Start did not return after its context was cancelled")
	}
}

func TestKeyAndHeadersSurvive(t *testing.T) {
	h := newHarness(t)
	d := startDriver(t, h)
	topic := freshTopic(t, h, "key")
	s := subscribe(t, d, topic, "g")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// A key that differs from the partition-key header travels on its own.
	msgs := []*driver.Message{
		{Key: "own-key", Payload: []byte{0, 0xff}, Headers: map[string]string{"id": "a", "msgx-partition-key": "other"}},
		{Key: "same", Payload: []byte("b"), Headers: map[string]string{"id": "b", "msgx-partition-key": "same"}},
	}
	if err := d.Publish(ctx, topic, msgs); err != nil {
		t.Fatalf("publish: %v", err)
	}
	for _, want := range msgs {
		got := receiveOne(t, s).Message()
		if got.Key != want.Key || string(got.Payload) != string(want.Payload) || fmt.Sprint(got.Headers) != fmt.Sprint(want.Headers) {
			t.Errorf("received %+v, want %+v", got, want)
		}
	}
}

// BenchmarkConcurrentPublish compares one publishing channel (callers take
// turns: serialised confirms) with a pool, under 8 concurrent callers each
// publishing batches of 10 confirmed messages.
func BenchmarkConcurrentPublish(b *testing.B) {
	for _, channels := range []int{1, 8} {
		b.Run(fmt.Sprintf("channels=%d", channels), func(b *testing.B) {
			admin, err := amqp.Dial(url(brokerAddr()))
			if err != nil {
				b.Fatal(err)
			}
			defer admin.Close()
			var rb [4]byte
			_, _ = rand.Read(rb[:])
			topic := "bench-rabbitmq-concurrent-" + hex.EncodeToString(rb[:])
			d := rabbitmq.New(rabbitmq.WithURL(url(brokerAddr())), rabbitmq.WithPublishChannels(channels), rabbitmq.WithLogger(testLogger()))
			ctx := context.Background()
			if err := d.Start(ctx); err != nil {
				b.Fatal(err)
			}
			defer d.Close(ctx)
			defer deleteTopic(admin, topic, "g")
			if err := d.DeclareSubscription(ctx, driver.SubscriptionSpec{Topic: topic, Group: "g", DeadLetterTopic: topic + ".dlq"}); err != nil {
				b.Fatal(err)
			}
			payload := make([]byte, 200)
			b.SetParallelism(4) // 8 goroutines on 2 cores
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				msgs := make([]*driver.Message, 10)
				for i := range msgs {
					msgs[i] = &driver.Message{Payload: payload}
				}
				for pb.Next() {
					if err := d.Publish(ctx, topic, msgs); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N*10)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

func TestOverlongNamesKeepTheConnection(t *testing.T) {
	h := newHarness(t)
	d := startDriver(t, h)
	topic := freshTopic(t, h, "overlong")
	s := subscribe(t, d, topic, "g")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	long := strings.Repeat("x", 256)
	if err := d.Publish(ctx, topic, []*driver.Message{{Payload: []byte("x"), Headers: map[string]string{long: "v"}}}); err == nil {
		t.Error("publish with a 256-byte header name returned nil")
	}
	if err := d.Publish(ctx, long, []*driver.Message{{Payload: []byte("x")}}); err == nil {
		t.Error("publish to a 256-byte topic returned nil")
	}
	if _, err := d.Subscribe(ctx, driver.SubscriptionSpec{Topic: topic, Group: long, Prefetch: 1}); err == nil {
		t.Error("subscribe with a queue name over 255 bytes returned nil")
	}
	publish(t, d, topic, "fine")
	expectID(t, receiveOne(t, s), "fine")
	select {
	case err := <-d.Errors():
		t.Errorf("unexpected asynchronous error: %v", err)
	default:
	}
}

// TestDelayedRequeueWaitsInTheRetryQueue: a requeue with a delay goes to the
// group's retry queue and comes back when its TTL ends: not before, and
// without the consumer holding it meanwhile (the next message gets through).
func TestDelayedRequeueWaitsInTheRetryQueue(t *testing.T) {
	h := newHarness(t)
	d := startDriver(t, h)
	topic := freshTopic(t, h, "retry-queue")
	s := subscribe(t, d, topic, "g")
	publish(t, d, topic, "m")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	first := receiveOne(t, s)
	const delay = 1500 * time.Millisecond
	start := time.Now()
	if err := first.Requeue(ctx, first.Message(), delay); err != nil {
		t.Fatalf("requeue: %v", err)
	}
	publish(t, d, topic, "next")
	next := receiveOne(t, s)
	expectID(t, next, "next")
	if err := next.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	again := receiveOne(t, s)
	expectID(t, again, "m")
	if took := time.Since(start); took < delay {
		t.Errorf("the delayed requeue came back after %v, before its %v", took, delay)
	}
	if err := again.Ack(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestPrefetchOption: a subscription that asks for no prefetch of its own
// gets WithPrefetch as its basic.qos: the broker hands over that many
// unacknowledged messages and no more until one is acknowledged.
func TestPrefetchOption(t *testing.T) {
	h := newHarness(t)
	const prefetch = 3
	d := startDriver(t, h, rabbitmq.WithPrefetch(prefetch))
	topic := freshTopic(t, h, "prefetch")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := d.Subscribe(ctx, driver.SubscriptionSpec{Topic: topic, Group: "g", DeadLetterTopic: topic + ".dlq"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	ids := make([]string, 10)
	for i := range ids {
		ids[i] = fmt.Sprint("m", i)
	}
	publish(t, d, topic, ids...)
	// held collects deliveries until want are held, then checks over a
	// bounded quiet period that no more arrive.
	var held []driver.Delivery
	expectHeld := func(want int) {
		t.Helper()
		for len(held) < want {
			ds, err := s.Receive(ctx, 100)
			if err != nil {
				t.Fatalf("receive, holding %d of %d: %v", len(held), want, err)
			}
			held = append(held, ds...)
		}
		quiet, qcancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer qcancel()
		if ds, err := s.Receive(quiet, 100); err == nil {
			t.Fatalf("%d more deliveries beyond the %d unacknowledged that basic.qos %d allows", len(ds), len(held), prefetch)
		}
		if len(held) != want {
			t.Fatalf("%d unacknowledged deliveries, want %d", len(held), want)
		}
	}
	expectHeld(prefetch)
	if err := held[0].Ack(ctx); err != nil {
		t.Fatal(err)
	}
	expectHeld(prefetch + 1)
}
