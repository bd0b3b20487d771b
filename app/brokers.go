package app

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/msgx/msgx/app/config"
	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/broker/kafka"
	"github.com/msgx/msgx/broker/mem"
	"github.com/msgx/msgx/broker/mqtt"
	"github.com/msgx/msgx/broker/nats"
	"github.com/msgx/msgx/broker/pulsar"
	"github.com/msgx/msgx/broker/rabbitmq"
	"github.com/msgx/msgx/internal/clock"
)

// newDriver builds the adapter a broker entry names.
// instance is the process's instance id: Kafka consumer groups use it for
// static membership.
func newDriver(name string, c config.Broker, instance string, log *slog.Logger, reg prometheus.Registerer) (driver.Broker, func(), error) {
	// Adapters with metrics of their own get them labelled with the broker's
	// name, so that two brokers of a kind can share the registry.
	own := prometheus.WrapRegistererWith(prometheus.Labels{"broker": name}, reg)
	switch c.Kind {
	case config.KindKafka:
		var opts []kgo.Opt
		if c.ClientID != "" {
			opts = append(opts, kgo.ClientID(c.ClientID))
		}
		weak := false
		switch c.Acks {
		case "leader":
			opts, weak = append(opts, kgo.RequiredAcks(kgo.LeaderAck())), true
		case "none":
			opts, weak = append(opts, kgo.RequiredAcks(kgo.NoAck())), true
		}
		// franz-go's idempotent producer needs acks=all.
		if weak || (c.Idempotence != nil && !*c.Idempotence) {
			opts, weak = append(opts, kgo.DisableIdempotentWrite()), true
		}
		kopts := []kafka.Option{kafka.SeedBrokers(c.Seeds...), kafka.WithLogger(log), kafka.WithClientOptions(opts...),
			kafka.WithInstanceID(instance), kafka.WithSessionTimeout(c.SessionTimeout.D())}
		for _, topic := range c.CompactedTopics {
			kopts = append(kopts, kafka.WithTopic(topic, -1, map[string]string{"cleanup.policy": "compact"}))
		}
		if weak {
			// Only the embedded profile gets here (validation refuses it in production).
			kopts = append(kopts, kafka.AllowWeakDurability())
		}
		return kafka.New(kopts...), nil, nil
	case config.KindRabbitMQ:
		return rabbitmq.New(rabbitmq.WithURL(c.URL), rabbitmq.WithLogger(log), rabbitmq.WithConnectionName("msgx-"+name),
			rabbitmq.WithRegisterer(own)), nil, nil
	case config.KindMQTT:
		d, err := mqtt.New(c.URL, mqtt.WithLogger(log))
		return d, nil, err
	case config.KindNATS:
		return nats.New(nats.WithURL(c.URL), nats.WithLogger(log), nats.WithClientName("msgx-"+name)), nil, nil
	case config.KindPulsar:
		return pulsar.New(c.URL, pulsar.WithLogger(log), pulsar.WithRegisterer(own)), nil, nil
	case config.KindMem:
		srv := mem.NewServer()
		return mem.New(srv), srv.Close, nil
	}
	return nil, nil, fmt.Errorf("unknown broker kind %q", c.Kind)
}

// brokerHealth follows a broker's lifecycle events: the broker counts as
// unhealthy while its last asynchronous error is recent.
type brokerHealth struct {
	b      *broker.Broker
	window time.Duration
	clock  clock.Clock // the broker's: its events are stamped on it

	mu      sync.Mutex
	lastErr error
	lastAt  time.Time
}

func (h *brokerHealth) follow(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case e := <-h.b.Events():
			h.mu.Lock()
			h.lastErr, h.lastAt = e.Err, e.Time
			h.mu.Unlock()
		}
	}
}

// check fails while the broker's last asynchronous error is within the
// window. (The port has no connection probe of its own.)
func (h *brokerHealth) check(context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ago := h.clock.Now().Sub(h.lastAt); h.lastErr != nil && ago < h.window {
		return fmt.Errorf("error %s ago: %w", ago.Round(time.Second), h.lastErr)
	}
	return nil
}
