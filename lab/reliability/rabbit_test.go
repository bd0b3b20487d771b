package reliability

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/msgx/msgx/app/config"
	"github.com/msgx/msgx/broker/brokers"
	"github.com/msgx/msgx/broker/kafka"
	"github.com/msgx/msgx/broker/rabbitmq"
	"github.com/msgx/msgx/store/storetest"
)

// The campaign's configuration with the RabbitMQ broker and the sis
// stream's broker source is a valid production configuration, the URL
// coming from the environment as msgx takes it.
func TestRabbitConfig(t *testing.T) {
	base, err := os.ReadFile(filepath.Join("..", "..", "deploy", "msgx.production.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	r := newRabbit("amqp://guest:guest@127.0.0.1:5672/")
	b, err := r.addConfig(base)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "msgx.yaml")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, []string{
		"MSGX_STORE_DSN=postgres://root@127.0.0.1:5432/test",
		"MSGX_MAILBOXES_SHARED_DSN=root@tcp(127.0.0.1:3306)/test",
		"MSGX_ADMIN_READ_TOKEN=rL6kW2qZ9xV4nB7mT3cJ1hF8dS5gP0aYi",
		"MSGX_ADMIN_OPERATOR_TOKEN=rO9pN4vB7cX2zL6kJ3hG1fD8sA5qW0eTu",
		"MSGX_BROKERS_RABBIT_URL=amqp://guest:guest@127.0.0.1:1/",
	}, brokers.NewRegistry(rabbitmq.Adapter(), kafka.Adapter()))
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := cfg.Brokers["rabbit"].Settings.(*rabbitmq.Config); cfg.Brokers["rabbit"].Kind != rabbitmq.Kind || !ok || got.URL != "amqp://guest:guest@127.0.0.1:1/" {
		t.Errorf("broker rabbit: %+v", got)
	}
	src, ok := cfg.Streams["sis"].Sources["rabbit"]
	if !ok || src.Broker != "rabbit" || src.Topic != r.topic || src.Group != rabbitGroup {
		t.Errorf("the sis stream's source: %+v (present %v)", src, ok)
	}
	if cfg.Streams["sis"].Mailbox != "shared" {
		t.Errorf("the sis stream lost its mailbox: %+v", cfg.Streams["sis"])
	}
	if _, err := (&rabbitSide{}).addConfig([]byte("profile: production\n")); err == nil {
		t.Error("a configuration without brokers and streams was accepted")
	}
}

// A private RabbitMQ node really restarts: killed with SIGKILL and started
// again on its own port, it keeps a persistent message it confirmed before
// the kill, and the machine's RabbitMQ is not the node killed.
func TestPrivateRabbitRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "msgx-rel-rabbit-")
	if err != nil {
		t.Fatal(err)
	}
	node, err := StartRabbit(ctx, dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		t.Fatal(err)
	}
	t.Cleanup(node.Stop)
	t.Logf("private node %s on %s started in %s", node.node.Name, node.URL(), node.Start)
	if node.URL() == rabbitmq.DefaultURL {
		t.Fatal("the private node took the machine's RabbitMQ port")
	}
	queue := storetest.UniqueName("relq")
	publishConfirmed(ctx, t, node.URL(), queue, "kept")
	// The queue was declared just now: its declaration must be on disk
	// before the kill, as a long-declared queue's is (see SyncMetadata).
	if err := node.SyncMetadata(ctx); err != nil {
		t.Fatal(err)
	}
	took, err := node.Restart(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("restarted in %s", took)
	conn, err := amqp.Dial(node.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	m, ok, err := ch.Get(queue, true)
	if err != nil || !ok || string(m.Body) != "kept" {
		t.Fatalf("after the restart: %q %v %v, want the confirmed message", m.Body, ok, err)
	}
	// The machine's node still answers: it was not the one killed.
	shared, err := amqp.Dial(rabbitmq.DefaultURL)
	if err != nil {
		t.Fatalf("the machine's RabbitMQ: %v", err)
	}
	_ = shared.Close()
}

func publishConfirmed(ctx context.Context, t *testing.T, url, queue, body string) {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte(body)})
	if err != nil {
		t.Fatal(err)
	}
	if !dc.Wait() {
		t.Fatal("nacked")
	}
}
