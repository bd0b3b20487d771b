// Package dbclock is a host's clock corrected to a database server's, for
// the times that several hosts write and compare (leases, retry times).
package dbclock

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/msgx/msgx/clock"
)

// Resync is how often the offset should be measured again.
const Resync = 30 * time.Second

// Clock is the host's clock corrected by its offset to the database
// server's clock. A time written by one host and judged by another must be
// read on one clock: with each host's own, a host whose clock runs ahead
// would see another's lease as ended early, and a host whose clock runs
// behind would wait out another's retry time for longer than it says.
//
// The offset is measured by reading the database's time and taking the
// middle of the round trip; an offset within the round trip cannot be told
// from measurement error and counts as none (a process on the database's
// host, or a well-synchronised one, reads its own clock unchanged). Waits
// are the host's: a corrected clock runs at the same pace.
type Clock struct {
	host   clock.Clock
	offset atomic.Int64 // nanoseconds to add to the host's time
	synced atomic.Int64 // host time (unix ns) of the last measurement, 0: never
}

// New returns host, uncorrected until the first Sync.
func New(host clock.Clock) *Clock { return &Clock{host: host} }

// Now implements clock.Clock.
func (c *Clock) Now() time.Time { return c.host.Now().Add(c.Offset()) }

// After implements clock.Clock.
func (c *Clock) After(d time.Duration) <-chan time.Time { return c.host.After(d) }

// NewTimer implements clock.Clock.
func (c *Clock) NewTimer(d time.Duration) clock.Timer { return c.host.NewTimer(d) }

// Unshifted is the host's clock (clock.Shifted).
func (c *Clock) Unshifted() clock.Clock { return c.host }

// Offset is the correction added to the host's time.
func (c *Clock) Offset() time.Duration { return time.Duration(c.offset.Load()) }

// Due says whether a measurement is due (never measured, or the last one is
// older than Resync on the host's clock).
func (c *Clock) Due() bool {
	s := c.synced.Load()
	return s == 0 || c.host.Now().Sub(time.Unix(0, s)) >= Resync
}

// Sync measures the offset with read, which returns the database's time.
func (c *Clock) Sync(ctx context.Context, read func(context.Context) (time.Time, error)) error {
	before := c.host.Now()
	db, err := read(ctx)
	if err != nil {
		return fmt.Errorf("reading the database clock: %w", err)
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
