package outbox_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/broker/rabbitmq"
	"github.com/msgx/msgx/internal/backoff"
	"github.com/msgx/msgx/internal/reliability"
	"github.com/msgx/msgx/store/storetest"
)

const rabbitAddr = "127.0.0.1:5672"

// TestRabbitMQOutageChargesNothing: RabbitMQ away for 3 minutes while events
// are produced. The server is shared with other tests, so it is not stopped:
// msgx reaches it through a TCP proxy that, for the outage, closes every open
// connection and refuses new ones, which is what msgx sees of a stopped
// server.
func TestRabbitMQOutageChargesNothing(t *testing.T) {
	db := storetest.NewPostgres(t)
	suffix := make([]byte, 6)
	_, _ = rand.Read(suffix)
	topicP, topicU := "outage.p."+hex.EncodeToString(suffix), "outage.u."+hex.EncodeToString(suffix)

	// The wire: a direct connection (not through the proxy) reads the
	// topics' exchanges through a queue of its own, in the broker's order.
	conn, err := amqp.DialConfig("amqp://guest:guest@"+rabbitAddr+"/", amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		t.Fatalf("RabbitMQ at %s: %v", rabbitAddr, err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	wire := &wireLog{}
	for _, topic := range []string{topicP, topicU} {
		if err := ch.ExchangeDeclare(topic, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = ch.ExchangeDelete(topic, false, false) }()
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

	px, err := reliability.NewProxy(rabbitAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = px.Close() }()
	cut := func(down bool) {
		px.Refuse(down)
		if down {
			px.Cut()
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := broker.New("rabbitmq", rabbitmq.New(rabbitmq.WithURL("amqp://guest:guest@"+px.Addr()+"/"), rabbitmq.WithLogger(quiet()),
		rabbitmq.WithDialTimeout(time.Second),
		rabbitmq.WithReconnectBackoff(backoff.Policy{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond})),
		broker.WithLogger(quiet()))
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Stop(context.Background()) }()

	newOutage(t, db, b, wire, cut, topicP, topicU).run(3 * time.Minute)
}
