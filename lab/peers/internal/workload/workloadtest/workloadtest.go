// Package workloadtest holds the end-to-end check every peer program's tests
// run: both modes against the local PostgreSQL, every event delivered once.
package workloadtest

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/msgx/msgx/lab/peers/internal/workload"
)

// RunsBothModes runs the named peer in burn-down and live mode and checks its
// RESULT lines: N events, no duplicates, latencies in live mode; then the
// producer-overhead mode, which must print both variants.
func RunsBothModes(t *testing.T, name string, newPeer func(workload.Config) workload.Peer) {
	t.Helper()
	for _, args := range [][]string{
		{"--n", "2000", "--batch", "50", "--mode", "burndown", "--timeout", "1m"},
		{"--mode", "live", "--rate", "2000", "--duration", "1s", "--warmup", "200ms", "--batch", "50", "--timeout", "1m"},
	} {
		cfg, err := workload.ParseFlags(name, args)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if err := workload.Run(context.Background(), cfg, newPeer(cfg), &out); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		line := out.String()
		if !strings.HasPrefix(line, "RESULT peer="+name+" workload=outbox-relay mode="+cfg.Mode+" n=2000 ") || !strings.Contains(line, " dups=0") {
			t.Fatalf("%v: unexpected result %q", args, line)
		}
		if cfg.Mode == "live" && (!strings.Contains(line, " lat_p99_ms=") || !strings.Contains(line, " warmup_n=")) {
			t.Fatalf("live result without steady and warm-up latencies: %q", line)
		}
	}
	cfg, err := workload.ParseFlags(name, []string{"--mode", "producer-overhead", "--n", "200", "--producers", "8", "--timeout", "1m"})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := workload.Run(context.Background(), cfg, newPeer(cfg), &out); err != nil {
		t.Fatalf("producer-overhead: %v", err)
	}
	for _, v := range []string{"without-outbox", "with-outbox"} {
		if !strings.Contains(out.String(), "RESULT peer="+name+" workload=producer-overhead variant="+v+" mode=burndown n=200 ") {
			t.Fatalf("producer-overhead: no %s line in %q", v, out.String())
		}
	}
}
