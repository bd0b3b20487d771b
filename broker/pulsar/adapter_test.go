package pulsar_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/broker/brokertest"
	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/broker/pulsar"
	"github.com/msgx/msgx/broker/pulsar/pulsarfake"
	"github.com/msgx/msgx/internal/testkit"
)

func startFake(t *testing.T) *pulsarfake.Server {
	t.Helper()
	srv, err := pulsarfake.New(pulsarfake.WithLogger(testkit.Quiet()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

func startDriver(t *testing.T, url string, opts ...pulsar.Option) *pulsar.Driver {
	t.Helper()
	d := pulsar.New(url, append([]pulsar.Option{pulsar.WithLogger(testkit.Quiet())}, opts...)...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close(context.Background()) })
	return d
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// A broker that accepts connections but never answers must not hang Start.
func TestStartBoundedWhenBrokerSilent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // hold it open, say nothing
		}
	}()
	d := pulsar.New("pulsar://"+ln.Addr().String(), pulsar.WithLogger(testkit.Quiet()))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	if err := d.Start(ctx); err == nil {
		t.Fatal("Start succeeded against a broker that never answers")
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("Start took %v with a 1s context", elapsed)
	}
	_ = d.Close(context.Background())
}

// After the connection is lost while no publish runs, publishing recovers: an
// unconfirmed publish replaces the producer.
func TestPublishRecoversAfterConnectionLoss(t *testing.T) {
	srv := startFake(t)
	d := startDriver(t, srv.URL(), pulsar.WithHealthInterval(0))
	msg := []*driver.Message{{Payload: []byte("x")}}
	if err := d.Publish(testCtx(t), "recover", msg); err != nil {
		t.Fatal(err)
	}
	srv.CutConnections()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := d.Publish(ctx, "recover", msg)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("publish never recovered after the connection was cut: %v", err)
		}
	}
}

// Requeue is a negative acknowledgement: the broker redelivers no earlier than
// the requested delay and reports its own count.
func TestRequeueDelayAndNativeCount(t *testing.T) {
	srv := startFake(t)
	d := startDriver(t, srv.URL())
	ctx := testCtx(t)
	sub, err := d.Subscribe(ctx, driver.SubscriptionSpec{Topic: "requeue", Group: "g", DeadLetterTopic: "requeue.dlq", Prefetch: 4})
	if err != nil {
		t.Fatal(err)
	}
	// The sender's count header is not what the consumer sees: the broker counts.
	if err := d.Publish(ctx, "requeue", []*driver.Message{{Payload: []byte("r"), Headers: map[string]string{broker.HeaderRedeliveryCount: "7"}}}); err != nil {
		t.Fatal(err)
	}
	ds, err := sub.Receive(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := ds[0].Message().Headers[broker.HeaderRedeliveryCount]; got != "0" {
		t.Fatalf("first delivery count header = %q, want 0", got)
	}
	const delay = 400 * time.Millisecond
	requeued := time.Now()
	if err := ds[0].Requeue(ctx, ds[0].Message(), delay); err != nil {
		t.Fatal(err)
	}
	ds, err = sub.Receive(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if since := time.Since(requeued); since < delay {
		t.Errorf("redelivered after %v, want no earlier than %v", since, delay)
	}
	if got := ds[0].Message().Headers[broker.HeaderRedeliveryCount]; got != "1" {
		t.Errorf("redelivery count header = %q, want 1", got)
	}
	if err := ds[0].Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sub.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.Receive(ctx, 1); err != driver.ErrClosed {
		t.Errorf("Receive after Close = %v, want ErrClosed", err)
	}
}

// A lost broker is reported on Errors, which Close closes.
func TestErrorsReportsLostBroker(t *testing.T) {
	srv := startFake(t)
	proxy, err := brokertest.NewProxy(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	srv.Advertise(proxy.Addr())
	d := startDriver(t, "pulsar://"+proxy.Addr(), pulsar.WithHealthInterval(100*time.Millisecond))
	proxy.Cut()
	select {
	case err := <-d.Errors():
		if err == nil {
			t.Fatal("nil error on Errors")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("lost broker not reported on Errors")
	}
	proxy.Restore()
	if err := d.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range d.Errors() { // drains, then ends because Close closed it
	}
}

// TestPublishAfterTopicUnload: a topic unload closes the producer
// (CLOSE_PRODUCER) and the consumer (CLOSE_CONSUMER); the next publish
// succeeds at once, on a new producer, not after the send timeout, and the
// consumer goes on receiving.
func TestPublishAfterTopicUnload(t *testing.T) {
	srv := startFake(t)
	d := startDriver(t, srv.URL(), pulsar.WithHealthInterval(0))
	ctx := testCtx(t)
	sub, err := d.Subscribe(ctx, driver.SubscriptionSpec{Topic: "unload", Group: "g", DeadLetterTopic: "unload.dlq", Prefetch: 4})
	if err != nil {
		t.Fatal(err)
	}
	receiveAll := func(want ...string) {
		t.Helper()
		got := map[string]bool{}
		for _, w := range want {
			for !got[w] {
				ds, err := sub.Receive(ctx, 4)
				if err != nil {
					t.Fatalf("receive, waiting for %v: %v", want, err)
				}
				for _, dl := range ds {
					got[string(dl.Message().Payload)] = true
					if err := dl.Ack(ctx); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
	if err := d.Publish(ctx, "unload", []*driver.Message{{Payload: []byte("before")}}); err != nil {
		t.Fatal(err)
	}
	receiveAll("before")
	if np, nc := srv.Unload("unload"); np != 1 || nc != 1 {
		t.Fatalf("unload closed %d producers and %d consumers, want 1 and 1", np, nc)
	}
	// Well within the send timeout (30 s), which an unconfirmed send on the
	// closed producer would wait for.
	for i := range 3 {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := d.Publish(pctx, "unload", []*driver.Message{{Payload: fmt.Appendf(nil, "after-%d", i)}})
		cancel()
		if err != nil {
			t.Fatalf("publish %d after the unload: %v", i, err)
		}
	}
	receiveAll("after-0", "after-1", "after-2")
	if err := sub.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestPublishDelayedIsHeldByTheBroker: a delayed publish waits in the
// broker, not in the consumer: a Shared subscription receives a later
// message first and nothing else until the delayed one is due.
func TestPublishDelayedIsHeldByTheBroker(t *testing.T) {
	srv := startFake(t)
	d := startDriver(t, srv.URL())
	ctx := testCtx(t)
	sub, err := d.Subscribe(ctx, driver.SubscriptionSpec{Topic: "delayed", Group: "g", DeadLetterTopic: "delayed.dlq", Prefetch: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close(context.Background())
	const delay = time.Second
	sent := time.Now()
	if err := d.PublishDelayed(ctx, "delayed", []*driver.Message{{Payload: []byte("later")}}, delay); err != nil {
		t.Fatal(err)
	}
	if err := d.Publish(ctx, "delayed", []*driver.Message{{Payload: []byte("now")}}); err != nil {
		t.Fatal(err)
	}
	ds, err := sub.Receive(ctx, 4)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 1 || string(ds[0].Message().Payload) != "now" {
		t.Fatalf("first receive: %d deliveries, first %q; want only \"now\"", len(ds), ds[0].Message().Payload)
	}
	_ = ds[0].Ack(ctx)
	// Bounded quiet period, well before the delay ends: the consumer holds nothing.
	quiet, cancel := context.WithTimeout(ctx, delay/2)
	defer cancel()
	if ds, err := sub.Receive(quiet, 4); err == nil {
		t.Fatalf("%q delivered %v after its delayed publish, before its delay of %v", ds[0].Message().Payload, time.Since(sent), delay)
	}
	ds, err = sub.Receive(ctx, 4)
	if err != nil {
		t.Fatal(err)
	}
	// deliver_at_time is in whole milliseconds, truncated by the client; the
	// port's not-before header (rounded up) covers that millisecond.
	if string(ds[0].Message().Payload) != "later" || time.Since(sent) < delay-time.Millisecond {
		t.Fatalf("got %q after %v, want \"later\" no earlier than %v", ds[0].Message().Payload, time.Since(sent), delay)
	}
	_ = ds[0].Ack(ctx)
}

// A topic whose producers the broker refuses (not authorised) is rejected:
// sending again fails the same way.
func TestPublishToRefusedTopicIsRejected(t *testing.T) {
	srv := startFake(t)
	srv.Refuse("persistent://public/default/refused")
	d := startDriver(t, srv.URL())
	err := d.Publish(testCtx(t), "refused", []*driver.Message{{Payload: []byte("x")}})
	if err == nil {
		t.Fatal("publish to a refused topic succeeded")
	}
	if code := driver.Code(err); code != driver.Rejected {
		t.Errorf("publish to a refused topic: class %v, want %v: %v", code, driver.Rejected, err)
	}
}
