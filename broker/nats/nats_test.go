package nats_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	natsio "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgx/msgx/broker/brokertest"
	"github.com/msgx/msgx/broker/driver"
	natsbroker "github.com/msgx/msgx/broker/nats"
)

const serverAddr = "127.0.0.1:4222"

// harness runs the suite through a TCP proxy so that outages really cut the
// connections. Every stream lives under a subject prefix unique to the run and
// is deleted at cleanup.
type harness struct {
	proxy   *brokertest.Proxy
	prefix  string
	admin   jetstream.JetStream
	namer   *natsbroker.Driver // only for names; never started
	refused string
	dead    string // an address where nothing listens
	maxPay  int    // the server's max_payload
	opts    []natsbroker.Option
}

func randHex(t testing.TB) string {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

func newHarness(t *testing.T, opts ...natsbroker.Option) *harness {
	t.Helper()
	nc, err := natsio.Connect("nats://" + serverAddr)
	if err != nil {
		t.Fatalf("connect to the local NATS server: %v", err)
	}
	t.Cleanup(nc.Close)
	admin, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := brokertest.NewProxy(serverAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	_ = ln.Close()

	h := &harness{proxy: proxy, prefix: "msgxtest." + randHex(t), admin: admin, dead: dead, maxPay: int(nc.MaxPayload())}
	// A short ack wait keeps the cases that wait for an unsettled message's
	// redelivery quick; everything else is the production default.
	h.opts = append([]natsbroker.Option{
		natsbroker.WithSubjectPrefix(h.prefix),
		natsbroker.WithAckWait(2 * time.Second),
		natsbroker.WithReconnectWait(250 * time.Millisecond),
	}, opts...)
	h.namer = natsbroker.New(h.opts...)
	t.Cleanup(func() { h.deleteStreams(t) })
	h.refused = "refused-" + randHex(t)
	h.sealStream(t, h.refused)
	return h
}

// sealStream creates a sealed stream for topic: the server refuses every
// publish to it ("invalid operation on sealed stream").
func (h *harness) sealStream(t *testing.T, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	subj, err := h.namer.Subject(topic)
	if err != nil {
		t.Fatal(err)
	}
	name, _ := h.namer.StreamName(topic)
	s, err := h.admin.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subj}, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatalf("create refused stream: %v", err)
	}
	cfg := s.CachedInfo().Config
	cfg.Sealed = true
	if _, err := h.admin.UpdateStream(ctx, cfg); err != nil {
		t.Fatalf("seal refused stream: %v", err)
	}
}

func (h *harness) deleteStreams(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	names := h.admin.StreamNames(ctx, jetstream.WithStreamListSubject(h.prefix+".>"))
	var all []string
	for n := range names.Name() {
		all = append(all, n)
	}
	if err := names.Err(); err != nil {
		t.Errorf("list streams: %v", err)
	}
	for _, n := range all {
		if err := h.admin.DeleteStream(ctx, n); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Errorf("delete stream %s: %v", n, err)
		}
	}
}

func (h *harness) Name() string { return "nats" }

func (h *harness) Target() string { return "local nats-server" }

// MaxMessageBytes is the server's max_payload, which the client learns from
// the server's INFO.
func (h *harness) MaxMessageBytes() int { return h.maxPay }

func (h *harness) NewDriver(context.Context) (driver.Broker, error) {
	return natsbroker.New(append([]natsbroker.Option{natsbroker.WithURL("nats://" + h.proxy.Addr())}, h.opts...)...), nil
}

func (h *harness) UnreachableDriver(context.Context) (driver.Broker, error) {
	return natsbroker.New(append([]natsbroker.Option{natsbroker.WithURL("nats://" + h.dead)}, h.opts...)...), nil
}

func (h *harness) Stall(ctx context.Context) (func(), error) {
	return brokertest.ProxyNetwork{h.proxy}.Stall(ctx)
}

func (h *harness) Latency(ctx context.Context, d time.Duration) (func(), error) {
	return brokertest.ProxyNetwork{h.proxy}.Latency(ctx, d)
}

func (h *harness) Outage(context.Context) (func(), error) {
	h.proxy.Cut()
	return h.proxy.Restore, nil
}

func (h *harness) RefusedTopic() string { return h.refused }

// SubscriptionExists implements brokertest.ExpiryChecker: the consumer is gone
// once the server answers 404 for it (or for its stream).
func (h *harness) SubscriptionExists(ctx context.Context, spec driver.SubscriptionSpec) (bool, error) {
	stream, err := h.namer.StreamName(spec.Topic)
	if err != nil {
		return false, err
	}
	_, err = h.admin.Consumer(ctx, stream, natsbroker.ConsumerName(spec.Group))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, jetstream.ErrConsumerNotFound), errors.Is(err, jetstream.ErrStreamNotFound):
		return false, nil
	}
	return false, err
}

func TestConformance(t *testing.T) {
	brokertest.Run(t, newHarness(t), brokertest.Options{})
}

// startDriver returns a started driver straight to the server (no proxy).
func startDriver(t *testing.T, h *harness, opts ...natsbroker.Option) *natsbroker.Driver {
	t.Helper()
	all := append([]natsbroker.Option{natsbroker.WithURL("nats://" + serverAddr)}, h.opts...)
	d := natsbroker.New(append(all, opts...)...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.Start(ctx); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { _ = d.Close(context.Background()) })
	return d
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// A publish to a topic nothing subscribed to fails (no stream captures its
// subject), and does not create a stream for it.
func TestPublishToUnknownTopicFails(t *testing.T) {
	h := newHarness(t)
	d := startDriver(t, h)
	topic := "unknown-" + randHex(t)
	err := d.Publish(ctxFor(t, 10*time.Second), topic, []*driver.Message{{Payload: []byte("x")}})
	if err == nil {
		t.Fatal("publish to a topic without a stream succeeded")
	}
	if !errors.Is(err, jetstream.ErrNoStreamResponse) && !errors.Is(err, natsio.ErrNoResponders) {
		t.Errorf("error = %v, want no responders", err)
	}
	// No stream is created for it: sending again fails the same way.
	if code := driver.Code(err); code != driver.Rejected {
		t.Errorf("publish to a topic without a stream: class %v, want %v", code, driver.Rejected)
	}
	err = d.Publish(ctxFor(t, 10*time.Second), topic, []*driver.Message{{Payload: []byte("x")}, {Payload: []byte("y")}})
	if err == nil {
		t.Fatal("batch publish to a topic without a stream succeeded")
	}
	if code := driver.Code(err); code != driver.Rejected {
		t.Errorf("batch publish to a topic without a stream: class %v, want %v: %v", code, driver.Rejected, err)
	}
	name, _ := d.StreamName(topic)
	if _, err := h.admin.Stream(ctxFor(t, 10*time.Second), name); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("stream %s after failed publishes: err = %v, want not found", name, err)
	}
	if err := d.EnsureTopic(ctxFor(t, 10*time.Second), topic); err != nil {
		t.Fatal(err)
	}
	if err := d.Publish(ctxFor(t, 10*time.Second), topic, []*driver.Message{{Payload: []byte("x")}}); err != nil {
		t.Errorf("publish after EnsureTopic: %v", err)
	}
}

// A confirmed publish to a topic no group consumes yet is kept: the group
// that subscribes afterwards gets it (interest retention would confirm it and
// drop it at once).
func TestPublishBeforeAnyGroupIsKept(t *testing.T) {
	h := newHarness(t)
	d := startDriver(t, h)
	topic := "early-" + randHex(t)
	if err := d.EnsureTopic(ctxFor(t, 10*time.Second), topic); err != nil {
		t.Fatal(err)
	}
	if err := d.Publish(ctxFor(t, 10*time.Second), topic, []*driver.Message{{Payload: []byte("early")}}); err != nil {
		t.Fatal(err)
	}
	sub, err := d.Subscribe(ctxFor(t, 10*time.Second), driver.SubscriptionSpec{Topic: topic, Group: "late", Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close(context.Background())
	ds, err := sub.Receive(ctxFor(t, 10*time.Second), 1)
	if err != nil {
		t.Fatalf("the message published before the group existed is gone: %v", err)
	}
	if got := string(ds[0].Message().Payload); got != "early" {
		t.Errorf("got %q, want early", got)
	}
	_ = ds[0].Ack(context.Background())
}

// The driver never holds more than the prefetch unsettled, neither handed out
// nor buffered: the server's ack-pending count says so.
func TestPrefetchBoundsUnsettled(t *testing.T) {
	const prefetch = 3
	h := newHarness(t)
	d := startDriver(t, h)
	topic := "prefetch-" + randHex(t)
	sub, err := d.Subscribe(ctxFor(t, 10*time.Second), driver.SubscriptionSpec{Topic: topic, Group: "g", DeadLetterTopic: topic + ".dlq", Prefetch: prefetch})
	if err != nil {
		t.Fatal(err)
	}
	msgs := make([]*driver.Message, 10)
	for i := range msgs {
		msgs[i] = &driver.Message{Payload: []byte{byte(i)}}
	}
	if err := d.Publish(ctxFor(t, 10*time.Second), topic, msgs); err != nil {
		t.Fatal(err)
	}
	var got []driver.Delivery
	for len(got) < prefetch {
		ds, err := sub.Receive(ctxFor(t, 10*time.Second), 10)
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		got = append(got, ds...)
	}
	if len(got) != prefetch {
		t.Fatalf("received %d unsettled, want %d", len(got), prefetch)
	}
	if ds, err := sub.Receive(ctxFor(t, 300*time.Millisecond), 10); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("receive beyond the prefetch = %d deliveries, %v; want it to block", len(ds), err)
	}
	stream, _ := d.StreamName(topic)
	c, err := h.admin.Consumer(ctxFor(t, 10*time.Second), stream, natsbroker.ConsumerName("g"))
	if err != nil {
		t.Fatal(err)
	}
	if n := c.CachedInfo().NumAckPending; n > prefetch {
		t.Errorf("server counts %d ack-pending, want at most %d", n, prefetch)
	}
	// Settling frees room: the rest arrive.
	for _, dl := range got {
		if err := dl.Ack(ctxFor(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	ds, err := sub.Receive(ctxFor(t, 10*time.Second), 10)
	if err != nil || len(ds) == 0 {
		t.Fatalf("receive after acks: %d, %v", len(ds), err)
	}
	if err := sub.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A delivery left unsettled on an open subscription (a cancelled handler) is
// kept alive only up to MaxHold, then redelivered with its count grown.
func TestUnsettledRedeliveredAfterMaxHold(t *testing.T) {
	h := newHarness(t)
	d := startDriver(t, h, natsbroker.WithAckWait(time.Second), natsbroker.WithMaxHold(1500*time.Millisecond))
	topic := "hold-" + randHex(t)
	sub, err := d.Subscribe(ctxFor(t, 10*time.Second), driver.SubscriptionSpec{Topic: topic, Group: "g", DeadLetterTopic: topic + ".dlq", Prefetch: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close(context.Background())
	if err := d.Publish(ctxFor(t, 10*time.Second), topic, []*driver.Message{{Payload: []byte("held")}}); err != nil {
		t.Fatal(err)
	}
	first, err := sub.Receive(ctxFor(t, 10*time.Second), 1)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	again, err := sub.Receive(ctxFor(t, 20*time.Second), 1)
	if err != nil {
		t.Fatalf("unsettled delivery never came back: %v", err)
	}
	// Kept alive past the 1 s ack wait by in-progress acks until MaxHold.
	if waited := time.Since(start); waited < 1400*time.Millisecond {
		t.Errorf("redelivered after %v, before MaxHold", waited)
	}
	if string(again[0].Message().Payload) != "held" || again[0].Message().Headers["msgx-redelivery-count"] != "1" {
		t.Errorf("redelivery = %q count %q, want held count 1", again[0].Message().Payload, again[0].Message().Headers["msgx-redelivery-count"])
	}
	_ = first
}

// Work-queue retention admits one group per topic, so Broadcast is not declared.
func TestWorkQueueRetention(t *testing.T) {
	h := newHarness(t)
	d := startDriver(t, h, natsbroker.WithRetention(jetstream.WorkQueuePolicy))
	if d.Capabilities().Broadcast {
		t.Error("work-queue retention declares Broadcast")
	}
	topic := "wq-" + randHex(t)
	if _, err := d.Subscribe(ctxFor(t, 10*time.Second), driver.SubscriptionSpec{Topic: topic, Group: "a", Prefetch: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Subscribe(ctxFor(t, 10*time.Second), driver.SubscriptionSpec{Topic: topic, Group: "b", Prefetch: 1}); err == nil {
		t.Error("a second group on a work-queue topic was accepted")
	} else if !strings.Contains(err.Error(), "consumer") {
		t.Errorf("second group error = %v", err)
	}
}

// The key travels in the partition-key header the port adds, or in a header
// of its own when it differs; either way it comes back as the key, and the
// headers come back as they were sent.
func TestKeyMapping(t *testing.T) {
	h := newHarness(t)
	d := startDriver(t, h)
	topic := "keys-" + randHex(t)
	sub, err := d.Subscribe(ctxFor(t, 10*time.Second), driver.SubscriptionSpec{Topic: topic, Group: "g", Prefetch: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close(context.Background())
	const pk = "msgx-partition-key"
	cases := []*driver.Message{
		{Key: "k1", Headers: map[string]string{pk: "k1", "id": "0"}},
		{Key: "a", Headers: map[string]string{pk: "b", "id": "1"}},
		{Key: "", Headers: map[string]string{pk: "x", "id": "2"}},
		{Key: "z", Headers: map[string]string{"id": "3"}},
		{Key: "", Headers: map[string]string{"id": "4"}},
	}
	if err := d.Publish(ctxFor(t, 10*time.Second), topic, cases); err != nil {
		t.Fatal(err)
	}
	got := map[string]*driver.Message{}
	for len(got) < len(cases) {
		ds, err := sub.Receive(ctxFor(t, 10*time.Second), 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, dl := range ds {
			got[dl.Message().Headers["id"]] = dl.Message()
			if err := dl.Ack(ctxFor(t, 10*time.Second)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, want := range cases {
		m := got[strconv.Itoa(i)]
		if m.Key != want.Key {
			t.Errorf("message %d: key %q, want %q", i, m.Key, want.Key)
		}
		for k, v := range want.Headers {
			if m.Headers[k] != v {
				t.Errorf("message %d: header %s = %q, want %q", i, k, m.Headers[k], v)
			}
		}
		if _, ok := m.Headers["msgx-key"]; ok {
			t.Errorf("message %d: internal key header leaked: %v", i, m.Headers)
		}
		if len(m.Headers) != len(want.Headers)+1 { // + the redelivery count
			t.Errorf("message %d: headers %v, want %v plus the redelivery count", i, m.Headers, want.Headers)
		}
	}
}

// A lost connection and the failed reconnect attempts that follow are
// reported on Errors, which Close closes.
func TestErrorsReportConnectionLoss(t *testing.T) {
	h := newHarness(t)
	// A proxy of its own: closing it makes every reconnect dial fail.
	proxy, err := brokertest.NewProxy(serverAddr)
	if err != nil {
		t.Fatal(err)
	}
	d := natsbroker.New(append([]natsbroker.Option{natsbroker.WithURL("nats://" + proxy.Addr())}, h.opts...)...)
	if err := d.Start(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	_ = proxy.Close()
	want := []string{"disconnected", "reconnect failed"}
	timeout := time.After(15 * time.Second)
	for len(want) > 0 {
		select {
		case err := <-d.Errors():
			if err != nil && strings.Contains(err.Error(), want[0]) {
				want = want[1:]
			}
		case <-timeout:
			t.Fatalf("no %q error reported", want[0])
		}
	}
	if err := d.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range d.Errors() {
	}
}

// An expiring subscription whose prefetch is full has no pull open; its
// in-progress acks keep the consumer alive for as long as the subscription is.
func TestExpiringConsumerLivesWithFullPrefetch(t *testing.T) {
	const expiry = time.Second
	h := newHarness(t)
	// A long ack wait: only the expiry makes the driver ack in progress often enough.
	d := startDriver(t, h, natsbroker.WithAckWait(30*time.Second))
	topic := "expiry-full-" + randHex(t)
	spec := driver.SubscriptionSpec{Topic: topic, Group: "instance-" + randHex(t), Expiry: expiry, Prefetch: 1}
	sub, err := d.Subscribe(ctxFor(t, 10*time.Second), spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Publish(ctxFor(t, 10*time.Second), topic, []*driver.Message{{Payload: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	ds, err := sub.Receive(ctxFor(t, 10*time.Second), 1)
	if err != nil {
		t.Fatal(err)
	}
	// Hold the only delivery for three times the expiry, checking all along.
	for end := time.Now().Add(3 * expiry); time.Now().Before(end); <-time.After(200 * time.Millisecond) {
		if ok, err := h.SubscriptionExists(ctxFor(t, 10*time.Second), spec); err != nil || !ok {
			t.Fatalf("consumer gone while its subscription holds a delivery: exists=%v err=%v", ok, err)
		}
	}
	if err := ds[0].Ack(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := sub.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		ok, err := h.SubscriptionExists(ctxFor(t, 10*time.Second), spec)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("consumer still exists long after its subscription closed")
		}
		<-time.After(100 * time.Millisecond) // the server's timer decides; poll it gently
	}
}

// A group's consumer deleted under a live subscription is recreated, and the
// subscription goes on receiving. Depending on whether a pull was open at the
// deletion, the server answers it with "consumer deleted" or the next pull
// with silence (missed heartbeats); both lead to the recreation.
func TestDeletedConsumerIsRecreated(t *testing.T) {
	h := newHarness(t)
	d := startDriver(t, h)
	topic := "recreate-" + randHex(t)
	spec := driver.SubscriptionSpec{Topic: topic, Group: "g", Prefetch: 2}
	sub, err := d.Subscribe(ctxFor(t, 10*time.Second), spec)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close(context.Background())
	stream, _ := d.StreamName(topic)
	if err := h.admin.DeleteConsumer(ctxFor(t, 10*time.Second), stream, natsbroker.ConsumerName("g")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok, err := h.SubscriptionExists(ctxFor(t, 10*time.Second), spec)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("consumer was not recreated")
		}
		<-time.After(50 * time.Millisecond)
	}
	if err := d.Publish(ctxFor(t, 10*time.Second), topic, []*driver.Message{{Payload: []byte("after")}}); err != nil {
		t.Fatal(err)
	}
	ds, err := sub.Receive(ctxFor(t, 20*time.Second), 1)
	if err != nil {
		t.Fatalf("no delivery after the consumer was recreated: %v", err)
	}
	if string(ds[0].Message().Payload) != "after" {
		t.Errorf("payload %q", ds[0].Message().Payload)
	}
}

// A sealed stream refuses every publish with a 4xx API error: the message is
// rejected, not the server unavailable.
func TestPublishToSealedStreamIsRejected(t *testing.T) {
	h := newHarness(t)
	d := startDriver(t, h)
	err := d.Publish(ctxFor(t, 10*time.Second), h.refused, []*driver.Message{{Payload: []byte("x")}})
	if err == nil {
		t.Fatal("publish to a sealed stream succeeded")
	}
	if code := driver.Code(err); code != driver.Rejected {
		t.Errorf("publish to a sealed stream: class %v, want %v: %v", code, driver.Rejected, err)
	}
}
