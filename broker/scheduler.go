package broker

import (
	"container/heap"
	"context"
	"time"
)

// The port-local scheduler. A delivery whose not-before time (SendDelayed, a
// requeue's backoff) lies ahead is parked here, unsettled, instead of being
// held by a worker: the receive loop goes on dispatching every other key, and
// calls Receive with a context that ends when the earliest parked delivery is
// due, so that it is dispatched on time. Parked deliveries keep their place in
// the adapter's prefetch window; a listener that stops leaves them unsettled
// for redelivery. Only the receive loop touches the scheduler.
type scheduler struct {
	parked parkedHeap
}

type parkedDelivery struct {
	at time.Time
	d  *Delivery
}

type parkedHeap []parkedDelivery

func (h parkedHeap) Len() int           { return len(h) }
func (h parkedHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h parkedHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *parkedHeap) Push(x any)        { *h = append(*h, x.(parkedDelivery)) }
func (h *parkedHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = parkedDelivery{}
	*h = old[:len(old)-1]
	return x
}

// parkIfEarly parks d when its not-before time lies ahead and reports
// whether it did.
func (l *Listener) parkIfEarly(d *Delivery) bool {
	if l.b.caps.NativeDelay {
		return false
	}
	at, ok := d.notBeforeTime()
	if !ok || !at.After(l.b.opts.clock.Now()) {
		return false
	}
	heap.Push(&l.sched.parked, parkedDelivery{at: at, d: d})
	l.met.parked.Inc()
	return true
}

// due takes the parked deliveries whose time has come, earliest first.
func (l *Listener) due() []*Delivery {
	if len(l.sched.parked) == 0 {
		return nil
	}
	now := l.b.opts.clock.Now()
	var out []*Delivery
	for len(l.sched.parked) > 0 && !l.sched.parked[0].at.After(now) {
		out = append(out, heap.Pop(&l.sched.parked).(parkedDelivery).d)
		l.met.parked.Dec()
	}
	return out
}

// receiveContext is the context of the next Receive: the listener's own, or,
// while deliveries are parked, one that also ends when the earliest is due.
func (l *Listener) receiveContext() (context.Context, context.CancelFunc) {
	if len(l.sched.parked) == 0 {
		return l.recvCtx, func() {}
	}
	ctx, cancel := context.WithCancel(l.recvCtx)
	t := l.b.opts.clock.NewTimer(l.sched.parked[0].at.Sub(l.b.opts.clock.Now()))
	go func() {
		defer t.Stop()
		select {
		case <-t.C():
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// unpark forgets what is parked when the listener stops: the deliveries stay
// unsettled and the broker redelivers them once the subscription closes.
func (l *Listener) unpark() {
	l.met.parked.Sub(float64(len(l.sched.parked)))
	clear(l.sched.parked)
	l.sched.parked = l.sched.parked[:0]
}
