package backoff

import (
	"testing"
	"time"
)

func TestDelayDoublesAndCaps(t *testing.T) {
	p := Policy{MaxAttempts: 5, Initial: time.Second, Max: 60 * time.Second}
	want := []time.Duration{0, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, 60 * time.Second, 60 * time.Second}
	for attempts, w := range want {
		if got := p.Delay(attempts); got != w {
			t.Errorf("Delay(%d) = %v, want %v", attempts, got, w)
		}
	}
	if p.Exhausted(4) || !p.Exhausted(5) {
		t.Error("Exhausted boundary wrong: want false at 4, true at 5")
	}
}

func TestJitterStaysInBounds(t *testing.T) {
	p := Policy{Initial: 100 * time.Millisecond, Max: time.Second, Jitter: 0.5}
	for range 1000 {
		d := p.Delay(3)
		if d < 200*time.Millisecond || d > 400*time.Millisecond {
			t.Fatalf("jittered delay %v outside [200ms,400ms]", d)
		}
	}
}
