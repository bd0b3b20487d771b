package admin

import (
	"context"
	"sync"
	"time"

	"github.com/msgx/msgx/clock"
)

// readyCache keeps the last answer of the readiness checks, so that a flood
// of unauthenticated /readyz calls costs one run of the checks per period,
// and callers arriving during a run wait for it rather than start another.
type readyCache struct {
	clk clock.Clock

	mu      sync.Mutex
	at      time.Time
	res     []CheckResult
	ok      bool
	running chan struct{} // closed when the run in progress ends
}

// get answers the cached result younger than ttl, else the result of the run
// in progress or of a new run.
func (c *readyCache) get(ctx context.Context, ttl time.Duration, run func() ([]CheckResult, bool)) ([]CheckResult, bool) {
	for {
		c.mu.Lock()
		if c.res != nil && c.clk.Now().Sub(c.at) < ttl {
			res, ok := c.res, c.ok
			c.mu.Unlock()
			return res, ok
		}
		if c.running == nil {
			done := make(chan struct{})
			c.running = done
			c.mu.Unlock()
			res, ok := run()
			c.mu.Lock()
			c.res, c.ok, c.at, c.running = res, ok, c.clk.Now(), nil
			c.mu.Unlock()
			close(done)
			return res, ok
		}
		wait := c.running
		c.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return []CheckResult{{Name: "readiness", Error: "no answer: " + ctx.Err().Error()}}, false
		}
	}
}
