package mqtt_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/msgx/msgx/broker/brokertest"
	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/broker/mqtt"
)

// These tests pin down what the adapter's design relies on in Mosquitto and
// what the driver does beyond the port's conformance suite.

func newDriver(t *testing.T, addr, instance string, slots *mqtt.Slots, opts ...mqtt.Option) *mqtt.Driver {
	t.Helper()
	opts = append([]mqtt.Option{mqtt.WithInstanceID(instance), mqtt.WithSlots(slots), mqtt.WithSessionExpiry(time.Minute), mqtt.WithDeadLetterExpiry(time.Minute),
		mqtt.WithReconnectBackoff(50*time.Millisecond, 500*time.Millisecond)}, opts...)
	d, err := mqtt.New(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = d.Close(ctx)
	})
	return d
}

func subscribe(t *testing.T, d *mqtt.Driver, topic, group string) driver.Subscription {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := d.Subscribe(ctx, driver.SubscriptionSpec{Topic: topic, Group: group, DeadLetterTopic: topic + ".dlq", Prefetch: 16})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func publish(t *testing.T, d *mqtt.Driver, topic string, ids ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	msgs := make([]*driver.Message, len(ids))
	for i, id := range ids {
		msgs[i] = &driver.Message{Payload: []byte(id)}
	}
	if err := d.Publish(ctx, topic, msgs); err != nil {
		t.Fatal(err)
	}
}

// receive returns the next delivery within wait, or nil.
func receive(t *testing.T, s driver.Subscription, wait time.Duration) driver.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	ds, err := s.Receive(ctx, 1)
	if errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return ds[0]
}

func closeSub(t *testing.T, s driver.Subscription) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

func unique(name string) string { return fmt.Sprintf("mqtt-test-%s-%s", name, randomHex(4)) }

// TestUnackedStaysWithSession: Mosquitto keeps a QoS 1 message a shared
// subscriber received but did not acknowledge in that subscriber's session;
// another live member of the group does not get it; the next holder of the
// client id does. This is why client ids are handed out by slot.
func TestUnackedStaysWithSession(t *testing.T) {
	requireBroker(t)
	topic, instance := unique("unacked"), unique("inst")
	slots := mqtt.NewSlots()
	d := newDriver(t, brokerAddr(), instance, slots)
	first := subscribe(t, d, topic, "g")
	publish(t, d, topic, "m1")
	if got := receive(t, first, 10*time.Second); got == nil || string(got.Message().Payload) != "m1" {
		t.Fatalf("first member got %v", got)
	}
	other := subscribe(t, d, topic, "g") // slot 1: a second live member
	closeSub(t, first)                   // m1 unacknowledged
	if got := receive(t, other, time.Second); got != nil {
		t.Fatalf("the other live member got %q: Mosquitto redistributed an unacknowledged message", got.Message().Payload)
	}
	again := subscribe(t, d, topic, "g") // slot 0 again: the session of the first
	got := receive(t, again, 10*time.Second)
	if got == nil || string(got.Message().Payload) != "m1" {
		t.Fatalf("the restarted member got %v, want m1", got)
	}
	if err := got.Ack(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestAbsentMemberGetsItsShare: Mosquitto deals shared-subscription messages
// round robin over every member session, present or not; an absent member's
// share waits in its session.
func TestAbsentMemberGetsItsShare(t *testing.T) {
	requireBroker(t)
	topic, instance := unique("share"), unique("inst")
	d := newDriver(t, brokerAddr(), instance, mqtt.NewSlots())
	a := subscribe(t, d, topic, "g")
	b := subscribe(t, d, topic, "g")
	closeSub(t, a)
	ids := []string{"m0", "m1", "m2", "m3", "m4", "m5"}
	publish(t, d, topic, ids...)
	seen := map[string]bool{}
	for {
		dl := receive(t, b, 500*time.Millisecond)
		if dl == nil {
			break
		}
		seen[string(dl.Message().Payload)] = true
		if err := dl.Ack(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if len(seen) == len(ids) {
		t.Fatalf("the present member got all %d messages: Mosquitto skipped the absent one", len(ids))
	}
	back := subscribe(t, d, topic, "g")
	for len(seen) < len(ids) {
		dl := receive(t, back, 10*time.Second)
		if dl == nil {
			t.Fatalf("the returning member's share did not arrive; have %v", seen)
		}
		seen[string(dl.Message().Payload)] = true
		if err := dl.Ack(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// TestHeadersMosquittoWouldRefuse: header values with control characters or
// invalid UTF-8 make Mosquitto drop the connection; the adapter encodes them
// and they arrive unchanged, with the connection intact.
func TestHeadersMosquittoWouldRefuse(t *testing.T) {
	requireBroker(t)
	topic := unique("headers")
	d := newDriver(t, brokerAddr(), unique("inst"), mqtt.NewSlots())
	s := subscribe(t, d, topic, "g")
	want := &driver.Message{Key: "key\twith tab", Payload: []byte{0, 1, 0xff}, Headers: map[string]string{
		"msgx-dead-reason": "handler panic: boom\ngoroutine 1 [running]:\n\tmain.go:1",
		"latin1":           "caf\xe9",
		"msgx-key":         "a header that looks like the key property",
		"plain":            "Ünïcødé ✓",
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.Publish(ctx, topic, []*driver.Message{want}); err != nil {
		t.Fatal(err)
	}
	got := receive(t, s, 10*time.Second)
	if got == nil {
		t.Fatal("nothing received")
	}
	m := got.Message()
	if m.Key != want.Key || string(m.Payload) != string(want.Payload) || !maps.Equal(m.Headers, want.Headers) {
		t.Errorf("got key %q payload %x headers %q; want %q %x %q", m.Key, m.Payload, m.Headers, want.Key, want.Payload, want.Headers)
	}
	if err := got.Ack(ctx); err != nil {
		t.Errorf("ack: %v", err)
	}
	publish(t, d, topic, "after") // the connection survived
}

// TestRefusedPublish: a failure reason code in the PUBACK is ErrRefused and
// the connection stays usable.
func TestRefusedPublish(t *testing.T) {
	requireBroker(t)
	d := newDriver(t, brokerAddr(), unique("inst"), mqtt.NewSlots())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := d.Publish(ctx, "$SYS/msgx/refused", []*driver.Message{{Payload: []byte("x")}, {Payload: []byte("y")}})
	if !errors.Is(err, mqtt.ErrRefused) {
		t.Fatalf("publish to $SYS = %v, want ErrRefused", err)
	}
	if code := driver.Code(err); code != driver.Rejected { // 0x87 not authorized
		t.Errorf("publish to $SYS: class %v, want %v: %v", code, driver.Rejected, err)
	}
	err = d.Publish(ctx, "a/+", []*driver.Message{{Payload: []byte("x")}})
	if !errors.Is(err, mqtt.ErrInvalidTopic) {
		t.Errorf("publish to a wildcard = %v, want ErrInvalidTopic", err)
	}
	if code := driver.Code(err); code != driver.Rejected {
		t.Errorf("publish to a wildcard: class %v, want %v", code, driver.Rejected)
	}
	publish(t, d, unique("after-refusal"), "ok")
}

// TestPublishFailsWhenConnectionCut: a publish while the connection is cut
// fails promptly with ErrConnectionLost, not when its context ends; the loss is
// reported on Errors and the driver reconnects once the broker is back.
func TestPublishFailsWhenConnectionCut(t *testing.T) {
	requireBroker(t)
	proxy, err := brokertest.NewProxy(brokerAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	d := newDriver(t, proxy.Addr(), unique("inst"), mqtt.NewSlots())
	topic := unique("cut")
	proxy.Cut()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	err = d.Publish(ctx, topic, []*driver.Message{{Payload: []byte("x")}})
	if !errors.Is(err, mqtt.ErrConnectionLost) {
		t.Fatalf("publish during the outage = %v, want ErrConnectionLost", err)
	}
	if code := driver.Code(err); code != driver.Unavailable {
		t.Errorf("publish during the outage: class %v, want %v", code, driver.Unavailable)
	}
	if waited := time.Since(start); waited > 10*time.Second {
		t.Errorf("publish took %v to fail", waited)
	}
	select {
	case e := <-d.Errors():
		if e == nil {
			t.Error("nil error reported")
		}
	case <-time.After(10 * time.Second):
		t.Error("the lost connection was not reported on Errors")
	}
	proxy.Restore()
	deadline := time.Now().Add(20 * time.Second)
	for {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		err := d.Publish(pctx, topic, []*driver.Message{{Payload: []byte("y")}})
		pcancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no reconnection after the outage: %v", err)
		}
	}
}

// TestSharedInstanceIDIsReported: two processes that share an instance id
// use the same client ids. Mosquitto 2.0 closes the older connection without
// a DISCONNECT reason code (so session takeover cannot be told from other
// losses); the displaced subscription reports each lost connection on Errors.
func TestSharedInstanceIDIsReported(t *testing.T) {
	requireBroker(t)
	topic, instance := unique("takeover"), unique("inst")
	d1 := newDriver(t, brokerAddr(), instance, mqtt.NewSlots())
	d2 := newDriver(t, brokerAddr(), instance, mqtt.NewSlots()) // no shared slots: same client id
	s1 := subscribe(t, d1, topic, "g")
	for len(d1.Errors()) > 0 { // connection reports before the clash do not count
		<-d1.Errors()
	}
	s2 := subscribe(t, d2, topic, "g")
	deadline := time.After(10 * time.Second)
	for {
		select {
		case e := <-d1.Errors():
			if e != nil && strings.Contains(e.Error(), "subscription") {
				closeSub(t, s2)
				closeSub(t, s1)
				return
			}
		case <-deadline:
			t.Fatal("the displaced subscription reported nothing")
		}
	}
}

// TestDeadLettersKeptWithoutAReader: no reader of the dead-letter topic
// exists when a dead letter is sent; the session the subscription set up
// keeps it, and a reader of DeadLetterGroup on the same instance gets it.
func TestDeadLettersKeptWithoutAReader(t *testing.T) {
	requireBroker(t)
	instance := unique("dlkeep")
	d := newDriver(t, brokerAddr(), instance, mqtt.NewSlots())
	topic := unique("dl")
	s := subscribe(t, d, topic, "g")
	publish(t, d, topic, "poison")
	dl := receive(t, s, 10*time.Second)
	if dl == nil {
		t.Fatal("message never delivered")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := dl.DeadLetter(ctx, &driver.Message{Payload: []byte("poison")}); err != nil {
		t.Fatalf("dead letter with no reader yet: %v", err)
	}
	closeSub(t, s)
	reader := subscribe(t, d, topic+".dlq", mqtt.DeadLetterGroup)
	defer closeSub(t, reader)
	got := receive(t, reader, 10*time.Second)
	if got == nil || string(got.Message().Payload) != "poison" {
		t.Fatalf("dead letter not kept for its reader: %v", got)
	}
	if err := got.Ack(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestStoredPublishWithoutSubscriberFails: the broker's PUBACK 0x10 (no
// subscriber) means the message is gone; a re-publish or dead letter must
// not take it for a success.
func TestStoredPublishWithoutSubscriberFails(t *testing.T) {
	requireBroker(t)
	d := newDriver(t, brokerAddr(), unique("nosub"), mqtt.NewSlots())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := mqtt.PublishStored(ctx, d, unique("nobody"), []*driver.Message{{Payload: []byte("x")}})
	if !errors.Is(err, mqtt.ErrRefused) {
		t.Fatalf("stored publish to a topic nobody subscribes = %v, want ErrRefused", err)
	}
}

// TestRequeueStaysInItsGroup: a requeued copy goes to the group's own retry
// topic: the group gets it again, another group of the topic never sees it.
func TestRequeueStaysInItsGroup(t *testing.T) {
	requireBroker(t)
	d := newDriver(t, brokerAddr(), unique("requeue"), mqtt.NewSlots())
	topic := unique("rq")
	sa, sb := subscribe(t, d, topic, "ga"), subscribe(t, d, topic, "gb")
	defer closeSub(t, sa)
	defer closeSub(t, sb)
	publish(t, d, topic, "m")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	da := receive(t, sa, 10*time.Second)
	if da == nil {
		t.Fatal("group a got nothing")
	}
	if err := da.Requeue(ctx, &driver.Message{Payload: []byte("m")}, 0); err != nil {
		t.Fatalf("requeue: %v", err)
	}
	if again := receive(t, sa, 10*time.Second); again == nil || string(again.Message().Payload) != "m" {
		t.Fatalf("group a did not get its requeued copy: %v", again)
	} else if err := again.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	db := receive(t, sb, 10*time.Second)
	if db == nil || string(db.Message().Payload) != "m" {
		t.Fatalf("group b did not get the message: %v", db)
	}
	if err := db.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	publish(t, d, topic, "barrier")
	if next := receive(t, sb, 10*time.Second); next == nil || string(next.Message().Payload) != "barrier" {
		t.Fatalf("group b got %v after the requeue in group a, want only the barrier", next)
	}
}
