package bench

import (
	"testing"
	"time"
)

func TestResultLine(t *testing.T) {
	r := Result{Workload: "outbox-relay", Variant: "unordered", N: 50000, Elapsed: 2 * time.Second,
		Latencies: []time.Duration{3 * time.Millisecond, time.Millisecond, 2 * time.Millisecond},
		Extra:     [][2]string{{"sent", "12"}}}
	want := "RESULT peer=msgx workload=outbox-relay variant=unordered mode=burndown n=50000 seconds=2.000 per_sec=25000 lat_p50_ms=2.00 lat_p99_ms=2.00 sent=12"
	if got := r.Line(); got != want {
		t.Fatalf("\n got %s\nwant %s", got, want)
	}
	if Ratio(Result{N: 10, Elapsed: time.Second}, Result{N: 20, Elapsed: time.Second}) != "0.50" {
		t.Fatal("ratio")
	}
}
