package outbox

import (
	"context"
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
// transaction committed late) are found by a full claim from the start,
// which each lane runs every rescanInterval.
//
// The floor may only pass ids whose transactions have ended, or a
// late-committing event would wait for the next full claim. The watermark
// tells which: every id up to it has committed or rolled back. A sample reads
// the last id handed out (L), then assigns a transaction id N. Enqueue gives
// its transaction a transaction id before taking event ids, so every
// transaction holding an id <= L got its transaction id before N. Once the
// oldest running transaction is newer than N, all of them have ended, and L
// becomes the watermark.

// rescanInterval is how often a lane claims from the first pending id.
const rescanInterval = time.Second

// watermarkInterval is how often the watermark is sampled.
const watermarkInterval = 20 * time.Millisecond

// maxWatermarkSamples bounds the samples waiting for their transactions to
// end (a long transaction elsewhere holds them all back).
const maxWatermarkSamples = 64

type wmSample struct{ last, xid int64 }

type watermark struct {
	w       atomic.Int64
	mu      sync.Mutex
	next    time.Time
	samples []wmSample
}

// current returns the watermark, sampling it first when a sample is due and
// nobody else is taking one. Errors only leave the watermark where it was.
func (m *watermark) current(ctx context.Context, o *ops, now time.Time) int64 {
	if !m.mu.TryLock() {
		return m.w.Load()
	}
	defer m.mu.Unlock()
	if now.Before(m.next) {
		return m.w.Load()
	}
	m.next = now.Add(watermarkInterval)
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	var last, xid, xmin int64
	if err := o.run.QueryRow(ctx, o.q.Get("Watermark")).Scan(&last, &xid, &xmin); err != nil {
		return m.w.Load()
	}
	keep := m.samples[:0]
	for _, s := range m.samples {
		if xmin > s.xid {
			if s.last > m.w.Load() {
				m.w.Store(s.last)
			}
			continue
		}
		keep = append(keep, s)
	}
	if len(keep) == maxWatermarkSamples {
		keep = append(keep[:0], keep[1:]...)
	}
	m.samples = append(keep, wmSample{last: last, xid: xid})
	return m.w.Load()
}

// floor is an unordered lane's claim start.
type floor struct {
	v        atomic.Int64
	mu       sync.Mutex
	nextFull time.Time
}

// start returns where the next claim starts: 0 when a full claim is due.
func (f *floor) start(now time.Time) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !now.Before(f.nextFull) {
		f.nextFull = now.Add(rescanInterval)
		return 0
	}
	return f.v.Load()
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
