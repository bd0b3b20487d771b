// Package pulsarbench is the raw side of `msgx-bench broker --adapter
// pulsar`: pulsar-client-go doing the benchmark's work without the port.
package pulsarbench

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/prometheus/client_golang/prometheus"

	msgxpulsar "github.com/msgx/msgx/broker/pulsar"
)

// Raw drives pulsar-client-go directly, configured as the adapter
// configures it (no producer batching, Shared subscription from the earliest
// message, grouped acknowledgements), as the baseline of `msgx-bench broker
// --adapter pulsar`.
type Raw struct {
	client    pulsar.Client
	namespace string
	queue     int
}

// NewRaw connects to serviceURL; receiverQueue is the consumer's prefetch.
func NewRaw(serviceURL string, receiverQueue int) (*Raw, error) {
	c, err := pulsar.NewClient(pulsar.ClientOptions{
		URL:               serviceURL,
		Logger:            msgxpulsar.ClientLogger(slog.Default()),
		MetricsRegisterer: prometheus.NewRegistry(),
	})
	if err != nil {
		return nil, fmt.Errorf("pulsar: client for %s: %w", serviceURL, err)
	}
	return &Raw{client: c, namespace: "public/default", queue: max(receiverQueue, 1)}, nil
}

func (r *Raw) topic(name string) string { return "persistent://" + r.namespace + "/" + name }

// Setup returns the benchmark's set-up of a topic: the consumer group's
// durable subscription, created before anything is published, since a
// Pulsar topic keeps only what a subscription holds.
func Setup(serviceURL string) func(ctx context.Context, topic, group string) error {
	return func(_ context.Context, topic, group string) error {
		r, err := NewRaw(serviceURL, 1)
		if err != nil {
			return err
		}
		defer r.Close()
		c, err := r.client.Subscribe(pulsar.ConsumerOptions{
			Topic: r.topic(topic), SubscriptionName: group, Type: pulsar.Shared,
			SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
		})
		if err != nil {
			return fmt.Errorf("pulsar: subscribe %s to %s: %w", group, topic, err)
		}
		c.Close()
		return nil
	}
}

// Publish sends n messages in batches of batch, waiting for every receipt of a
// batch before the next.
func (r *Raw) Publish(ctx context.Context, topic string, payload []byte, n, batch int) error {
	p, err := r.client.CreateProducer(pulsar.ProducerOptions{Topic: r.topic(topic), DisableBatching: true})
	if err != nil {
		return err
	}
	defer p.Close()
	results := make(chan error, batch)
	for sent := 0; sent < n; sent += batch {
		k := min(batch, n-sent)
		for range k {
			p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: payload}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
				results <- err
			})
		}
		for range k {
			if err := <-results; err != nil {
				return err
			}
		}
	}
	return nil
}

// Consume receives n messages and acknowledges each one.
func (r *Raw) Consume(ctx context.Context, topic, group string, n int) error {
	c, err := r.client.Subscribe(pulsar.ConsumerOptions{
		Topic: r.topic(topic), SubscriptionName: group, Type: pulsar.Shared,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest, ReceiverQueueSize: r.queue,
	})
	if err != nil {
		return err
	}
	defer c.Close()
	for range n {
		m, err := c.Receive(ctx)
		if err != nil {
			return err
		}
		if err := c.Ack(m); err != nil {
			return err
		}
	}
	return nil
}

// Close releases the client.
func (r *Raw) Close() error {
	r.client.Close()
	return nil
}
