// Package backoff holds the one retry policy shape the engine uses everywhere:
// bounded exponential delays with optional jitter and a maximum number of attempts.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Policy describes retries. The zero value retries never.
type Policy struct {
	// MaxAttempts is the number of attempts (the first one included) before giving up.
	MaxAttempts int
	// Initial is the delay after the first failed attempt.
	Initial time.Duration
	// Max caps every single delay.
	Max time.Duration
	// Multiplier grows the delay per attempt; values below 1 mean 2.
	Multiplier float64
	// Jitter, in [0,1], randomises each delay down by up to that fraction so that
	// many failing workers do not retry in lockstep.
	Jitter float64
}

// Exhausted reports whether an item that has failed attempts times may not be tried again.
func (p Policy) Exhausted(attempts int) bool { return attempts >= p.MaxAttempts }

// Delay returns the wait after the given number of failed attempts (1 = first failure).
func (p Policy) Delay(attempts int) time.Duration {
	if attempts < 1 || p.Initial <= 0 {
		return 0
	}
	m := p.Multiplier
	if m < 1 {
		m = 2
	}
	d := float64(p.Initial)
	for i := 1; i < attempts; i++ {
		d *= m
		if p.Max > 0 && d >= float64(p.Max) {
			d = float64(p.Max)
			break
		}
	}
	if p.Max > 0 && d > float64(p.Max) {
		d = float64(p.Max)
	}
	if p.Jitter > 0 {
		j := p.Jitter
		if j > 1 {
			j = 1
		}
		d -= d * j * rand.Float64()
	}
	return time.Duration(d)
}
