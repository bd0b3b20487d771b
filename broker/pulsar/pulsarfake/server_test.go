package pulsarfake_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsar/backoff"
	plog "github.com/apache/pulsar-client-go/pulsar/log"

	"github.com/msgx/msgx/broker/pulsar/pulsarfake"
	"github.com/msgx/msgx/internal/testkit"
)

func newServer(t *testing.T) *pulsarfake.Server {
	t.Helper()
	srv, err := pulsarfake.New(pulsarfake.WithLogger(testkit.Quiet()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

func newClient(t *testing.T, url string) pulsar.Client {
	t.Helper()
	c, err := pulsar.NewClient(pulsar.ClientOptions{
		URL:              url,
		OperationTimeout: 10 * time.Second,
		Logger:           plog.NewLoggerWithSlog(testkit.Quiet()),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func topicName(t *testing.T) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")) + "-" + hex.EncodeToString(b[:])
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

func producer(t *testing.T, c pulsar.Client, topic string, batching bool) pulsar.Producer {
	t.Helper()
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: !batching})
	if err != nil {
		t.Fatalf("create producer: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

func subscribe(t *testing.T, c pulsar.Client, topic, sub string, opts pulsar.ConsumerOptions) pulsar.Consumer {
	t.Helper()
	opts.Topic, opts.SubscriptionName = topic, sub
	if opts.Type == 0 {
		opts.Type = pulsar.Shared
	}
	opts.SubscriptionInitialPosition = pulsar.SubscriptionPositionEarliest
	cons, err := c.Subscribe(opts)
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	return cons
}

func send(t *testing.T, p pulsar.Producer, key, payload string, props map[string]string) pulsar.MessageID {
	t.Helper()
	id, err := p.Send(ctx(t), &pulsar.ProducerMessage{Key: key, Payload: []byte(payload), Properties: props})
	if err != nil {
		t.Fatalf("send %s: %v", payload, err)
	}
	return id
}

func receive(t *testing.T, c pulsar.Consumer) pulsar.Message {
	t.Helper()
	m, err := c.Receive(ctx(t))
	if err != nil {
		t.Fatalf("receive: %v", err)
	}
	return m
}

// receiveAll receives and acknowledges until every payload in want has come,
// in any order and whatever else comes too.
func receiveAll(t *testing.T, c pulsar.Consumer, want ...string) {
	t.Helper()
	got := map[string]bool{}
	for n := 0; n < len(want); {
		m := receive(t, c)
		p := string(m.Payload())
		if slices.Contains(want, p) && !got[p] {
			got[p] = true
			n++
		}
		_ = c.Ack(m)
	}
}

func TestProduceConsume(t *testing.T) {
	srv := newServer(t)
	c := newClient(t, srv.URL())
	topic := topicName(t)
	cons := subscribe(t, c, topic, "s", pulsar.ConsumerOptions{})
	defer cons.Close()
	p := producer(t, c, topic, false)
	id0 := send(t, p, "k1", "m0", map[string]string{"h": "v"})
	id1 := send(t, p, "", "m1", nil)
	if id0.LedgerID() != id1.LedgerID() || id1.EntryID() != id0.EntryID()+1 {
		t.Errorf("message ids %v then %v, want consecutive entries of one ledger", id0, id1)
	}
	m := receive(t, cons)
	if string(m.Payload()) != "m0" || m.Key() != "k1" || m.Properties()["h"] != "v" || m.RedeliveryCount() != 0 {
		t.Errorf("first message = %q key %q props %v count %d", m.Payload(), m.Key(), m.Properties(), m.RedeliveryCount())
	}
	if m.ID().EntryID() != id0.EntryID() {
		t.Errorf("delivered id %v, want %v", m.ID(), id0)
	}
	if err := cons.Ack(m); err != nil {
		t.Fatal(err)
	}
	if m := receive(t, cons); string(m.Payload()) != "m1" {
		t.Errorf("second message = %q", m.Payload())
	}
}

func TestRefusedTopic(t *testing.T) {
	srv := newServer(t)
	c := newClient(t, srv.URL())
	srv.Refuse("refused-topic")
	_, err := c.CreateProducer(pulsar.ProducerOptions{Topic: "refused-topic"})
	if err == nil {
		t.Fatal("producer on a refused topic was created")
	}
	// Other topics still work.
	producer(t, c, topicName(t), false)
}

func TestBatchedEntryDeliveredWhole(t *testing.T) {
	srv := newServer(t)
	c := newClient(t, srv.URL())
	topic := topicName(t)
	cons := subscribe(t, c, topic, "s", pulsar.ConsumerOptions{})
	defer cons.Close()
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, BatchingMaxPublishDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	done := make(chan error, 3)
	for i := range 3 {
		p.SendAsync(ctx(t), &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "b%d", i)}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) { done <- err })
	}
	if err := p.FlushWithCtx(ctx(t)); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	var entry int64 = -1
	for i := range 3 {
		m := receive(t, cons)
		if string(m.Payload()) != fmt.Sprintf("b%d", i) {
			t.Errorf("message %d = %q", i, m.Payload())
		}
		if entry >= 0 && m.ID().EntryID() != entry {
			t.Errorf("batch split over entries %d and %d", entry, m.ID().EntryID())
		}
		entry = m.ID().EntryID()
		_ = cons.Ack(m)
	}
}

func TestSharedSubscriptionSplitsAndBroadcast(t *testing.T) {
	const n = 200
	srv := newServer(t)
	c1, c2 := newClient(t, srv.URL()), newClient(t, srv.URL())
	topic := topicName(t)
	a := subscribe(t, c1, topic, "shared", pulsar.ConsumerOptions{ReceiverQueueSize: 10})
	defer a.Close()
	b := subscribe(t, c2, topic, "shared", pulsar.ConsumerOptions{ReceiverQueueSize: 10})
	defer b.Close()
	other := subscribe(t, c1, topic, "other", pulsar.ConsumerOptions{})
	defer other.Close()
	p := producer(t, c1, topic, false)
	for i := range n {
		p.SendAsync(ctx(t), &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "%d", i)}, nil)
	}
	if err := p.FlushWithCtx(ctx(t)); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	perConsumer := map[string]int{}
	for len(seen) < n {
		select {
		case cm := <-a.Chan():
			seen[string(cm.Payload())]++
			perConsumer["a"]++
			_ = a.Ack(cm.Message)
		case cm := <-b.Chan():
			seen[string(cm.Payload())]++
			perConsumer["b"]++
			_ = b.Ack(cm.Message)
		case <-ctx(t).Done():
			t.Fatalf("shared subscription delivered %d of %d", len(seen), n)
		}
	}
	for k, v := range seen {
		if v != 1 {
			t.Errorf("message %s delivered %d times", k, v)
		}
	}
	if perConsumer["a"] == 0 || perConsumer["b"] == 0 {
		t.Errorf("shared dispatch did not use both consumers: %v", perConsumer)
	}
	for i := range n {
		m := receive(t, other)
		if string(m.Payload()) != fmt.Sprint(i) {
			t.Fatalf("second subscription got %q at %d", m.Payload(), i)
		}
		_ = other.Ack(m)
	}
}

func TestNackRedeliversWithCount(t *testing.T) {
	srv := newServer(t)
	c := newClient(t, srv.URL())
	topic := topicName(t)
	cons := subscribe(t, c, topic, "s", pulsar.ConsumerOptions{NackRedeliveryDelay: 30 * time.Millisecond, AckWithResponse: true})
	defer cons.Close()
	p := producer(t, c, topic, false)
	send(t, p, "", "again", nil)
	for want := uint32(0); want < 3; want++ {
		m := receive(t, cons)
		if m.RedeliveryCount() != want {
			t.Fatalf("redelivery count = %d, want %d", m.RedeliveryCount(), want)
		}
		cons.Nack(m)
	}
	m := receive(t, cons)
	if err := cons.Ack(m); err != nil {
		t.Fatalf("ack with response: %v", err)
	}
}

func TestUnackedRedeliveredWhenConsumerCloses(t *testing.T) {
	srv := newServer(t)
	c := newClient(t, srv.URL())
	topic := topicName(t)
	cons := subscribe(t, c, topic, "s", pulsar.ConsumerOptions{AckWithResponse: true})
	p := producer(t, c, topic, false)
	send(t, p, "", "first", nil)
	send(t, p, "", "second", nil)
	m := receive(t, cons)
	if err := cons.Ack(m); err != nil {
		t.Fatal(err)
	}
	_ = receive(t, cons) // "second", never acknowledged
	cons.Close()

	again := subscribe(t, c, topic, "s", pulsar.ConsumerOptions{})
	defer again.Close()
	if m := receive(t, again); string(m.Payload()) != "second" {
		t.Fatalf("after close got %q, want the unacknowledged \"second\"", m.Payload())
	}
}

func TestCutConnectionsRedeliversAndReconnects(t *testing.T) {
	srv := newServer(t)
	c := newClient(t, srv.URL())
	topic := topicName(t)
	// The client library's producer reconnect races with its own send path,
	// so this producer does not reconnect: a new one sends after the cut.
	noReconnect := new(uint)
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true, MaxReconnectToBroker: noReconnect})
	if err != nil {
		t.Fatal(err)
	}
	cons := subscribe(t, c, topic, "s", pulsar.ConsumerOptions{})
	defer cons.Close()
	send(t, p, "", "before", nil)
	if m := receive(t, cons); string(m.Payload()) != "before" {
		t.Fatalf("got %q", m.Payload())
	}
	srv.CutConnections()
	p.Close()
	// Unacknowledged "before" comes back over the new connection, then "after".
	send(t, producer(t, c, topic, false), "", "after", nil)
	receiveAll(t, cons, "before", "after")
}

func TestFailoverServesOneConsumer(t *testing.T) {
	srv := newServer(t)
	c := newClient(t, srv.URL())
	topic := topicName(t)
	a := subscribe(t, c, topic, "f", pulsar.ConsumerOptions{Type: pulsar.Failover, Name: "a"})
	b := subscribe(t, c, topic, "f", pulsar.ConsumerOptions{Type: pulsar.Failover, Name: "b"})
	defer b.Close()
	p := producer(t, c, topic, false)
	for i := range 5 {
		send(t, p, "", fmt.Sprint(i), nil)
	}
	for i := range 5 {
		if m := receive(t, a); string(m.Payload()) != fmt.Sprint(i) {
			t.Fatalf("active consumer got %q at %d", m.Payload(), i)
		}
	}
	select {
	case cm := <-b.Chan():
		t.Fatalf("standby consumer received %q", cm.Payload())
	default:
	}
	a.Close() // nothing acknowledged: the standby takes over from the start
	for i := range 5 {
		if m := receive(t, b); string(m.Payload()) != fmt.Sprint(i) {
			t.Fatalf("standby got %q at %d", m.Payload(), i)
		}
	}
}

func TestKeySharedKeepsKeysTogether(t *testing.T) {
	srv := newServer(t)
	c := newClient(t, srv.URL())
	topic := topicName(t)
	a := subscribe(t, c, topic, "ks", pulsar.ConsumerOptions{Type: pulsar.KeyShared, ReceiverQueueSize: 5})
	defer a.Close()
	b := subscribe(t, c, topic, "ks", pulsar.ConsumerOptions{Type: pulsar.KeyShared, ReceiverQueueSize: 5})
	defer b.Close()
	p := producer(t, c, topic, false)
	const keys, per = 8, 10
	for i := range per {
		for k := range keys {
			p.SendAsync(ctx(t), &pulsar.ProducerMessage{Key: fmt.Sprint("k", k), Payload: fmt.Appendf(nil, "%d", i)}, nil)
		}
	}
	if err := p.FlushWithCtx(ctx(t)); err != nil {
		t.Fatal(err)
	}
	owner := map[string]string{}
	next := map[string]int{}
	for got := 0; got < keys*per; got++ {
		var m pulsar.Message
		var who string
		select {
		case cm := <-a.Chan():
			m, who = cm.Message, "a"
			_ = a.Ack(m)
		case cm := <-b.Chan():
			m, who = cm.Message, "b"
			_ = b.Ack(m)
		case <-ctx(t).Done():
			t.Fatalf("received %d of %d", got, keys*per)
		}
		if o, ok := owner[m.Key()]; ok && o != who {
			t.Errorf("key %s went to %s and %s", m.Key(), o, who)
		}
		owner[m.Key()] = who
		if string(m.Payload()) != fmt.Sprint(next[m.Key()]) {
			t.Errorf("key %s: got %s, want %d", m.Key(), m.Payload(), next[m.Key()])
		}
		next[m.Key()]++
	}
}

func TestUnmodelledRequestAnsweredWithError(t *testing.T) {
	srv := newServer(t)
	c := newClient(t, srv.URL())
	topic := topicName(t)
	cons := subscribe(t, c, topic, "s", pulsar.ConsumerOptions{})
	defer cons.Close()
	start := time.Now()
	if err := cons.Seek(pulsar.EarliestMessageID()); err == nil {
		t.Fatal("seek succeeded on a fake that does not model it")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("seek took %v: the fake did not answer", d)
	}
}

// TestDefaultRetention: what no subscription holds is dropped, as under
// Pulsar's default retention: a message published before any subscription
// existed, and one every subscription acknowledged. A subscription from the
// earliest position starts at the first message still kept.
func TestDefaultRetention(t *testing.T) {
	srv := newServer(t)
	c := newClient(t, srv.URL())
	topic := topicName(t)
	p := producer(t, c, topic, false)
	send(t, p, "", "nobody-subscribed", nil)
	first := subscribe(t, c, topic, "first", pulsar.ConsumerOptions{AckWithResponse: true})
	defer first.Close()
	send(t, p, "", "acked", nil)
	send(t, p, "", "kept", nil)
	if m := receive(t, first); string(m.Payload()) != "acked" {
		t.Fatalf("first subscription got %q, want \"acked\" (the earlier message had no subscription)", m.Payload())
	} else if err := first.Ack(m); err != nil {
		t.Fatal(err)
	}
	late := subscribe(t, c, topic, "late", pulsar.ConsumerOptions{})
	defer late.Close()
	if m := receive(t, late); string(m.Payload()) != "kept" {
		t.Fatalf("a subscription created later got %q, want \"kept\", the first message still held", m.Payload())
	}
}

// TestUnloadClosesProducersAndConsumers: an unload tells the topic's
// producers and consumers with CLOSE_PRODUCER and CLOSE_CONSUMER; consumers
// re-attach and go on, their unacknowledged messages redelivered.
func TestUnloadClosesProducersAndConsumers(t *testing.T) {
	srv := newServer(t)
	c := newClient(t, srv.URL())
	topic := topicName(t)
	cons := subscribe(t, c, topic, "s", pulsar.ConsumerOptions{})
	defer cons.Close()
	// The producer does not reconnect (see TestCutConnectionsRedeliversAndReconnects);
	// the client asks it for a reconnection backoff when its broker closes it.
	closed := make(chan struct{}, 1)
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true, MaxReconnectToBroker: new(uint),
		BackOffPolicyFunc: func() backoff.Policy {
			closed <- struct{}{}
			return &backoff.DefaultBackoff{}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	send(t, p, "", "before", nil)
	if m := receive(t, cons); string(m.Payload()) != "before" {
		t.Fatalf("got %q", m.Payload())
	}
	if np, nc := srv.Unload(topic); np != 1 || nc != 1 {
		t.Fatalf("unload closed %d producers and %d consumers, want 1 and 1", np, nc)
	}
	select {
	case <-closed:
	case <-ctx(t).Done():
		t.Fatal("the producer was never told it was closed")
	}
	send(t, producer(t, c, topic, false), "", "after", nil)
	receiveAll(t, cons, "before", "after")
}

// TestDeliverAfter: a Shared subscription holds a message sent with a
// delivery delay until it is due, while later messages go ahead; a Failover
// subscription delivers it at once, as Pulsar does.
func TestDeliverAfter(t *testing.T) {
	srv := newServer(t)
	c := newClient(t, srv.URL())
	topic := topicName(t)
	shared := subscribe(t, c, topic, "shared", pulsar.ConsumerOptions{})
	defer shared.Close()
	failover := subscribe(t, c, topic, "failover", pulsar.ConsumerOptions{Type: pulsar.Failover})
	defer failover.Close()
	p := producer(t, c, topic, false)
	const delay = 700 * time.Millisecond
	sent := time.Now()
	if _, err := p.Send(ctx(t), &pulsar.ProducerMessage{Payload: []byte("later"), DeliverAfter: delay}); err != nil {
		t.Fatal(err)
	}
	send(t, p, "", "now", nil)
	if m := receive(t, shared); string(m.Payload()) != "now" {
		t.Fatalf("shared subscription got %q first, want \"now\": the delayed message went ahead", m.Payload())
	}
	if m := receive(t, shared); string(m.Payload()) != "later" {
		t.Fatalf("shared subscription got %q, want \"later\"", m.Payload())
	} else if since := time.Since(sent); since < delay-time.Millisecond {
		// deliver_at_time is in whole milliseconds, truncated by the client.
		t.Errorf("delayed message delivered after %v, want no earlier than %v", since, delay)
	}
	if m := receive(t, failover); string(m.Payload()) != "later" {
		t.Fatalf("failover subscription got %q first, want \"later\" in log order", m.Payload())
	}
}
