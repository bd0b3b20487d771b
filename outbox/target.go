package outbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/msgx/msgx/broker"
)

// An unavailable broker is the target's state, not the events': a send that
// fails with broker.Unavailable gives its claims back without charging their
// attempts (hold) and pauses the target in this relay. While paused, the
// lane's workers claim nothing; one of them probes the broker with the retry
// policy's backoff, and the lane resumes when a probe gets through. Events
// wait PENDING in id order meanwhile, so a per-key target keeps its order and
// its lag grows instead of its dead letters. Each relay pauses and probes on
// its own; none waits for another.

// Pinger is what a publisher may offer for probing a paused target: a cheap
// round trip to the broker (*broker.Broker has one). Without it the relay
// resumes after the backoff delay and the next send is the probe.
type Pinger interface {
	Ping(ctx context.Context) error
}

// TargetState is what this relay knows of one target's broker.
type TargetState struct {
	Target string
	// Kind is the target's lane: on a PerKey target a DEAD event holds its
	// key (BlockedKeys).
	Kind LaneKind
	// Paused: the last send (or probe) found the broker unavailable; the
	// relay sends nothing of the target until a probe gets through.
	Paused bool
	// PausedSince is when the current pause began (zero when not paused).
	PausedSince time.Time
	// Probes counts the failed probes of the current pause.
	Probes int
	// LastError is the last failed send or probe of the target, with its
	// time (empty and zero before any).
	LastError   string
	LastErrorAt time.Time
}

// gate is a lane's TargetState and the pause's wake-up for its workers.
type gate struct {
	mu      sync.Mutex
	st      TargetState
	probing bool          // a worker is probing
	resumed chan struct{} // closed when the pause ends
	// failures counts the sends and probes that found the broker
	// unavailable since the last confirmed send: the probe backoff goes on
	// growing when a probe passes but the next send fails again.
	failures int
}

// state returns a copy of the target's state.
func (g *gate) state() TargetState {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.st
}

func (g *gate) paused() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.st.Paused
}

// failed records a failed send; an unavailable broker pauses the target. It
// reports whether this call began the pause.
func (g *gate) failed(now time.Time, err error) (paused bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.st.LastError, g.st.LastErrorAt = err.Error(), now
	if !broker.IsUnavailable(err) {
		return false
	}
	g.failures++
	if g.st.Paused {
		return false
	}
	g.st.Paused, g.st.PausedSince, g.st.Probes = true, now, 0
	g.resumed = make(chan struct{})
	return true
}

// delivered records a confirmed send: the broker takes messages again.
func (g *gate) delivered() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.failures = 0
}

// resume ends the pause; it returns how long the pause lasted, and false
// when there was none.
func (g *gate) resume(now time.Time) (time.Duration, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.st.Paused {
		return 0, false
	}
	d := now.Sub(g.st.PausedSince)
	g.st.Paused, g.st.PausedSince, g.st.Probes = false, time.Time{}, 0
	close(g.resumed)
	return d, true
}

// await is what a worker of a paused lane does instead of a cycle: the first
// worker to get here probes, the others wait for the pause to end. Both
// return when ctx ends.
func (l *lane) await(ctx context.Context) {
	g := &l.gate
	g.mu.Lock()
	if !g.st.Paused {
		g.mu.Unlock()
		return
	}
	if g.probing {
		resumed := g.resumed
		g.mu.Unlock()
		select {
		case <-resumed:
		case <-ctx.Done():
		}
		return
	}
	g.probing = true
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.probing = false
		g.mu.Unlock()
	}()
	l.probe(ctx)
}

// probe waits the retry policy's delay for the failures so far, then asks
// the broker whether it answers; it resumes the lane when it does, or when
// the publisher cannot ping (the next send tells).
func (l *lane) probe(ctx context.Context) {
	g, r := &l.gate, l.r
	g.mu.Lock()
	n := g.failures
	g.mu.Unlock()
	r.sleep(ctx, r.cfg.retry.Delay(n))
	if ctx.Err() != nil {
		return
	}
	if p, ok := l.cfg.pub.(Pinger); ok {
		pctx, cancel := context.WithTimeout(ctx, r.cfg.publishTimeout)
		err := p.Ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		// A ping error means the broker did not answer (driver.Pinger's
		// contract), whatever its class: only a publisher that cannot ping
		// leaves it to the next send.
		if err != nil && !errors.Is(err, broker.ErrUnsupported) {
			now := r.cfg.clock.Now()
			g.mu.Lock()
			g.failures++
			g.st.Probes++
			g.st.LastError, g.st.LastErrorAt = fmt.Sprintf("probe: %v", err), now
			probes, since := g.st.Probes, g.st.PausedSince
			g.mu.Unlock()
			l.met.probes.Inc()
			// One line per probe: the backoff spaces them (up to the retry
			// policy's maximum delay), so they cannot flood.
			l.log.Warn("outbox: target still unavailable; its events wait", "probes", probes,
				"paused_for", now.Sub(since), "next_probe_in", r.cfg.retry.Delay(n+1), "err", err)
			return
		}
		l.met.probes.Inc()
	}
	if d, ok := g.resume(r.cfg.clock.Now()); ok {
		l.met.up.Set(1)
		l.log.Info("outbox: target answers again; resuming", "paused_for", d)
	}
}
