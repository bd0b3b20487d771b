// Package clock is the injectable time source every scheduler decision reads, so
// that tests advance time instead of sleeping.
package clock

import (
	"sync"
	"time"
)

// Clock tells the time and waits for it. Real is the production implementation;
// Fake is moved by tests.
type Clock interface {
	Now() time.Time
	// After returns a channel that receives once d has elapsed on this clock.
	After(d time.Duration) <-chan time.Time
	// NewTimer returns a stoppable timer on this clock.
	NewTimer(d time.Duration) Timer
}

// Timer is a stoppable one-shot timer.
type Timer interface {
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it did so.
	Stop() bool
}

// Real is the wall clock.
type Real struct{}

// Now implements Clock.
func (Real) Now() time.Time { return time.Now() }

// After implements Clock.
func (Real) After(d time.Duration) <-chan time.Time { return time.After(d) }

// NewTimer implements Clock.
func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time { return r.t.C }
func (r realTimer) Stop() bool          { return r.t.Stop() }

// Fake is a manually advanced clock. The zero value is not usable; use NewFake.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	waiters []*fakeTimer
	// changed is closed and replaced whenever a waiter is added, so tests can wait
	// until the code under test is blocked on the clock.
	changed chan struct{}
}

// NewFake returns a fake clock set to start.
func NewFake(start time.Time) *Fake {
	return &Fake{now: start, changed: make(chan struct{})}
}

// Now implements Clock.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// After implements Clock.
func (f *Fake) After(d time.Duration) <-chan time.Time { return f.NewTimer(d).C() }

// NewTimer implements Clock.
func (f *Fake) NewTimer(d time.Duration) Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTimer{f: f, at: f.now.Add(d), c: make(chan time.Time, 1)}
	if d <= 0 {
		t.c <- f.now
		t.fired = true
		return t
	}
	f.waiters = append(f.waiters, t)
	close(f.changed)
	f.changed = make(chan struct{})
	return t
}

// Advance moves the clock forward by d and fires every timer that became due.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	kept := f.waiters[:0]
	for _, w := range f.waiters {
		if !w.at.After(f.now) {
			w.fired = true
			w.c <- f.now
			continue
		}
		kept = append(kept, w)
	}
	f.waiters = kept
}

// Set moves the clock to t (forward only) and fires due timers.
func (f *Fake) Set(t time.Time) {
	if d := t.Sub(f.Now()); d > 0 {
		f.Advance(d)
	}
}

// Waiters reports how many timers are pending.
func (f *Fake) Waiters() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.waiters)
}

// WaitForWaiters blocks until at least n timers are pending or done is closed;
// it reports whether the count was reached. Tests use it to know the code under
// test is parked on the clock before advancing it.
func (f *Fake) WaitForWaiters(done <-chan struct{}, n int) bool {
	for {
		f.mu.Lock()
		count, changed := len(f.waiters), f.changed
		f.mu.Unlock()
		if count >= n {
			return true
		}
		select {
		case <-changed:
		case <-done:
			return false
		}
	}
}

type fakeTimer struct {
	f     *Fake
	at    time.Time
	c     chan time.Time
	fired bool
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	if t.fired {
		return false
	}
	for i, w := range t.f.waiters {
		if w == t {
			t.f.waiters = append(t.f.waiters[:i], t.f.waiters[i+1:]...)
			return true
		}
	}
	return false
}

// Offset is Base shifted by D: Now reads Base.Now()+D, and a wait lasts as
// long as on Base, since a shifted clock still runs at the same pace. It
// stands for a host whose wall clock is off (the reliability campaign's clock
// skew): times that several hosts compare must not depend on it. The instant
// a timer delivers on its channel is Base's; msgx reads Now after a wait
// instead of using it.
type Offset struct {
	Base Clock
	D    time.Duration
}

// Now implements Clock.
func (o Offset) Now() time.Time { return o.Base.Now().Add(o.D) }

// After implements Clock.
func (o Offset) After(d time.Duration) <-chan time.Time { return o.Base.After(d) }

// NewTimer implements Clock.
func (o Offset) NewTimer(d time.Duration) Timer { return o.Base.NewTimer(d) }

// Unshifted implements Shifted.
func (o Offset) Unshifted() Clock { return o.Base }

// Shifted is a clock that reads another one shifted (Offset, or a clock
// corrected to a server's).
type Shifted interface {
	Clock
	Unshifted() Clock
}

// Paced reports whether c runs at the pace of the wall clock: Real, or a
// shift of Real. Code may then use the runtime's own timers (a context
// deadline) for waits on c.
func Paced(c Clock) bool {
	switch c := c.(type) {
	case Real:
		return true
	case Shifted:
		return Paced(c.Unshifted())
	}
	return false
}
