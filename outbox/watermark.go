package outbox

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// The unordered lane claims in id order from a floor instead of from the
// first pending id, because on PostgreSQL the front of the pending index
// fills with entries of rows already sent (dead until vacuum) and a claim
// that walks them costs more the longer the relay has run. The floor only
// makes claims cheaper; it never decides what gets sent: rows under it that
// become claimable later (a retry coming due, an expired lease, a row whose
// transaction committed late) are found by passes from below it (see floor).
//
// The floor may only pass ids whose transactions have ended, or a
// late-committing event would wait for the next full pass. The watermark
// tells which: every id up to it has committed or rolled back. A sample reads
// the last id handed out (L), then, in a later statement, the transaction ids
// running in the database (R). Enqueue gives its transaction a transaction id
// before taking event ids, so every transaction holding an id <= L is either
// over or in R. Once a later sample finds none of R running, all of them
// have ended, and L becomes the watermark (at once when R is empty). Sampling
// assigns no transaction id (an earlier version took one per sample, 50 a
// second per relay, bringing wraparound closer for nothing). A snapshot's
// xmin and xmax cannot stand in for R: a running transaction newer than every
// completed one is above the snapshot's xmax and so in neither.

// rescanInterval is how often a lane starts a pass from the first pending id.
const rescanInterval = time.Second

// watermarkInterval is how often the watermark is sampled.
const watermarkInterval = 20 * time.Millisecond

// maxWatermarkSamples bounds the samples waiting for their transactions to
// end (a long transaction elsewhere holds them all back).
const maxWatermarkSamples = 64

type wmSample struct {
	last    int64
	running []int64
}

type watermark struct {
	w       atomic.Int64
	mu      sync.Mutex
	next    time.Time
	samples []wmSample
}

// load returns the watermark as of the last sample.
func (m *watermark) load() int64 { return m.w.Load() }

// sample takes a sample when one is due and nobody else is taking one, and
// moves the watermark up to the newest sample whose transactions have all
// ended. Errors only leave the watermark where it was.
func (m *watermark) sample(ctx context.Context, o *pgOps, now time.Time) {
	if !m.mu.TryLock() {
		return
	}
	defer m.mu.Unlock()
	if now.Before(m.next) {
		return
	}
	m.next = now.Add(watermarkInterval)
	last, running, err := o.watermarkSample(ctx)
	if err != nil {
		return
	}
	m.samples = append(m.samples, wmSample{last: last, running: running})
	keep := m.samples[:0]
	for _, s := range m.samples {
		if !slices.ContainsFunc(s.running, func(x int64) bool { return slices.Contains(running, x) }) {
			if s.last > m.w.Load() {
				m.w.Store(s.last)
			}
			continue
		}
		keep = append(keep, s)
	}
	if len(keep) > maxWatermarkSamples {
		keep = append(keep[:0], keep[1:]...)
	}
	m.samples = keep
}

// floor is an unordered lane's claim start, and the passes below it.
//
// Rows that become claimable by time lie below the floor: retries coming
// due, expired leases, replayed events. A pass claims from below the floor
// and goes on, batch after batch at full speed, from where its last claim
// ended, until a claim comes back short; then claims start at the floor
// again. A pass starts every rescanInterval from the first pending id (for
// everything, whoever made it due), and as soon as a retry this relay
// scheduled comes due, from that retry's id (so that recovering from a broker
// outage runs at the speed of a burn-down, not a batch a second).
type floor struct {
	v        atomic.Int64
	mu       sync.Mutex
	nextFull time.Time
	pass     bool  // a pass is under way
	cursor   int64 // where the pass's next claim starts
	due      []dueRetry
}

// dueRetry is a retry this relay scheduled: rows from minID on come due at at.
type dueRetry struct {
	at    time.Time
	minID int64
}

// dueGrain groups the due times of scheduled retries, and maxDue bounds how
// many groups are remembered (beyond it, the periodic pass finds them).
const (
	dueGrain = 10 * time.Millisecond
	maxDue   = 4096
)

// start returns where the next claim starts and whether it is part of a pass.
func (f *floor) start(now time.Time) (after int64, pass bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pass {
		return f.cursor, true
	}
	from := int64(-1)
	if !now.Before(f.nextFull) {
		f.nextFull = now.Add(rescanInterval)
		from = 0
	}
	n := 0
	for _, d := range f.due {
		if d.at.After(now) {
			break
		}
		if from < 0 || d.minID-1 < from {
			from = d.minID - 1
		}
		n++
	}
	f.due = append(f.due[:0], f.due[n:]...)
	if from < 0 || from >= f.v.Load() {
		return f.v.Load(), false
	}
	f.pass, f.cursor = true, from
	return from, true
}

// passed records a claim of a pass that ended at last: the pass goes on
// while claims come back full.
func (f *floor) passed(last int64, full bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if full {
		f.cursor = max(f.cursor, last)
		return
	}
	f.pass = false
}

// retryAt remembers that rows from minID on come due at at.
func (f *floor) retryAt(at time.Time, minID int64) {
	if t := at.Truncate(dueGrain); !t.Equal(at) {
		at = t.Add(dueGrain)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	i, found := slices.BinarySearchFunc(f.due, at, func(d dueRetry, t time.Time) int { return d.at.Compare(t) })
	switch {
	case found:
		f.due[i].minID = min(f.due[i].minID, minID)
	case len(f.due) < maxDue:
		f.due = slices.Insert(f.due, i, dueRetry{at: at, minID: minID})
	}
}

// advance raises the floor after a claim that started from after, with the
// watermark w read before it: a full batch ending at last proves every
// claimable row up to last was seen, a short one every row up to w.
func (f *floor) advance(w, last int64, full bool) {
	to := w
	if full && last < to {
		to = last
	}
	for {
		cur := f.v.Load()
		if to <= cur || f.v.CompareAndSwap(cur, to) {
			return
		}
	}
}
