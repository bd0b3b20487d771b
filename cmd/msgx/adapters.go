package main

import (
	"github.com/msgx/msgx/broker/brokers"
	"github.com/msgx/msgx/broker/kafka"
	"github.com/msgx/msgx/broker/mem"
	"github.com/msgx/msgx/broker/mqtt"
	"github.com/msgx/msgx/broker/nats"
	"github.com/msgx/msgx/broker/rabbitmq"
)

// adapters is the registry of the broker adapters this build links: the
// kinds a configuration's brokers may name. Which adapters a build has is
// chosen here, by imports; Pulsar is in adapters_pulsar.go, left out by
// building with -tags nopulsar (it brings the Kubernetes and AthenZ client
// libraries). docs/architecture.md, package broker/brokers.
func adapters() *brokers.Registry {
	reg := brokers.NewRegistry(kafka.Adapter(), rabbitmq.Adapter(), nats.Adapter(), mqtt.Adapter(), mem.Adapter())
	for _, a := range optionalAdapters() {
		reg.Register(a)
	}
	return reg
}

// compiledAdapters are the kinds of the broker adapters this build links
// (msgx version, msgx_build_info).
func compiledAdapters() []string { return adapters().Kinds() }
