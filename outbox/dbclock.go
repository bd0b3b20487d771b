package outbox

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/msgx/msgx/internal/clock"
)

// dbClock is the relay's default clock on PostgreSQL: the host's clock
// corrected by its offset to the database server's clock. Leases are written
// by one relay and judged by another, so they must be read on one clock: with
// several hosts, each relay's own clock could let a relay whose clock runs
// ahead take rows whose lease has not run out on the database's time.
//
// The offset is measured by reading clock_timestamp() and taking the middle
// of the round trip; an offset within the round trip cannot be told from
// measurement error and counts as none (a relay on the database's host, or a
// well-synchronised one, reads its own clock unchanged).
type dbClock struct {
	host   clock.Clock
	offset atomic.Int64 // nanoseconds to add to the host's time
	synced atomic.Int64 // host time (unix ns) of the last measurement, 0: never
}

// dbClockResync is how often Run measures the offset again.
const dbClockResync = 30 * time.Second

func (c *dbClock) Now() time.Time {
	return c.host.Now().Add(time.Duration(c.offset.Load()))
}

func (c *dbClock) After(d time.Duration) <-chan time.Time { return c.host.After(d) }

func (c *dbClock) NewTimer(d time.Duration) clock.Timer { return c.host.NewTimer(d) }

// due says whether a measurement is due (never measured, or the last one is
// older than dbClockResync on the host's clock).
func (c *dbClock) due() bool {
	s := c.synced.Load()
	return s == 0 || c.host.Now().Sub(time.Unix(0, s)) >= dbClockResync
}

// sync measures the offset with read, which returns the database's time.
func (c *dbClock) sync(ctx context.Context, read func(context.Context) (time.Time, error)) error {
	before := c.host.Now()
	db, err := read(ctx)
	if err != nil {
		return fmt.Errorf("outbox: reading the database clock: %w", err)
	}
	after := c.host.Now()
	rtt := after.Sub(before)
	off := db.Sub(before.Add(rtt / 2))
	if off.Abs() <= rtt {
		off = 0
	}
	c.offset.Store(int64(off))
	c.synced.Store(after.UnixNano())
	return nil
}
