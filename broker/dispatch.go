package broker

import (
	"fmt"
	"hash/maphash"
	"runtime/debug"
	"time"
)

// workerFor picks the worker for a delivery: the same key always goes to the same
// worker, which keeps per-key order with concurrent handlers. An unkeyed
// delivery goes to whichever worker is free, so it never waits behind a slow
// handler while another worker idles.
func (l *Listener) workerFor(d *Delivery) chan *Delivery {
	if d.Key == "" {
		return l.anyW
	}
	return l.work[maphash.String(l.seed, d.Key)%uint64(len(l.work))]
}

func (l *Listener) dispatch(c chan *Delivery, d *Delivery) bool {
	select {
	case c <- d:
		return true
	case <-l.recvCtx.Done():
		return false
	}
}

func (l *Listener) worker(c chan *Delivery) {
	var t tally // the counts of the handlers run on this goroutine
	defer func() {
		l.met.flush(&t)
		l.loop.Done()
	}()
	own, shared := c, l.anyW
	var since time.Duration
	for own != nil || shared != nil {
		var d *Delivery
		var ok, fromOwn bool
		select {
		case d, ok = <-own:
			fromOwn = true
		case d, ok = <-shared:
		default:
			// Nothing queued: publish the counts before waiting, and read
			// the clock anew after it.
			l.met.flush(&t)
			since = 0
			select {
			case d, ok = <-own:
				fromOwn = true
			case d, ok = <-shared:
			}
		}
		if !ok { // that channel is closed: stop receiving from it
			if fromOwn {
				own = nil
			} else {
				shared = nil
			}
			continue
		}
		since = l.process(d, &t, since)
	}
}

// process runs the handler for one delivery and settles it; t is the calling
// goroutine's tally.
//
// The handler's run time is timed from since, the end of the previous
// handler this goroutine ran back to back (zero: read the clock), and process
// returns the end of its own handler when the next may start from it. So a
// goroutine running deliveries back to back reads the clock once per message
// (a read costs as much as a quarter of the rest of a delivery's way through
// the port), and a handler's time includes the acknowledgement of the one
// before it, a fraction of a microsecond. Anything slower — a held delivery,
// a settlement that publishes — makes the next handler read the clock anew.
func (l *Listener) process(d *Delivery, t *tally, since time.Duration) time.Duration {
	ctx := l.handlerCtx
	if ctx.Err() != nil {
		untrack(d)
		return 0 // stopping: leave it unsettled for redelivery
	}
	start := since
	if start == 0 {
		start = time.Since(l.epoch)
	}
	err := l.call(d)
	end := time.Since(l.epoch)
	if t.observe(end - start) {
		l.met.flush(t)
	}
	disp := decide(ctx, err)
	if !l.settles(disp, 1, err, t) {
		untrack(d)
		return 0
	}
	attempts := d.RedeliveryCount + 1
	disp, err = l.exhaust(disp, err, attempts)
	if !l.settle(d, disp, err, attempts, t) || disp != Ack {
		return 0
	}
	return end
}

// processBatch runs the batch handler and settles the batch as a whole.
func (l *Listener) processBatch(ds []*Delivery, t *tally) {
	ctx := l.handlerCtx
	if ctx.Err() != nil {
		untrackAll(ds)
		return // stopping: leave it unsettled for redelivery
	}
	start := time.Since(l.epoch)
	err := l.callBatch(ds)
	t.observe(time.Since(l.epoch) - start)
	disp := decide(ctx, err)
	if !l.settles(disp, len(ds), err, t) {
		untrackAll(ds)
		return
	}
	// One decision for the whole batch (exhaustion included): a batch never
	// ends part dead-lettered and part requeued. Its attempts are those of the
	// delivery that has been handled most often. A delivery whose settlement
	// fails is released (see settleOne), so none stays held.
	attempts := 0
	for _, d := range ds {
		attempts = max(attempts, d.RedeliveryCount+1)
	}
	disp, err = l.exhaust(disp, err, attempts)
	for _, d := range ds {
		l.settle(d, disp, err, attempts, t)
	}
}

// foreign settles a delivery that a re-publishing broker requeued for another
// group: it is not ours to handle.
func (l *Listener) foreign(d *Delivery, t *tally) bool {
	g := d.forGroup
	if g == "" || g == l.sub.Group {
		return false
	}
	l.settle(d, Ack, nil, d.RedeliveryCount+1, t)
	return true
}

func (l *Listener) call(d *Delivery) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler panic: %v\n%s", r, debug.Stack())
		}
	}()
	return l.h((*deliveryCtx)(d), d)
}

func (l *Listener) callBatch(ds []*Delivery) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("batch handler panic: %v\n%s", r, debug.Stack())
		}
	}()
	return l.bh((*deliveryCtx)(ds[0]), ds)
}
