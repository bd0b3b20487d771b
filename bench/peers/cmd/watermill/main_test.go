package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/msgx/msgx/bench/peers/internal/workload"
)

// The program runs both modes end to end against the local PostgreSQL and
// reports every event delivered exactly once.
func TestRunsBothModes(t *testing.T) {
	for _, args := range [][]string{
		{"--n", "2000", "--batch", "50", "--mode", "burndown", "--timeout", "1m"},
		{"--mode", "live", "--rate", "2000", "--duration", "1s", "--batch", "50", "--timeout", "1m"},
	} {
		cfg, err := workload.ParseFlags("watermill", args)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if err := workload.Run(context.Background(), cfg, &peer{cfg: cfg}, &out); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		line := out.String()
		if !strings.HasPrefix(line, "RESULT peer=watermill workload=outbox-relay mode="+cfg.Mode+" n=2000 ") || strings.Contains(line, "dups=") {
			t.Fatalf("%v: unexpected result %q", args, line)
		}
		if cfg.Mode == "live" && !strings.Contains(line, " lat_p99_ms=") {
			t.Fatalf("live result without latencies: %q", line)
		}
	}
}
