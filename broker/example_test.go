package broker_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/broker/rabbitmq"
)

// A listener's handler decides each delivery's fate by what it returns: nil
// acknowledges it, an error requeues it (to come back after the retry
// policy's backoff, here 1 s), an error wrapped by broker.Poison sends it to
// the dead-letter topic at once with the reason in its headers. The example
// runs against the RabbitMQ server on 127.0.0.1.
func Example_dispositions() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	b := broker.New("rabbit", rabbitmq.New(rabbitmq.WithURL(rabbitmq.DefaultURL), rabbitmq.WithLogger(quiet)), broker.WithLogger(quiet))
	if err := b.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer b.Stop(context.Background())
	topic := "example.orders." + suffix()
	defer deleteTopology(topic)

	handled := make(chan string, 8)
	orders, err := b.Listen(ctx, broker.Subscription{Topic: topic, Group: "billing"},
		func(ctx context.Context, d *broker.Delivery) error {
			switch p := string(d.Payload); {
			case p == "order 3: unreadable":
				handled <- p + " -> dead letter"
				return broker.Poison(errors.New("no order number"))
			case p == "order 2" && d.RedeliveryCount == 0:
				handled <- p + " -> requeued (the database is busy)"
				return errors.New("database busy")
			default:
				handled <- fmt.Sprintf("%s -> acknowledged (redeliveries: %d)", p, d.RedeliveryCount)
				return nil
			}
		})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer orders.Stop(context.Background())
	// Dead letters are kept in the dead-letter topic's own group until read.
	dead := make(chan *broker.Delivery, 1)
	dlq, err := b.Listen(ctx, broker.Subscription{Topic: topic + ".dlq", Group: broker.DeadLetterGroup},
		func(ctx context.Context, d *broker.Delivery) error { dead <- d; return nil })
	if err != nil {
		fmt.Println(err)
		return
	}
	defer dlq.Stop(context.Background())

	for _, p := range []string{"order 1", "order 2", "order 3: unreadable"} {
		// One key: handled one at a time, in order; a requeued delivery
		// comes back after its backoff, behind the ones sent after it.
		if err := b.SendConfirmed(ctx, topic, &broker.Message{Key: "customer-7", Payload: []byte(p)}); err != nil {
			fmt.Println(err)
			return
		}
	}
	for range 4 {
		fmt.Println(<-handled)
	}
	d := <-dead
	fmt.Printf("dead letter %q: %s (%s)\n", d.Payload, d.Headers[broker.HeaderDeadReason], d.Headers[broker.HeaderDeadClass])
	// Output:
	// order 1 -> acknowledged (redeliveries: 0)
	// order 2 -> requeued (the database is busy)
	// order 3: unreadable -> dead letter
	// order 2 -> acknowledged (redeliveries: 1)
	// dead letter "order 3: unreadable": poison message: no order number (poison)
}

func suffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// deleteTopology removes what the adapter declared for the example's topic.
func deleteTopology(topic string) {
	conn, err := amqp.Dial(rabbitmq.DefaultURL)
	if err != nil {
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	for _, q := range []string{rabbitmq.QueueName(topic, "billing"), rabbitmq.QueueName(topic+".dlq", broker.DeadLetterGroup),
		rabbitmq.QueueName(topic, "billing") + "/retry", rabbitmq.QueueName(topic+".dlq", broker.DeadLetterGroup) + "/retry"} {
		_, _ = ch.QueueDelete(q, false, false, false)
	}
	for _, x := range []string{topic, topic + ".dlq", topic + ".dlq.dlq"} {
		_ = ch.ExchangeDelete(x, false, false)
	}
}
