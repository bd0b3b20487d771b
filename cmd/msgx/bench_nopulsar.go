//go:build nopulsar

package main

import (
	"context"

	"github.com/msgx/msgx/internal/bench/brokerbench"
)

// addPulsarBench: no Pulsar in a build with -tags nopulsar.
func addPulsarBench(map[string]func(ctx context.Context) (brokerbench.Adapter, func(), error), *brokerBenchFlags) {
}
