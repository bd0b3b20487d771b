package outboxbench

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store/storetest"
)

// The workloads run end to end at a small size and print their RESULT lines.
func TestWorkloadsRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dsn := storetest.PostgresURL()
	for _, c := range []RelayConfig{
		{Lane: outbox.Unordered, N: 3000, Keys: 50, Dead: 500},
		{Lane: outbox.PerKey, N: 3000, Keys: 50, Relays: 2},
		{Lane: outbox.Compacted, N: 3000, Keys: 50},
		{Lane: outbox.PerKey, Mode: "live", N: 2000, Keys: 50, Rate: 20000, Warmup: 20 * time.Millisecond},
	} {
		c.DSN = dsn
		var out bytes.Buffer
		res, err := RunRelay(ctx, c, &out)
		if err != nil {
			t.Fatalf("%s %s: %v", c.Lane, c.Mode, err)
		}
		line := out.String()
		if !strings.HasPrefix(line, "RESULT peer=msgx workload=outbox-relay") || res.N != c.N {
			t.Fatalf("%s: %q", c.Lane, line)
		}
		if c.Lane == outbox.Compacted && !strings.Contains(line, " sent=50 ") {
			t.Fatalf("compacted burn-down should send one event per key: %q", line)
		}
		if c.Lane == outbox.PerKey && !strings.Contains(line, "order_violations=0") {
			t.Fatalf("per-key order: %q", line)
		}
		if c.Mode == "live" && (!strings.Contains(line, " lat_p99_ms=") || !strings.Contains(line, " warmup_n=")) {
			t.Fatalf("live mode without steady and warm-up latencies: %q", line)
		}
	}

	var out bytes.Buffer
	rs, err := RunProducerOverhead(ctx, ProducerConfig{DSN: dsn, N: 200, Rounds: 2}, &out)
	if err != nil || len(rs) != 2 || !strings.Contains(out.String(), "variant=with-outbox") {
		t.Fatalf("producer-overhead: %v %q", err, out.String())
	}

	out.Reset()
	c, err := RunPgbenchCeiling(ctx, CeilingConfig{DSN: dsn, Clients: 2, Duration: time.Second}, &out)
	if err != nil || c.PerSec() <= 0 || !strings.Contains(out.String(), "peer=pgbench") {
		t.Fatalf("pgbench ceiling: %v %q", err, out.String())
	}
}
