package rabbitmq_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/msgx/msgx/backoff"
	"github.com/msgx/msgx/broker/brokertest"
	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/broker/rabbitmq"
)

// brokerAddr is the local RabbitMQ; MSGX_RABBITMQ_ADDR overrides it.
func brokerAddr() string {
	if a := os.Getenv("MSGX_RABBITMQ_ADDR"); a != "" {
		return a
	}
	return "127.0.0.1:5672"
}

func url(addr string) string { return "amqp://guest:guest@" + addr + "/" }

// testLogger keeps expected warnings (refused dead-letter topics, lost
// connections) out of the output unless the run is verbose.
func testLogger() *slog.Logger {
	if testing.Verbose() {
		return slog.Default()
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// fastReconnect keeps outage tests short; production uses the default policy.
var fastReconnect = backoff.Policy{Initial: 20 * time.Millisecond, Max: 300 * time.Millisecond}

// harness runs the conformance suite through a TCP proxy that Outage cuts.
type harness struct {
	proxy *brokertest.Proxy
	admin *amqp.Connection

	mu     sync.Mutex
	topics []string
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	proxy, err := brokertest.NewProxy(brokerAddr())
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	admin, err := amqp.Dial(url(brokerAddr()))
	if err != nil {
		_ = proxy.Close()
		t.Fatalf("RabbitMQ at %s: %v", brokerAddr(), err)
	}
	h := &harness{proxy: proxy, admin: admin}
	t.Cleanup(func() {
		h.cleanup()
		_ = admin.Close()
		_ = proxy.Close()
	})
	return h
}

func (h *harness) Name() string { return "rabbitmq" }

func (h *harness) Target() string { return "local RabbitMQ" }

func (h *harness) options(extra ...rabbitmq.Option) []rabbitmq.Option {
	return append([]rabbitmq.Option{
		rabbitmq.WithURL(url(h.proxy.Addr())),
		rabbitmq.WithReconnectBackoff(fastReconnect),
		rabbitmq.WithLogger(testLogger()),
		rabbitmq.WithMaxMessageBytes(tckMaxMessageBytes),
	}, extra...)
}

// tckMaxMessageBytes keeps the suite's oversized message small; the
// default limit is the broker's 128 MiB.
const tckMaxMessageBytes = 1 << 20

// MaxMessageBytes implements brokertest.Harness.
func (h *harness) MaxMessageBytes() int { return tckMaxMessageBytes }

func (h *harness) NewDriver(context.Context) (driver.Broker, error) {
	return rabbitmq.New(h.options()...), nil
}

func (h *harness) UnreachableDriver(context.Context) (driver.Broker, error) {
	return rabbitmq.New(rabbitmq.WithURL(url(closedPort())), rabbitmq.WithLogger(testLogger())), nil
}

// closedPort returns a loopback address where nothing listens.
func closedPort() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
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

// RefusedTopic is a reserved name: RabbitMQ refuses to declare it, and
// publishing to it fails because it does not exist.
func (h *harness) RefusedTopic() string { return "amq.msgx-refused" }

// CreateTopic declares the topic's exchange and remembers it for cleanup.
func (h *harness) CreateTopic(_ context.Context, name string) error {
	h.mu.Lock()
	h.topics = append(h.topics, name)
	h.mu.Unlock()
	return onAdmin(h.admin, func(ch *amqp.Channel) error {
		return ch.ExchangeDeclare(name, amqp.ExchangeFanout, true, false, false, false, nil)
	})
}

// SubscriptionExists implements brokertest.ExpiryChecker. A passive declare
// would renew the queue's x-expires lease (RabbitMQ counts any declare as use),
// so a poll faster than the TTL would keep the queue alive forever. Binding
// the queue to amq.direct under a key nobody publishes to, and unbinding it at
// once, leaves the lease alone and fails with 404 when the queue is gone.
func (h *harness) SubscriptionExists(_ context.Context, spec driver.SubscriptionSpec) (bool, error) {
	return queueExists(h.admin, rabbitmq.QueueName(spec.Topic, spec.Group))
}

const probeKey = "msgx-expiry-probe"

func queueExists(admin *amqp.Connection, queue string) (bool, error) {
	err := onAdmin(admin, func(ch *amqp.Channel) error {
		if err := ch.QueueBind(queue, probeKey, "amq.direct", false, nil); err != nil {
			return err
		}
		return ch.QueueUnbind(queue, probeKey, "amq.direct", nil)
	})
	var aerr *amqp.Error
	if errors.As(err, &aerr) && aerr.Code == amqp.NotFound {
		return false, nil
	}
	return err == nil, err
}

// tckGroups are the group names the suite uses.
var tckGroups = []string{"g", "ga", "gb", "x", "y", "fwd", driver.DeadLetterGroup}

// cleanup deletes what the suite's topics left behind: exchanges, group
// queues and dead-letter queues, one level of dead letters deep.
func (h *harness) cleanup() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, t := range h.topics {
		deleteTopic(h.admin, t, tckGroups...)
	}
}

func deleteTopic(admin *amqp.Connection, topic string, groups ...string) {
	for _, name := range []string{topic, topic + ".dlq", topic + ".dlq.dlq"} {
		for _, g := range groups {
			for _, q := range []string{rabbitmq.QueueName(name, g), rabbitmq.QueueName(name, g) + "/retry"} {
				_ = onAdmin(admin, func(ch *amqp.Channel) error {
					_, err := ch.QueueDelete(q, false, false, false)
					return err
				})
			}
		}
		_ = onAdmin(admin, func(ch *amqp.Channel) error {
			_, err := ch.QueueDelete(name, false, false, false)
			return err
		})
		_ = onAdmin(admin, func(ch *amqp.Channel) error { return ch.ExchangeDelete(name, false, false) })
	}
}

func onAdmin(conn *amqp.Connection, f func(*amqp.Channel) error) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer func() { _ = ch.Close() }()
	return f(ch)
}

func TestConformance(t *testing.T) {
	brokertest.Run(t, newHarness(t), brokertest.Options{})
}

// A connection that goes silent right after it opened, before the broker's
// first heartbeat reached it, is found dead by the heartbeat and reported
// (amqp091 clears the socket's deadline when the handshake ends and arms the
// heartbeat's read deadline only when the next frame arrives: without one
// such a connection stayed "up" for good, its consumer starved).
func TestSilentRightAfterOpenIsReported(t *testing.T) {
	proxy, err := brokertest.NewProxy(brokerAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d := rabbitmq.New(rabbitmq.WithURL(url(proxy.Addr())), rabbitmq.WithHeartbeat(2*time.Second),
		rabbitmq.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer d.Close(context.Background())
	proxy.Stall() // the consuming connection has read nothing since its handshake
	defer proxy.Resume()
	deadline := time.After(15 * time.Second) // three heartbeat intervals are 3 s
	for {
		select {
		case err := <-d.Errors():
			if strings.Contains(err.Error(), "consume connection lost") {
				return
			}
		case <-deadline:
			t.Fatal("a silent consuming connection was not reported lost within 15 s")
		}
	}
}
