package app

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/msgx/msgx/backoff"
	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/broker/mem"
	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/internal/testkit"
)

// A broker that keeps failing to start is tried again with backoff, every
// attempt counted, and logged at most once a minute of its clock rather than
// at every attempt; the loop ends with its context.
func TestBrokerStartRetryLogsBoundedly(t *testing.T) {
	srv := mem.NewServer()
	srv.Close() // a closed in-process server refuses Start
	clk := clock.NewFake(time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC))
	logs := &testkit.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	b := broker.New("down", mem.New(srv), broker.WithLogger(slog.New(slog.DiscardHandler)), broker.WithClock(clk))
	failures := prometheus.NewCounter(prometheus.CounterOpts{Name: "f"})
	h := &brokerHealth{b: b, clock: clk, log: log, window: time.Minute, pingTimeout: time.Second,
		connected: prometheus.NewGauge(prometheus.GaugeOpts{Name: "c"}), failures: failures}
	if err := h.start(context.Background()); err == nil {
		t.Fatal("a closed server started")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.connect(ctx, backoff.Policy{Initial: time.Second, Max: 30 * time.Second, Multiplier: 2, Jitter: 0.2})
	}()
	const steps = 12
	for i := range steps {
		deadline := time.Now().Add(10 * time.Second)
		for clk.Waiters() == 0 || int(testutil.ToFloat64(failures)) != i+1 {
			if time.Now().After(deadline) {
				t.Fatalf("attempt %d: the retry loop is not waiting (failures %v)", i+2, testutil.ToFloat64(failures))
			}
			time.Sleep(time.Millisecond)
		}
		clk.Advance(40 * time.Second) // beyond the longest delay (30 s + 20 %)
	}
	testkit.Eventually(t, "the last attempt counted", 10*time.Second, func() bool { return int(testutil.ToFloat64(failures)) == steps+1 })
	lines := strings.Count(logs.String(), "broker still does not start")
	// 12 attempts over 8 minutes of the clock: a line a minute at most.
	if lines < 1 || lines > steps*40/60 {
		t.Errorf("%d lines for %d attempts over %s:\n%s", lines, steps, steps*40*time.Second, logs.String())
	}
	if err := h.check(context.Background()); err == nil || !strings.Contains(err.Error(), "not started after 13 attempts") {
		t.Errorf("readiness: %v", err)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the retry loop did not end with its context")
	}
}
