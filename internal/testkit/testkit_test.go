package testkit

import (
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestEventuallyReturnsOnceTheConditionHolds(t *testing.T) {
	calls := 0
	Eventually(t, "the third look", time.Minute, func() bool { calls++; return calls == 3 })
	if calls != 3 {
		t.Fatalf("cond called %d times, want 3", calls)
	}
}

func TestConsistentlyLooksThroughoutThePeriod(t *testing.T) {
	calls := 0
	Consistently(t, "the condition", 50*time.Millisecond, func() bool { calls++; return true })
	if calls < 2 {
		t.Fatalf("cond called %d times in the quiet period, want a look at its start and more after", calls)
	}
	// A condition that stops holding fails the test (seen from a test of its
	// own, which must not fail this one).
	ft := &fatalRecorder{}
	looks := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		Consistently(ft, "the first two looks", time.Minute, func() bool { looks++; return looks < 3 })
	}()
	<-done
	if !ft.failed || looks != 3 {
		t.Fatalf("a condition that stopped holding at the third look: failed %v after %d looks", ft.failed, looks)
	}
}

// fatalRecorder is a testing.TB whose Fatalf records the failure and ends
// the goroutine, as testing.T's does.
type fatalRecorder struct {
	testing.TB
	failed bool
}

func (f *fatalRecorder) Helper() {}

func (f *fatalRecorder) Fatalf(string, ...any) {
	f.failed = true
	runtime.Goexit()
}

func TestMetricValue(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "c_total"}, []string{"target", "kind"})
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "g"})
	reg.MustRegister(c, g)
	c.WithLabelValues("a", "x").Add(2)
	c.WithLabelValues("b", "x").Add(5)
	g.Set(7)
	if v := MetricValue(t, reg, "c_total", "target", "b"); v != 5 {
		t.Errorf("c_total{target=b} = %v, want 5", v)
	}
	if v := MetricValue(t, reg, "c_total", "target", "a", "kind", "x"); v != 2 {
		t.Errorf("c_total{target=a,kind=x} = %v, want 2", v)
	}
	if v := MetricValue(t, reg, "g"); v != 7 {
		t.Errorf("g = %v, want 7", v)
	}
}

func TestQuietWritesNothingByDefault(t *testing.T) {
	t.Setenv(EnvLog, "")
	if Quiet().Enabled(t.Context(), 12) {
		t.Fatal("a quiet logger is enabled for errors")
	}
	t.Setenv(EnvLog, "warn")
	if l := Quiet(); !l.Enabled(t.Context(), 4) || l.Enabled(t.Context(), 0) {
		t.Fatal("MSGX_TEST_LOG=warn does not log warnings only")
	}
}
