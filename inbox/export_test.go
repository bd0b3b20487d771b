package inbox

import (
	"context"
	"time"

	"github.com/msgx/msgx/store"
)

// Step runs one pump step (tests drive the pump without its loop).
func (e *Engine) Step(ctx context.Context) (progress bool, wakeAt time.Time, err error) {
	res, _, err := e.step(ctx, nil, false)
	return res.progress, res.wakeAt, err
}

// AcquireLease takes the stream lease for tests that call Step.
func (e *Engine) AcquireLease(ctx context.Context) (bool, error) {
	return e.lease.acquire(ctx, e.clk.Now())
}

// WithParkHook is called each time the pump parks, after its timer is set.
func WithParkHook(f func(until time.Time)) Option { return func(o *options) { o.parkHook = f } }

// BackfillIDs is the try right after a commit.
func (e *Engine) BackfillIDs(ctx context.Context, ids []int64) error { return e.backfillIDs(ctx, ids) }

// WithLeaseTimesFromClock makes the lease compare expiry with the engine's
// clock instead of the database's, so that step-driven tests on a fake clock
// can expire it.
func WithLeaseTimesFromClock() Option { return func(o *options) { o.leaseHostTime = true } }

// Statements are the engine's PostgreSQL statements, by name.
func Statements() map[string]string {
	q, err := queries.For(store.Postgres)
	if err != nil {
		panic(err)
	}
	return q
}
