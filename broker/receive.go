package broker

import (
	"errors"
	"fmt"
	"time"

	"github.com/msgx/msgx/backoff"
	"github.com/msgx/msgx/broker/driver"
)

func (l *Listener) receive() {
	var t tally // the counts of the handlers run on this goroutine
	defer func() {
		l.met.flush(&t)
		l.unpark()
		for _, c := range l.work {
			close(c)
		}
		if l.anyW != nil {
			close(l.anyW)
		}
		l.loop.Done()
	}()
	// Take whatever the adapter has buffered, up to the prefetch window: one
	// Receive call per message would cost a lock round per message.
	max := l.sub.Prefetch
	if l.bh != nil {
		max = l.sub.BatchSize
	}
	failures := 0
	for {
		if due := l.due(); len(due) > 0 {
			l.held.track(l.b.opts.clock.Now(), due)
			if !l.handle(due, &t) {
				return
			}
		}
		l.met.flush(&t) // before Receive may block
		rctx, cancel := l.receiveContext()
		raw, err := l.ds.Receive(rctx, max)
		cancel()
		if err != nil {
			if l.recvCtx.Err() != nil || errors.Is(err, driver.ErrClosed) {
				return
			}
			if rctx.Err() != nil {
				continue // a parked delivery is due
			}
			failures++
			l.b.report(Event{Topic: l.sub.Topic, Group: l.sub.Group, Err: fmt.Errorf("receive: %w", err)})
			wait := backoff.Policy{Initial: 100 * time.Millisecond, Max: 5 * time.Second}.Delay(failures)
			select {
			case <-l.b.opts.clock.After(wait):
			case <-l.recvCtx.Done():
				return
			}
			continue
		}
		failures = 0
		// One allocation for the whole receive instead of one per delivery.
		backing := make([]Delivery, len(raw))
		ds := make([]*Delivery, 0, len(raw))
		for i, r := range raw {
			d := &backing[i]
			initDelivery(d, r, l)
			// Deliveries requeued by another group on a re-publishing broker
			// are not ours; early ones wait in the scheduler.
			if !l.foreign(d, &t) && !l.parkIfEarly(d) {
				ds = append(ds, d)
			}
		}
		l.met.received.Add(float64(len(raw)))
		if len(ds) > 0 {
			l.held.track(l.b.opts.clock.Now(), ds)
			if !l.handle(ds, &t) {
				return
			}
		}
	}
}

// handle runs the handlers of ds: a batch listener's at once, otherwise on
// this goroutine (one worker) or on the workers. It reports false when the
// listener is stopping.
func (l *Listener) handle(ds []*Delivery, t *tally) bool {
	if l.bh != nil {
		// A batch listener has one worker: the receive loop itself.
		l.processBatch(ds, t)
		return true
	}
	var since time.Duration // Receive may have waited: read the clock anew
	for _, d := range ds {
		if l.recvCtx.Err() != nil {
			return false // stopping: what has not started stays unsettled
		}
		if l.work == nil {
			// One worker: run it here and save a goroutine hand-off per message.
			since = l.process(d, t, since)
			continue
		}
		if !l.dispatch(l.workerFor(d), d) {
			return false
		}
	}
	return true
}
