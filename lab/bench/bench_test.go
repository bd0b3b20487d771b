package bench

import (
	"strings"
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

// The warm-up's latencies are summarised apart and stay out of the steady
// percentiles.
func TestResultLineWarmup(t *testing.T) {
	r := Result{Workload: "outbox-relay", Mode: "live", N: 4, Elapsed: time.Second,
		Latencies:       []time.Duration{2 * time.Millisecond, time.Millisecond},
		Warmup:          time.Second,
		WarmupLatencies: []time.Duration{150 * time.Millisecond, 90 * time.Millisecond}}
	want := "RESULT peer=msgx workload=outbox-relay mode=live n=4 seconds=1.000 per_sec=4 lat_p50_ms=1.00 lat_p99_ms=1.00 warmup_s=1 warmup_n=2 warmup_lat_p99_ms=90.00 warmup_lat_max_ms=150.00"
	if got := r.Line(); got != want {
		t.Fatalf("\n got %s\nwant %s", got, want)
	}
}

func TestRatiosMedian(t *testing.T) {
	per := func(n int) Result { return Result{N: n, Elapsed: time.Second} }
	var out strings.Builder
	l := Ratios{Workload: "w"}
	l.Add(&out, "a/b", per(6), per(10))
	l.Add(&out, "a/b", per(8), per(10))
	l.Add(&out, "a/b", per(7), per(0)) // no rate to divide by: printed, not kept
	l.Add(&out, "a/b", per(5), per(10))
	l.Add(&out, "a/b", per(9), per(10))
	l.Add(&out, "c/d", per(1), per(4))
	l.PrintMedians(&out)
	want := "RATIO workload=w a/b=0.60\nRATIO workload=w a/b=0.80\nRATIO workload=w a/b=n/a\nRATIO workload=w a/b=0.50\n" +
		"RATIO workload=w a/b=0.90\nRATIO workload=w c/d=0.25\n" +
		"RATIO workload=w a/b=0.70 rounds=4 min=0.50 max=0.90 median=true\n" +
		"RATIO workload=w c/d=0.25 rounds=1 min=0.25 max=0.25 median=true\n"
	if out.String() != want {
		t.Fatalf("\n got %s\nwant %s", out.String(), want)
	}
}
