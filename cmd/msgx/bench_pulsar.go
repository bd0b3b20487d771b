//go:build !nopulsar

package main

import (
	"context"

	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/broker/pulsar"
	"github.com/msgx/msgx/broker/pulsar/pulsarbench"
	"github.com/msgx/msgx/broker/pulsar/pulsarfake"
	"github.com/msgx/msgx/internal/bench/brokerbench"
)

// addPulsarBench adds the Pulsar adapter to msgx bench broker.
func addPulsarBench(m map[string]func(ctx context.Context) (brokerbench.Adapter, func(), error), f *brokerBenchFlags) {
	m["pulsar"] = func(context.Context) (brokerbench.Adapter, func(), error) {
		url, cleanup := f.url, func() {}
		if url == "" { // no service given: an in-process fake broker
			srv, err := pulsarfake.New()
			if err != nil {
				return brokerbench.Adapter{}, nil, err
			}
			url, cleanup = srv.URL(), func() { _ = srv.Close() }
		}
		return brokerbench.Adapter{
			Name:      "pulsar",
			Setup:     pulsarbench.Setup(url),
			NewDriver: func(context.Context) (driver.Broker, error) { return pulsar.New(url), nil },
			NewRaw: func(context.Context) (brokerbench.Raw, error) {
				return pulsarbench.NewRaw(url, 2*f.cfg.Batch)
			},
		}, cleanup, nil
	}
}
