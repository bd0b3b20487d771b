package app

import (
	"github.com/msgx/msgx/broker/brokers"
	"github.com/msgx/msgx/broker/kafka"
	"github.com/msgx/msgx/broker/mem"
	"github.com/msgx/msgx/broker/mqtt"
	"github.com/msgx/msgx/broker/nats"
	"github.com/msgx/msgx/broker/pulsar"
	"github.com/msgx/msgx/broker/rabbitmq"
)

// adapters is every adapter, as the msgx command registers them (the
// service itself imports none).
func adapters() *brokers.Registry {
	return brokers.NewRegistry(kafka.Adapter(), rabbitmq.Adapter(), nats.Adapter(), mqtt.Adapter(), pulsar.Adapter(), mem.Adapter())
}
