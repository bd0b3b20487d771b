package app

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	natsio "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/msgx/msgx/broker/rabbitmq"

	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// Each broker kind the configuration names is wired to the real server: the
// relay's events for a target reach a consumer of that broker, and the
// readiness check covers it.
func TestRelayThroughEveryLocalBrokerKind(t *testing.T) {
	_, dsn := storetest.NewSchema(t)
	suffix := storetest.UniqueName("")
	cfg := loadConfig(t, fmt.Sprintf(`
store: {dsn: "%s"}
admin: {listen: "127.0.0.1:0"}
ingress: {listen: ""}
brokers:
  rmq: {kind: rabbitmq, url: "amqp://guest:guest@127.0.0.1:5672/"}
  mq: {kind: mqtt, url: "tcp://127.0.0.1:1883"}
  nt: {kind: nats, url: "nats://127.0.0.1:4222"}
relay:
  poll-interval: 20ms
  targets:
    "t:rmq": {broker: rmq}
    "t:mq": {broker: mq}
    "t:nt": {broker: nt}
`, dsn))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, err := New(ctx, cfg, registry(), WithLogOutput(io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	topic := "svc-e2e-" + suffix
	t.Cleanup(func() { deleteTopology(t, topic, "g"+suffix) })
	var mu sync.Mutex
	got := map[string]string{}
	for _, name := range []string{"rmq", "mq", "nt"} {
		if _, err := a.brokers[name].Listen(ctx, broker.Subscription{Topic: topic, Group: "g" + suffix, Concurrency: 1},
			func(_ context.Context, d *broker.Delivery) error {
				mu.Lock()
				got[name] = d.Header(broker.HeaderEventID)
				mu.Unlock()
				return nil
			}); err != nil {
			t.Fatalf("listen on %s: %v", name, err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() { cancel(); <-done }()

	db, err := store.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		var evs []outbox.Event
		for _, name := range []string{"rmq", "mq", "nt"} {
			evs = append(evs, outbox.Event{ID: "ev-" + name, Target: "t:" + name, Topic: topic, Key: "k", Payload: []byte("{}")})
		}
		return outbox.Enqueue(ctx, tx, time.Now(), evs...)
	}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("events delivered: %v", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, name := range []string{"rmq", "mq", "nt"} {
		if got[name] != "ev-"+name {
			t.Errorf("%s delivered %q", name, got[name])
		}
	}
	if code := get(t, a.AdminAddr(), "/readyz", "", nil); code != 200 {
		t.Errorf("readyz: %d", code)
	}
}

// deleteTopology removes what the test's topic made on the shared RabbitMQ
// and NATS servers (the MQTT session expires by itself).
func deleteTopology(t *testing.T, topic, group string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if conn, err := amqp.Dial("amqp://guest:guest@127.0.0.1:5672/"); err == nil {
		for _, name := range []string{topic, topic + ".dlq"} {
			for _, q := range []string{rabbitmq.QueueName(name, group), name} {
				if ch, err := conn.Channel(); err == nil {
					_, _ = ch.QueueDelete(q, false, false, false)
					_ = ch.Close()
				}
			}
			if ch, err := conn.Channel(); err == nil {
				_ = ch.ExchangeDelete(name, false, false)
				_ = ch.Close()
			}
		}
		_ = conn.Close()
	}
	nc, err := natsio.Connect("nats://127.0.0.1:4222")
	if err != nil {
		t.Logf("cleanup: nats: %v", err)
		return
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return
	}
	names := js.StreamNames(ctx)
	var mine []string
	for n := range names.Name() {
		if strings.Contains(strings.ToLower(n), strings.ToLower(strings.TrimPrefix(topic, "svc-e2e-"))) {
			mine = append(mine, n)
		}
	}
	for _, n := range mine {
		if err := js.DeleteStream(ctx, n); err != nil {
			t.Logf("cleanup: delete stream %s: %v", n, err)
		}
	}
}
