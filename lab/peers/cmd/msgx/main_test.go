package main

import (
	"testing"
	"time"

	"github.com/msgx/msgx/lab/peers/internal/workload"
	"github.com/msgx/msgx/lab/peers/internal/workload/workloadtest"
	"github.com/msgx/msgx/outbox"
)

// The program runs both modes end to end against the local PostgreSQL and
// reports every event delivered exactly once.
func TestRunsBothModes(t *testing.T) {
	workloadtest.RunsBothModes(t, "msgx", func(cfg workload.Config) workload.Peer {
		return &peer{cfg: cfg, poll: 5 * time.Millisecond, claim: outbox.DefaultBatch}
	})
}
