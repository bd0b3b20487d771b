package admin

import (
	"sync"
	"time"

	"github.com/msgx/msgx/clock"
)

// Throttle is how failed authentications slow a client down: the first
// Free failures cost nothing; each one after locks the client out for Base,
// doubling up to Max; failures are forgotten after Forget without one. The
// table holds at most Clients addresses.
type Throttle struct {
	Free    int
	Base    time.Duration
	Max     time.Duration
	Forget  time.Duration
	Clients int
}

// DefaultThrottle: 5 free failures, then 1 s, 2 s, 4 s … up to 15 min;
// forgotten after an hour without a failure; 10 000 clients.
var DefaultThrottle = Throttle{Free: 5, Base: time.Second, Max: 15 * time.Minute, Forget: time.Hour, Clients: 10000}

func (t Throttle) withDefaults() Throttle {
	d := DefaultThrottle
	if t.Free > 0 {
		d.Free = t.Free
	}
	if t.Base > 0 {
		d.Base = t.Base
	}
	if t.Max > 0 {
		d.Max = t.Max
	}
	if t.Forget > 0 {
		d.Forget = t.Forget
	}
	if t.Clients > 0 {
		d.Clients = t.Clients
	}
	return d
}

// attempts is one client's record.
type attempts struct {
	failures int
	last     time.Time // of the last failure
	until    time.Time // locked out until
}

// throttle holds failed authentications per client, in memory.
type throttle struct {
	cfg     Throttle
	clk     clock.Clock
	evicted func(client string)

	mu      sync.Mutex
	clients map[string]*attempts
}

func newThrottle(cfg Throttle, clk clock.Clock, evicted func(string)) *throttle {
	return &throttle{cfg: cfg.withDefaults(), clk: clk, evicted: evicted, clients: map[string]*attempts{}}
}

// wait is how long the client is still locked out (0: it may try).
func (t *throttle) wait(client string) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.clk.Now()
	a := t.clients[client]
	switch {
	case a == nil:
		return 0
	case now.Sub(a.last) >= t.cfg.Forget:
		delete(t.clients, client)
		return 0
	case now.Before(a.until):
		return a.until.Sub(now)
	}
	return 0
}

// fail records a failure of the client: its failures so far and how long
// it is now locked out.
func (t *throttle) fail(client string) (int, time.Duration) {
	t.mu.Lock()
	now := t.clk.Now()
	a := t.clients[client]
	var gone string
	if a == nil {
		if len(t.clients) >= t.cfg.Clients {
			gone = t.evictLocked(now)
		}
		a = &attempts{}
		t.clients[client] = a
	}
	if now.Sub(a.last) >= t.cfg.Forget {
		a.failures = 0
	}
	a.failures++
	a.last = now
	var lock time.Duration
	if over := a.failures - t.cfg.Free; over > 0 {
		lock = t.cfg.Max
		if over <= 30 && t.cfg.Base<<(over-1) < t.cfg.Max {
			lock = t.cfg.Base << (over - 1)
		}
		a.until = now.Add(lock)
	}
	failures := a.failures
	t.mu.Unlock()
	if gone != "" && t.evicted != nil {
		t.evicted(gone)
	}
	return failures, lock
}

// evictLocked makes room for a client: it drops every forgotten record, or
// else the one whose last failure is oldest (which it returns).
func (t *throttle) evictLocked(now time.Time) string {
	var oldest string
	var oldestAt time.Time
	for k, a := range t.clients {
		if now.Sub(a.last) >= t.cfg.Forget {
			delete(t.clients, k)
			continue
		}
		if oldest == "" || a.last.Before(oldestAt) {
			oldest, oldestAt = k, a.last
		}
	}
	if len(t.clients) < t.cfg.Clients {
		return ""
	}
	delete(t.clients, oldest)
	return oldest
}
