//go:build !nopulsar

package main

import (
	"github.com/msgx/msgx/broker/brokers"
	"github.com/msgx/msgx/broker/pulsar"
)

// optionalAdapters are the adapters a build tag can leave out: Pulsar,
// unless built with -tags nopulsar.
func optionalAdapters() []brokers.Adapter { return []brokers.Adapter{pulsar.Adapter()} }
