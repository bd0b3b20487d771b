// Package rabbitmqbench is the raw side of `msgx-bench broker --adapter
// rabbitmq`: plain amqp091 doing the benchmark's work, and the topology the
// benchmark declares and removes.
package rabbitmqbench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/broker/rabbitmq"
)

// Raw is plain amqp091 doing the benchmark's work without the port, as
// the baseline of `msgx-bench broker --adapter rabbitmq`: confirmed, mandatory,
// persistent publishes awaited batch by batch, and a manual-ack consumer with
// the same prefetch as the port's listener acking every message.
type Raw struct {
	conn     *amqp.Connection
	prefetch int
}

// NewRaw connects to url.
func NewRaw(ctx context.Context, url string, prefetch int) (*Raw, error) {
	conn, err := dial(ctx, url)
	if err != nil {
		return nil, err
	}
	return &Raw{conn: conn, prefetch: prefetch}, nil
}

// Publish sends n messages in batches of batch, waiting for every confirm of a
// batch before the next.
func (r *Raw) Publish(ctx context.Context, topic string, payload []byte, n, batch int) error {
	ch, err := r.conn.Channel()
	if err != nil {
		return err
	}
	defer func() { _ = ch.Close() }()
	if err := ch.Confirm(false); err != nil {
		return err
	}
	returns := ch.NotifyReturn(make(chan amqp.Return, 256))
	dcs := make([]*amqp.DeferredConfirmation, 0, batch)
	for sent := 0; sent < n; sent += batch {
		dcs = dcs[:0]
		for i := 0; i < min(batch, n-sent); i++ {
			dc, err := ch.PublishWithDeferredConfirm(topic, "", true, false,
				amqp.Publishing{DeliveryMode: amqp.Persistent, Body: payload})
			if err != nil {
				return err
			}
			dcs = append(dcs, dc)
		}
		for _, dc := range dcs {
			ok, err := dc.WaitContext(ctx)
			if err != nil {
				return err
			}
			if !ok {
				return rabbitmq.ErrNacked
			}
		}
		select {
		case ret := <-returns:
			return fmt.Errorf("%w: %s", rabbitmq.ErrReturned, ret.ReplyText)
		default:
		}
	}
	return nil
}

// Consume receives and acks n messages from the group's queue.
func (r *Raw) Consume(ctx context.Context, topic, group string, n int) error {
	ch, err := r.conn.Channel()
	if err != nil {
		return err
	}
	defer func() { _ = ch.Close() }()
	if err := ch.Qos(r.prefetch, 0, false); err != nil {
		return err
	}
	deliveries, err := ch.Consume(rabbitmq.QueueName(topic, group), "", false, false, false, false, nil)
	if err != nil {
		return err
	}
	for got := 0; got < n; got++ {
		select {
		case d, ok := <-deliveries:
			if !ok {
				return fmt.Errorf("rabbitmq: consumer closed after %d of %d", got, n)
			}
			if err := d.Ack(false); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Close releases the connection.
func (r *Raw) Close() error { return r.conn.Close() }

// Topology declares the benchmark's exchanges and queues the way the
// driver does and removes them afterwards.
type Topology struct {
	url    string
	mu     sync.Mutex
	topics map[string][]string // topic -> groups
}

// NewTopology works against the broker at url.
func NewTopology(url string) *Topology {
	return &Topology{url: url, topics: map[string][]string{}}
}

// Setup declares topic's exchange and the group's queue, with the dead-letter
// topic the port would use, so publishes are routable before consumers run.
func (b *Topology) Setup(ctx context.Context, topic, group string) error {
	d := rabbitmq.New(rabbitmq.WithURL(b.url))
	if err := d.Start(ctx); err != nil {
		return err
	}
	defer func() { _ = d.Close(context.WithoutCancel(ctx)) }()
	b.mu.Lock()
	b.topics[topic] = append(b.topics[topic], group)
	b.mu.Unlock()
	return d.DeclareSubscription(ctx, driver.SubscriptionSpec{Topic: topic, Group: group, DeadLetterTopic: topic + ".dlq"})
}

// Cleanup deletes what Setup declared, including the dead-letter exchanges
// and queues. Errors are ignored: it is best effort after a benchmark.
func (b *Topology) Cleanup() {
	conn, err := dial(context.Background(), b.url)
	if err != nil {
		return
	}
	defer func() { _ = conn.Close() }()
	b.mu.Lock()
	defer b.mu.Unlock()
	for topic, groups := range b.topics {
		for _, g := range groups {
			for _, q := range []string{rabbitmq.QueueName(topic, g), rabbitmq.QueueName(topic, g) + "/retry"} {
				_ = onChannel(conn, func(ch *amqp.Channel) error {
					_, err := ch.QueueDelete(q, false, false, false)
					return err
				})
			}
		}
		for _, name := range []string{topic, topic + ".dlq"} {
			_ = onChannel(conn, func(ch *amqp.Channel) error {
				_, err := ch.QueueDelete(rabbitmq.QueueName(name, driver.DeadLetterGroup), false, false, false)
				return err
			})
			_ = onChannel(conn, func(ch *amqp.Channel) error { return ch.ExchangeDelete(name, false, false) })
		}
	}
}

// dial opens a plain AMQP connection.
func dial(ctx context.Context, url string) (*amqp.Connection, error) {
	return amqp.DialConfig(url, amqp.Config{Dial: func(network, addr string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}})
}

func onChannel(conn *amqp.Connection, f func(*amqp.Channel) error) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	err = f(ch)
	if cerr := ch.Close(); err == nil && cerr != nil && !errors.Is(cerr, amqp.ErrClosed) {
		err = cerr
	}
	return err
}
