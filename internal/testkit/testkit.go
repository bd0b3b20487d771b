package testkit

import (
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// maxPoll is the longest pause between two looks of Eventually: it starts
// at a millisecond, so a condition that holds soon is seen at once, and
// doubles up to this, so a long wait does not spin.
const maxPoll = 50 * time.Millisecond

// Eventually polls cond until it holds and fails the test when it still does
// not after within. It waits for a condition, never for time to pass: a test
// that needs time to pass moves a fake clock.
func Eventually(t testing.TB, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	pause := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(pause)
		pause = min(2*pause, maxPoll)
	}
}

// quietPoll is how often Consistently looks during its quiet period.
const quietPoll = 10 * time.Millisecond

// Consistently checks that cond holds throughout a quiet period of d and
// fails the test the first time it does not: the bounded form of "this did
// not happen". Wait first (Eventually) for what shows that the code under
// test had the chance to do it, so that the quiet period is not spent
// before anything ran.
func Consistently(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	end := time.Now().Add(d)
	for {
		if !cond() {
			t.Fatalf("%s stopped holding during a quiet period of %v", what, d)
		}
		left := time.Until(end)
		if left <= 0 {
			return
		}
		time.Sleep(min(quietPoll, left))
	}
}

// EnvLog names the variable that makes Quiet loggers write: set it to a
// level (debug, info, warn, error) to see the logs of the code under test.
const EnvLog = "MSGX_TEST_LOG"

// Quiet is the logger tests hand to the code under test: it discards
// everything, unless MSGX_TEST_LOG sets a level, when it writes that level
// and above to stderr.
func Quiet() *slog.Logger {
	raw := os.Getenv(EnvLog)
	if raw == "" {
		return slog.New(slog.DiscardHandler)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(strings.ToUpper(raw))); err != nil {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// MetricValue is the value of a counter, gauge or untyped metric of g: the
// series carrying every label of labels (name, value, name, value, …), or,
// with no labels, the metric's only series. The test fails when there is no
// such series.
func MetricValue(t testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	if len(labels)%2 != 0 {
		t.Fatalf("MetricValue(%s): labels come in name, value pairs: %q", name, labels)
	}
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gathering the metrics: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		if len(labels) == 0 && len(mf.GetMetric()) != 1 {
			t.Fatalf("metric %s has %d series: say which by its labels", name, len(mf.GetMetric()))
		}
		for _, m := range mf.GetMetric() {
			if hasLabels(m, labels) {
				return m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
			}
		}
	}
	t.Fatalf("no series of metric %s with labels %q", name, labels)
	return 0
}

func hasLabels(m *dto.Metric, labels []string) bool {
	for i := 0; i < len(labels); i += 2 {
		found := false
		for _, lp := range m.GetLabel() {
			if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}
