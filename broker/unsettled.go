package broker

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ErrStalled is reported on the lifecycle channel when deliveries have been
// unsettled for longer than the stall threshold (WithStallThreshold): a
// handler that does not return, a settlement that keeps failing, a delivery
// held because its release failed. The operator sees the stall while it
// still holds only part of the prefetch window.
var ErrStalled = errors.New("broker: deliveries unsettled beyond the stall threshold")

// The age of what a listener holds. Deliveries are tracked in cohorts, one
// per receive (or per group of parked deliveries falling due): the receive
// loop reads the clock once per cohort, a settlement costs one atomic
// decrement, and the oldest unsettled delivery is the receipt time of the
// oldest cohort with deliveries left. Parked deliveries are not tracked while
// they wait for their time: they are held on purpose.
type unsettled struct {
	mu      sync.Mutex
	cohorts []*cohort // in receive order
	// wake tells the watchdog that a cohort arrived.
	wake chan struct{}
}

type cohort struct {
	at       time.Time
	left     atomic.Int32
	reported bool // guarded by unsettled.mu
}

// track starts a cohort of the deliveries ds, received at now.
func (u *unsettled) track(now time.Time, ds []*Delivery) {
	if len(ds) == 0 {
		return
	}
	c := &cohort{at: now}
	c.left.Store(int32(len(ds)))
	for _, d := range ds {
		d.cohort = c
	}
	u.mu.Lock()
	u.cohorts = append(u.cohorts, c)
	u.mu.Unlock()
	select {
	case u.wake <- struct{}{}:
	default: // the watchdog has a wake-up pending already
	}
}

// untrack marks d as no longer held by the port: settled, released or, with
// the listener stopping, left to the broker.
func untrack(d *Delivery) {
	if c := d.cohort; c != nil {
		d.cohort = nil
		c.left.Add(-1)
	}
}

func untrackAll(ds []*Delivery) {
	for _, d := range ds {
		untrack(d)
	}
}

// oldestLocked drops the settled cohorts at the front and returns the
// oldest one left, or nil.
func (u *unsettled) oldestLocked() *cohort {
	i := 0
	for i < len(u.cohorts) && u.cohorts[i].left.Load() <= 0 {
		u.cohorts[i] = nil
		i++
	}
	u.cohorts = u.cohorts[i:]
	if len(u.cohorts) == 0 {
		u.cohorts = nil // let the backing array go
		return nil
	}
	return u.cohorts[0]
}

// oldest returns the receipt time of the oldest unsettled delivery.
func (u *unsettled) oldest() (time.Time, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if c := u.oldestLocked(); c != nil {
		return c.at, true
	}
	return time.Time{}, false
}

// overdue returns how many deliveries of cohorts received at or before
// limit are still unsettled and not reported yet, marks those cohorts
// reported, and returns the receipt time of the oldest of them. next is the
// receipt time of the oldest unreported cohort after limit (zero if none):
// the watchdog's next look is due when it crosses the threshold.
func (u *unsettled) overdue(limit time.Time) (n int, since, next time.Time, any bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.oldestLocked()
	for _, c := range u.cohorts {
		left := c.left.Load()
		if c.reported || left <= 0 {
			continue
		}
		if c.at.After(limit) {
			return n, since, c.at, true
		}
		c.reported = true
		if n == 0 {
			since = c.at
		}
		n += int(left)
	}
	return n, since, time.Time{}, len(u.cohorts) > 0
}

// watch reports deliveries unsettled for longer than the stall threshold,
// once per cohort. It sleeps while the listener holds nothing and otherwise
// wakes when the oldest unreported cohort crosses the threshold, on the
// broker's clock.
func (l *Listener) watch() {
	defer l.loop.Done()
	threshold := l.b.opts.stallThreshold
	clk := l.b.opts.clock
	for {
		now := clk.Now()
		n, since, next, held := l.held.overdue(now.Add(-threshold))
		if n > 0 {
			l.b.report(Event{Topic: l.sub.Topic, Group: l.sub.Group,
				Err: fmt.Errorf("%w: %d deliveries unsettled for %v, since %s", ErrStalled, n,
					now.Sub(since).Round(time.Millisecond), since.UTC().Format(time.RFC3339Nano))})
		}
		if !held || next.IsZero() {
			// Nothing held, or all of it reported: wait for the next cohort
			// (a reported one that settles needs no look).
			select {
			case <-l.held.wake:
				continue
			case <-l.recvCtx.Done():
				return
			}
		}
		t := clk.NewTimer(next.Add(threshold).Sub(now))
		select {
		case <-t.C():
		case <-l.recvCtx.Done():
			t.Stop()
			return
		}
	}
}

// oldestUnsettled is the collector of msgx_broker_oldest_unsettled_seconds:
// evaluated when scraped, on the broker's clock, as the oldest of the
// listeners on each topic and group (0 when they hold nothing).
type oldestUnsettled struct {
	desc *prometheus.Desc
	b    *Broker // set once the broker is built
}

// Describe implements prometheus.Collector.
func (o *oldestUnsettled) Describe(ch chan<- *prometheus.Desc) { ch <- o.desc }

// Collect implements prometheus.Collector.
func (o *oldestUnsettled) Collect(ch chan<- prometheus.Metric) {
	if o.b == nil {
		return
	}
	now := o.b.opts.clock.Now()
	ages := map[[2]string]float64{}
	o.b.mu.Lock()
	ls := make([]*Listener, 0, len(o.b.listeners))
	for l := range o.b.listeners {
		ls = append(ls, l)
	}
	o.b.mu.Unlock()
	for _, l := range ls {
		k := [2]string{l.sub.Topic, l.sub.Group}
		age := ages[k]
		if at, ok := l.held.oldest(); ok {
			age = max(age, now.Sub(at).Seconds())
		}
		ages[k] = age
	}
	for k, age := range ages {
		ch <- prometheus.MustNewConstMetric(o.desc, prometheus.GaugeValue, age, k[0], k[1])
	}
}

// OldestUnsettled returns when the oldest delivery the listener holds
// unsettled was received, on the broker's clock (false: it holds none): the
// age msgx_broker_oldest_unsettled_seconds exports, for a consumer's own
// readiness.
func (l *Listener) OldestUnsettled() (time.Time, bool) { return l.held.oldest() }
