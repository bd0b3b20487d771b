package outbox_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log"
	"log/slog"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/broker/rabbitmq"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// A program that only needs the outbox: it migrates the outbox's tables and
// nothing else, enqueues an event in the same PostgreSQL transaction as its
// own write, and relays it to RabbitMQ (a topic is a fanout exchange there).
func Example_postgresToRabbitMQ() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	quiet := slog.New(slog.DiscardHandler)
	suffix := make([]byte, 6)
	_, _ = rand.Read(suffix)
	schema, topic := "outbox_example_"+hex.EncodeToString(suffix), "orders."+hex.EncodeToString(suffix)

	// A fresh schema on the test server (storetest.PostgresURL), dropped at
	// the end, stands for the program's database.
	dsn, dropSchema, err := storetest.CreateSchema(ctx, schema)
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = dropSchema() }()
	db, err := store.Open(ctx, dsn, store.WithLogger(quiet))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if err := outbox.Migrate(ctx, db); err != nil {
		log.Fatal(err)
	}

	// The program's own table (made here, not by msgx) and one business
	// transaction: the order and its event commit together or not at all.
	if _, err := db.Exec(ctx, "CREATE TABLE orders (id BIGINT PRIMARY KEY, total BIGINT NOT NULL)"); err != nil {
		log.Fatal(err)
	}
	err = db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO orders (id, total) VALUES (42, 1999)"); err != nil {
			return err
		}
		return outbox.Enqueue(ctx, tx, time.Now(), outbox.Event{
			Target: "orders", Topic: topic, Key: "order-42", Payload: []byte(`{"id":42,"total":1999}`)})
	})
	if err != nil {
		log.Fatal(err)
	}

	// RabbitMQ: the topic's exchange and a queue that reads it back.
	conn, err := amqp.Dial("amqp://guest:guest@127.0.0.1:5672/")
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		log.Fatal(err)
	}
	if err := ch.ExchangeDeclare(topic, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
		log.Fatal(err)
	}
	defer func() { _ = ch.ExchangeDelete(topic, false, false) }()
	q, err := ch.QueueDeclare(topic, false, false, true, false, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _, _ = ch.QueueDelete(q.Name, false, false, false) }()
	if err := ch.QueueBind(q.Name, "", topic, false, nil); err != nil {
		log.Fatal(err)
	}
	deliveries, err := ch.Consume(q.Name, "", true, false, false, false, nil)
	if err != nil {
		log.Fatal(err)
	}

	// The relay: the outbox target "orders" goes to the RabbitMQ broker.
	b := broker.New("rabbitmq", rabbitmq.New(rabbitmq.WithURL("amqp://guest:guest@127.0.0.1:5672/"), rabbitmq.WithLogger(quiet)),
		broker.WithLogger(quiet))
	if err := b.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer func() { _ = b.Stop(context.WithoutCancel(ctx)) }()
	relay, err := outbox.NewRelay(db, outbox.Target("orders", b, outbox.PerKey), outbox.WithLogger(quiet))
	if err != nil {
		log.Fatal(err)
	}
	defer relay.Close()
	st, err := relay.Flush(ctx) // a service calls relay.Run(ctx) instead
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("published:", st.Published)

	select {
	case d := <-deliveries:
		fmt.Println("received:", d.Headers[broker.HeaderPartitionKey], string(d.Body))
	case <-ctx.Done():
		log.Fatal("no message from RabbitMQ")
	}

	// The database holds the program's table, the outbox's tables and the
	// record of the migrations applied: nothing else of msgx.
	rows, err := db.Query(ctx, "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() ORDER BY table_name")
	if err != nil {
		log.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			log.Fatal(err)
		}
		fmt.Println("table:", name)
	}
	if err := rows.Err(); err != nil {
		log.Fatal(err)
	}
	// Output:
	// published: 1
	// received: order-42 {"id":42,"total":1999}
	// table: msgx_migrations
	// table: msgx_outbox
	// table: msgx_outbox_key_state
	// table: msgx_outbox_replay
	// table: msgx_outbox_sent
	// table: orders
}
