package outbox_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/msgx/msgx/backoff"
	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/broker/rabbitmq"
	"github.com/msgx/msgx/internal/tcpproxy"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

const rabbitAddr = "127.0.0.1:5672"

// TestRabbitMQOutageChargesNothing: RabbitMQ away for 3 minutes while events
// are produced. The server is shared with other tests, so it is not stopped:
// msgx reaches it through a TCP proxy that, for the outage, closes every open
// connection and refuses new ones, which is what msgx sees of a stopped
// server.
func TestRabbitMQOutageChargesNothing(t *testing.T) {
	db, b, wire, cut, topicP, topicU := rabbitOutage(t)
	newOutage(t, db, b, wire, cut, topicP, topicU).run(3 * time.Minute)
}

// rabbitOutage sets up an outage test on the shared RabbitMQ server: the
// topics' exchanges, a direct consumer of each (the wire), the proxy msgx
// reaches the server through and the broker over it.
func rabbitOutage(t *testing.T) (db *store.DB, b *broker.Broker, wire *wireLog, cut func(bool), topicP, topicU string) {
	db = storetest.NewPostgres(t, store.WithMigrate(outbox.Schema()))
	suffix := make([]byte, 6)
	_, _ = rand.Read(suffix)
	topicP, topicU = "outage.p."+hex.EncodeToString(suffix), "outage.u."+hex.EncodeToString(suffix)

	// The wire: a direct connection (not through the proxy) reads the
	// topics' exchanges through a queue of its own, in the broker's order.
	conn, err := amqp.DialConfig("amqp://guest:guest@"+rabbitAddr+"/", amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		t.Fatalf("RabbitMQ at %s: %v", rabbitAddr, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	wire = &wireLog{}
	for _, topic := range []string{topicP, topicU} {
		if err := ch.ExchangeDeclare(topic, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ch.ExchangeDelete(topic, false, false) })
		q, err := ch.QueueDeclare("", false, true, true, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := ch.QueueBind(q.Name, "", topic, false, nil); err != nil {
			t.Fatal(err)
		}
		deliveries, err := ch.Consume(q.Name, "", true, true, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for d := range deliveries {
				id, _ := d.Headers[broker.HeaderEventID].(string)
				key, _ := d.Headers[broker.HeaderPartitionKey].(string)
				wire.add(wireMsg{topic: topic, key: key, eventID: id})
			}
		}()
	}

	px, err := tcpproxy.New(rabbitAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })
	cut = func(down bool) {
		px.Refuse(down)
		if down {
			px.Cut()
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	b = broker.New("rabbitmq", rabbitmq.New(rabbitmq.WithURL("amqp://guest:guest@"+px.Addr()+"/"), rabbitmq.WithLogger(testkit.Quiet()),
		rabbitmq.WithDialTimeout(time.Second),
		rabbitmq.WithReconnectBackoff(backoff.Policy{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond})),
		broker.WithLogger(testkit.Quiet()))
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Stop(context.Background()) })
	return db, b, wire, cut, topicP, topicU
}

// TestRabbitMQOutageWithARejectedEventKeepsKeyOrder: RabbitMQ away for
// longer than the retry budget while events are produced, and one event of
// the per-key target's key k0, produced as the outage began, is one the
// broker rejects once it is back. It goes DEAD and holds k0: k0's later
// events wait, never tried, while every other key and the unordered target
// are delivered. The operator's replay (the cause fixed) sends it, then k0's
// waiting events, and the wire shows every key of the per-key target in
// order, k0 with no gap.
func TestRabbitMQOutageWithARejectedEventKeepsKeyOrder(t *testing.T) {
	db, b, wire, cut, topicP, topicU := rabbitOutage(t)
	o := newOutage(t, db, b, wire, cut, topicP, topicU)
	bad := fmt.Sprintf("%s/k0/%04d", targetP, 1)
	o.pub.reject.Store(&bad)
	held := func(id string) bool { // k0's events behind the rejected one
		return strings.HasPrefix(id, targetP+"/k0/") && id > bad
	}
	o.runUntil(2*time.Minute, func(id string) bool { return id == bad || held(id) })

	ctx := context.Background()
	if rec := get(t, db, bad); rec.Status != outbox.StatusDead || !strings.Contains(rec.LastError, "message too large") {
		t.Fatalf("the rejected event: %+v, want DEAD", rec)
	}
	waiting := 0
	for id := range o.want {
		if held(id) {
			waiting++
			if rec := get(t, db, id); rec.Status != outbox.StatusPending || rec.Attempts != 0 {
				t.Fatalf("%s behind the dead one: %+v, want PENDING and never tried", id, rec)
			}
		}
	}
	blocked, err := outbox.BlockedKeys(ctx, db, targetP, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(blocked) != 1 || blocked[0].Key != "k0" || blocked[0].EventID != bad || blocked[0].Waiting != int64(waiting) || waiting == 0 {
		t.Fatalf("blocked keys %+v, want k0 held by %s with %d waiting", blocked, bad, waiting)
	}
	for _, m := range o.wire.all() {
		if m.eventID == bad || held(m.eventID) {
			t.Fatalf("%s on the wire before the replay", m.eventID)
		}
	}

	// The operator fixes the cause and replays the dead event.
	o.pub.reject.Store(nil)
	if _, err := outbox.Replay(ctx, db, o.clk.Now(), outbox.ReplayRequest{EventIDs: []string{bad}, Actor: "ops", Reason: "limit raised"}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for !o.delivered() {
		if time.Now().After(deadline) {
			t.Fatalf("k0 not delivered 2 minutes after the replay; blocked %+v", blocked)
		}
		o.step(time.Second)
	}
	o.checkOrder()
	var k0 []string
	for _, m := range o.wire.all() {
		if m.topic == topicP && m.key == "k0" && (len(k0) == 0 || k0[len(k0)-1] != m.eventID) {
			k0 = append(k0, m.eventID)
		}
	}
	for i, id := range k0 {
		if want := fmt.Sprintf("%s/k0/%04d", targetP, i); id != want {
			t.Fatalf("k0 on the wire: %v, want every round in order (%s at %d)", k0, want, i)
		}
	}
	t.Logf("k0 on the wire: %d events in order, %d of them waited behind %s", len(k0), waiting, bad)
}
