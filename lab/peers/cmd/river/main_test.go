package main

import (
	"testing"

	"github.com/msgx/msgx/lab/peers/internal/workload"
	"github.com/msgx/msgx/lab/peers/internal/workload/workloadtest"
)

// The program runs both modes end to end against the local PostgreSQL and
// reports every event delivered exactly once.
func TestRunsBothModes(t *testing.T) {
	workloadtest.RunsBothModes(t, "river", func(cfg workload.Config) workload.Peer { return &peer{cfg: cfg} })
}
