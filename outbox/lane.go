package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/failpoint"
)

// Stats counts what relay cycles did.
type Stats struct {
	Claimed   int // events taken under a lease
	Published int // events confirmed by the broker
	Retried   int // failed events scheduled for another attempt
	Dead      int // events that became DEAD
	Covered   int // older events of compacted keys marked done
	Released  int // claims given back unsent (the relay was stopping)
	// Held counts claims given back unsent because the target's broker was
	// unavailable: their attempts are not charged.
	Held      int
	LeaseLost int // claims another relay took over before this one sent them
}

func (s *Stats) add(o Stats) {
	s.Claimed += o.Claimed
	s.Published += o.Published
	s.Retried += o.Retried
	s.Dead += o.Dead
	s.Covered += o.Covered
	s.Released += o.Released
	s.Held += o.Held
	s.LeaseLost += o.LeaseLost
}

type lane struct {
	r     *Relay
	cfg   laneConfig
	log   *slog.Logger
	met   laneMetrics
	floor floor     // unordered lanes on PostgreSQL
	gate  gate      // whether the target's broker takes messages (see target.go)
	walk  walkState // per-key and compacted lanes: shared by the workers
	wake  chan struct{}
}

// walkState is a position in the key space of a target: a pass walks every
// key once, from the empty cursor to the end. The workers of a lane share one
// and hold its lock while they claim, so that each takes the next keys
// instead of walking keys another worker holds.
type walkState struct {
	mu          sync.Mutex
	cursor      string
	passClaimed int
}

// advance moves the cursor after a walk that visited walked keys up to last
// (limit asked). A pass ends when a walk comes back short; idle then says the
// whole pass claimed nothing.
func (w *walkState) advance(walked int, last string, limit, claimed int) (wrapped, idle bool) {
	w.passClaimed += claimed
	if walked == limit {
		w.cursor = last
		return false, false
	}
	idle = w.passClaimed == 0
	w.cursor, w.passClaimed = "", 0
	return true, idle
}

// maxChain bounds how many events of one key a per-key worker claims one
// after the other from the sent one (no walk) before the key goes back to the
// walk, so that keys beyond what the workers hold get their turn.
const maxChain = 64

// worker is one claim loop's own state: the claims it carries into its next
// cycle (per-key lanes claim a key's next event when they finish its head).
type worker struct {
	carry []*claimed
	lease time.Time
	// fruitless: the last walk found nothing while this worker carried
	// claims; it walks again only once its carry is gone, since the keys it
	// would visit are held (by it or by others) until then.
	fruitless bool
}

// release gives carried claims back (the loop is stopping).
func (wk *worker) release(ctx context.Context, l *lane) error {
	if len(wk.carry) == 0 {
		return nil
	}
	err := l.releaseAll(ctx, wk.carry, wk.lease)
	wk.carry = nil
	return err
}

// cycleResult says what a worker does next: go on at once (more), or, when
// idle, nothing was due anywhere in the lane.
type cycleResult struct {
	more, idle bool
	st         Stats
}

// cycle runs one claim-publish-finish round. flush makes the unordered lane
// claim from its first pending id (no floor).
func (l *lane) cycle(ctx context.Context, w *walkState, wk *worker, flush bool) (cycleResult, error) {
	switch l.cfg.kind {
	case PerKey:
		return l.cyclePerKey(ctx, w, wk)
	case Compacted:
		return l.cycleCompacted(ctx, w)
	default:
		return l.cycleUnordered(ctx, flush)
	}
}

// claimCtx is the context of a statement that leases rows (a claim, a lease
// extension): not cancelled when the relay stops, bounded by the database
// timeout alone. A statement cancelled in flight may still run and commit on
// the server (its messages were already sent) without the relay reading its
// result: the rows would stay leased, an attempt counted, until the lease ran
// out, and no other relay could take them meanwhile. The relay reads every
// claim's rows and, when it stops meanwhile, gives them back (stopped).
func claimCtx(ctx context.Context) context.Context { return context.WithoutCancel(ctx) }

// stopped gives back the rows a claim took when the relay stopped during
// the claim; it returns ctx's error then, nil otherwise.
func (l *lane) stopped(ctx context.Context, evs []*claimed, lease time.Time) error {
	if ctx.Err() == nil {
		return nil
	}
	return errors.Join(ctx.Err(), l.releaseAll(ctx, evs, lease))
}

func (l *lane) cycleUnordered(ctx context.Context, flush bool) (cycleResult, error) {
	now := l.r.cfg.clock.Now()
	lease := leaseUntil(now, l.r.cfg.lease)
	var after, wm int64
	var pass bool
	if l.r.wm != nil && !flush {
		// The last sample's watermark: an older one is still true, and the
		// sample itself is taken after the send, off the way from claim to
		// broker.
		wm = l.r.wm.load()
		after, pass = l.floor.start(now)
		defer l.r.wm.sample(ctx, l.r.pg, now)
	}
	evs, err := l.r.ops.claimUnordered(claimCtx(ctx), l.cfg.target, after, now, lease, l.cfg.batch)
	if err == nil {
		err = l.stopped(ctx, evs, lease)
	}
	if err != nil {
		if pass {
			l.floor.passed(0, false)
		}
		return cycleResult{}, err
	}
	if l.r.wm != nil && !flush {
		var last int64
		for _, e := range evs {
			last = max(last, e.id)
		}
		full := len(evs) == l.cfg.batch
		l.floor.advance(wm, last, full)
		if pass {
			l.floor.passed(last, full)
		}
	}
	if len(evs) == 0 {
		return cycleResult{idle: true}, nil
	}
	st, err := l.deliver(ctx, evs, lease)
	return cycleResult{more: len(evs) == l.cfg.batch, st: st}, err
}

func (l *lane) cyclePerKey(ctx context.Context, w *walkState, wk *worker) (cycleResult, error) {
	now := l.r.cfg.clock.Now()
	evs, lease := wk.carry, wk.lease
	wk.carry = nil
	if len(evs) == 0 {
		lease = leaseUntil(now, l.r.cfg.lease)
	}
	var res cycleResult
	// Walk for more keys when the carried claims fill less than half a batch.
	if len(evs) == 0 {
		wk.fruitless = false
	}
	if limit := l.cfg.batch - len(evs); limit >= l.cfg.batch/2 && !wk.fruitless {
		w.mu.Lock()
		got, walked, last, err := l.r.ops.claimHeads(claimCtx(ctx), l.cfg.target, w.cursor, now, lease, limit)
		if err != nil {
			w.mu.Unlock()
			return cycleResult{}, errors.Join(err, l.releaseAll(ctx, evs, lease))
		}
		if walked < limit {
			// End of a pass: the events without a key have their turn.
			kl, err := l.r.ops.claimKeyless(claimCtx(ctx), l.cfg.target, now, lease, l.cfg.batch)
			if err != nil {
				w.mu.Unlock()
				return cycleResult{}, errors.Join(err, l.releaseAll(ctx, append(evs, got...), lease))
			}
			got = append(got, kl...)
		}
		wrapped, idle := w.advance(walked, last, limit, len(got))
		w.mu.Unlock()
		wk.fruitless = len(got) == 0 && len(evs) > 0
		evs = append(evs, got...)
		if err := l.stopped(ctx, evs, lease); err != nil {
			return cycleResult{}, err
		}
		res = cycleResult{more: !wrapped || !idle, idle: idle && len(evs) == 0}
	} else {
		res.more = true
	}
	if len(evs) == 0 {
		return res, nil
	}
	var err error
	res.st, err = l.deliverChain(ctx, evs, lease, wk)
	if len(wk.carry) > 0 {
		res.more, res.idle = true, false
	}
	return res, err
}

func (l *lane) cycleCompacted(ctx context.Context, w *walkState) (cycleResult, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := l.r.cfg.clock.Now()
	lease := leaseUntil(now, l.r.cfg.lease)
	keys, err := l.r.ops.walkCompacted(ctx, l.cfg.target, w.cursor, now, l.cfg.flushLimit)
	if err != nil {
		return cycleResult{}, err
	}
	ready := make([]head, 0, len(keys))
	for _, k := range keys {
		if k.ready {
			ready = append(ready, k)
		}
	}
	var evs []*claimed
	if len(ready) > 0 {
		if evs, err = l.r.ops.claimCompacted(claimCtx(ctx), l.cfg.target, ready, now, lease); err != nil {
			return cycleResult{}, err
		}
	}
	if len(keys) < l.cfg.flushLimit {
		kl, err := l.r.ops.claimKeyless(claimCtx(ctx), l.cfg.target, now, lease, l.cfg.flushLimit)
		if err != nil {
			return cycleResult{}, errors.Join(err, l.releaseAll(ctx, evs, lease))
		}
		evs = append(evs, kl...)
	}
	if err := l.stopped(ctx, evs, lease); err != nil {
		return cycleResult{}, err
	}
	var last string
	if len(keys) > 0 {
		last = keys[len(keys)-1].key
	}
	wrapped, idle := w.advance(len(keys), last, l.cfg.flushLimit, len(evs))
	// Only a flush that reached its limit is followed at once by the next:
	// otherwise the lane gathers changes for a flush period.
	res := cycleResult{more: !wrapped, idle: idle}
	if len(evs) > 0 {
		res.st, err = l.deliver(ctx, evs, lease)
	}
	return res, err
}

// outcome of one claimed event.
type outcome int

const (
	sent outcome = iota
	retry
	dead
	release
	// hold: not sent, or refused, because the broker is unavailable; given
	// back without charging the attempt (the target pauses).
	hold
	// lost: the lease could not be extended before a send (another relay
	// took the row after it ran out); the relay leaves the row alone.
	lost
	// pending: not sent yet in this cycle.
	pending
)

// delivery is one cycle's claimed events on their way to the broker: their
// outcomes so far and the lease they are held under.
type delivery struct {
	evs   []*claimed
	res   []outcome
	errs  []error
	lease time.Time
	// down is the error of a send that found the broker unavailable: the
	// delivery's later sends are held without being tried.
	down error
}

// deliver publishes claimed events and records the outcome of each, fenced by
// the lease.
func (l *lane) deliver(ctx context.Context, evs []*claimed, lease time.Time) (Stats, error) {
	return l.deliverChain(ctx, evs, lease, nil)
}

// deliverChain is deliver that, given a worker, lets a per-key lane claim
// the next events of the sent keys into the worker's carry.
func (l *lane) deliverChain(ctx context.Context, evs []*claimed, lease time.Time, wk *worker) (Stats, error) {
	st := Stats{Claimed: len(evs)}
	slices.SortFunc(evs, func(a, b *claimed) int { return cmpInt64(a.id, b.id) })
	d := &delivery{evs: evs, res: make([]outcome, len(evs)), errs: make([]error, len(evs)), lease: lease}
	var toSend []int
	for i, e := range evs {
		if e.expiries > l.r.cfg.maxLeaseExpiries {
			// Relays keep dying while they hold this event: it may be what
			// kills them (or the broker call never returns).
			d.res[i], d.errs[i] = dead, fmt.Errorf("the lease expired without a result %d times (the relays holding it stopped or crashed)", e.expiries)
			continue
		}
		d.res[i] = pending
		toSend = append(toSend, i)
	}
	l.publish(ctx, d, toSend)
	return st, l.finish(ctx, d.evs, d.res, d.errs, d.lease, &st, wk)
}

// isolateAfterExpiries: an event whose lease expired this often goes in a
// send of its own, so that an event that kills its relay does not keep
// taking the events batched with it down too.
const isolateAfterExpiries = 2

// publish sends the events of idx in id order, grouped by topic: one
// confirmed send per topic for the events on their first attempt, one for the
// retried ones (see sendRetries), and one per event for events whose lease
// expired repeatedly.
func (l *lane) publish(ctx context.Context, d *delivery, idx []int) {
	var topics []string
	byTopic := map[string][]int{}
	for _, i := range idx {
		t := d.evs[i].topic
		if _, ok := byTopic[t]; !ok {
			topics = append(topics, t)
		}
		byTopic[t] = append(byTopic[t], i)
	}
	for _, t := range topics {
		var first, again []int
		for _, i := range byTopic[t] {
			switch e := d.evs[i]; {
			case e.expiries >= isolateAfterExpiries:
				l.send(ctx, t, d, []int{i})
			case e.own() <= 1:
				first = append(first, i)
			default:
				again = append(again, i)
			}
		}
		if len(again) > 0 {
			l.sendRetries(ctx, t, d, again)
		}
		if len(first) > 0 {
			l.sendFirst(ctx, t, d, first)
		}
	}
}

// sendFirst sends events on their first attempt together. A send the broker
// rejects as a whole is split at once, each event sent alone: only the event
// the broker refuses is charged (and dead), not the events that shared its
// send.
func (l *lane) sendFirst(ctx context.Context, topic string, d *delivery, idx []int) {
	in, err := l.send(ctx, topic, d, idx)
	if err == nil || len(in) < 2 || ctx.Err() != nil || d.down != nil || !broker.IsRejected(err) {
		return
	}
	for _, i := range in {
		d.res[i] = pending
	}
	for _, i := range in {
		l.send(ctx, topic, d, []int{i})
	}
}

// sendRetries sends retried events together, so that after a broker outage
// the backlog drains at full speed. When that send fails, the events are
// isolated so that a bad event fails only itself: at once after a Rejected
// error; otherwise the first two are sent alone as probes, and only if the
// broker takes one of them are the others sent one by one (a broker that is
// still down costs two more sends, not one per event).
func (l *lane) sendRetries(ctx context.Context, topic string, d *delivery, idx []int) {
	in, err := l.send(ctx, topic, d, idx)
	if err == nil || len(in) < 2 || ctx.Err() != nil || d.down != nil {
		// An unavailable broker is no event's fault: nothing to isolate.
		return
	}
	saved := make([]outcome, len(in))
	for j, i := range in {
		saved[j], d.res[i] = d.res[i], pending
	}
	if !broker.IsRejected(err) {
		// Two probes: the first may be the one bad event.
		probed := 0
		for probed < 2 {
			_, perr := l.send(ctx, topic, d, in[probed:probed+1])
			probed++
			if perr == nil || broker.IsRejected(perr) || d.down != nil {
				// Broker down: the sends below hold the others untried.
				break
			}
			if probed == 2 {
				// Still refused: the others keep the outcome of the batch.
				for j, i := range in[probed:] {
					d.res[i] = saved[probed+j]
				}
				return
			}
		}
		in = in[probed:]
	}
	for _, i := range in {
		l.send(ctx, topic, d, []int{i})
	}
}

// holdLease makes sure the lease outlasts a send begun now and the statement
// recording its outcome: when it would not, it extends the lease of every
// event of the delivery still held (sent or not), and marks the events whose
// rows the relay no longer holds as lost, so that they are not sent. Without
// this a relay whose lease ran out during a long cycle (retries go one by
// one, each under the full publish timeout) would go on sending rows another
// relay has taken: an older duplicate overtaking a key's successor, an older
// compacted state landing after a newer one.
func (l *lane) holdLease(ctx context.Context, d *delivery) {
	now := l.r.cfg.clock.Now()
	if now.Add(l.r.cfg.publishTimeout + l.r.cfg.dbTimeout).Before(d.lease) {
		return
	}
	var rows []rowRef
	for i, e := range d.evs {
		if d.res[i] != pending && d.res[i] != sent {
			continue
		}
		rows = append(rows, e.rowRef)
		if e.head.id != 0 && e.head.id != e.id {
			rows = append(rows, e.head)
		}
	}
	if len(rows) == 0 {
		return
	}
	newLease := leaseUntil(now, l.r.cfg.lease)
	held, err := l.r.ops.extendLease(claimCtx(ctx), l.cfg.target, rows, d.lease, newLease)
	if err != nil {
		// Sending on a lease that may run out is what this prevents: give the
		// unsent events back (their lease still fences the statement).
		l.log.Warn("outbox: extending the lease before a send failed; giving the rest of the cycle back", "err", err)
		for i := range d.evs {
			if d.res[i] == pending {
				d.res[i], d.errs[i] = release, err
			}
		}
		return
	}
	d.lease = newLease
	nLost := 0
	for i, e := range d.evs {
		if d.res[i] != pending && d.res[i] != sent {
			continue
		}
		ref, ok := held[e.id]
		h, hok := held[e.head.id]
		if e.head.id == 0 || e.head.id == e.id {
			h, hok = ref, ok
		}
		if !ok || !hok {
			d.res[i], d.errs[i] = lost, errors.New("lease lost before the send")
			nLost++
			continue
		}
		e.rowRef.tid = ref.tid
		if e.head.id != 0 {
			e.head.tid = h.tid
		}
	}
	if nLost > 0 {
		l.log.Warn("outbox: lease ran out during a cycle; another relay has those events", "events", nLost)
	}
}

// send publishes the pending events of idx in one confirmed send and records
// their outcomes; it returns the events it sent and the send's error.
func (l *lane) send(ctx context.Context, topic string, d *delivery, idx []int) ([]int, error) {
	if ctx.Err() == nil {
		l.holdLease(ctx, d)
	}
	evs, res, errs := d.evs, d.res, d.errs
	msgs := make([]*broker.Message, 0, len(idx))
	var in []int
	for _, i := range idx {
		if res[i] != pending {
			continue
		}
		if d.down != nil {
			res[i], errs[i] = hold, d.down
			continue
		}
		m, err := message(evs[i], l.cfg.ce)
		if err != nil {
			res[i], errs[i] = dead, err
			continue
		}
		msgs = append(msgs, m)
		in = append(in, i)
	}
	if len(msgs) == 0 {
		return nil, nil
	}
	pctx, cancel := context.WithTimeout(ctx, l.r.cfg.publishTimeout)
	err := l.cfg.pub.SendConfirmed(pctx, topic, msgs...)
	cancel()
	if err == nil {
		// Confirmed by the broker, not yet marked sent: a crash here sends
		// the events again (same event ids) after the lease.
		l.r.cfg.failpoints.Hit(failpoint.OutboxAfterConfirm)
	}
	// The class of the error decides (broker.Code): Unavailable is the
	// broker's state and charges nothing, Rejected is the event's own
	// failure (final when the event was alone in the send), Unknown counts
	// as an attempt.
	code := broker.Code(err)
	for _, i := range in {
		switch {
		case err == nil:
			res[i] = sent
		case ctx.Err() != nil:
			res[i], errs[i] = release, err
		case code == broker.Unavailable:
			res[i], errs[i] = hold, err
		case code == broker.Rejected && len(msgs) == 1:
			res[i], errs[i] = dead, err
		case l.r.cfg.retry.Exhausted(evs[i].own()):
			res[i], errs[i] = dead, err
		default:
			res[i], errs[i] = retry, err
		}
	}
	switch {
	case err == nil:
		l.delivered()
	case ctx.Err() == nil:
		if code == broker.Unavailable {
			d.down = err
		}
		l.sendFailed(err)
	}
	return in, err
}

// sendFailed notes a failed send in the target's state; the first one that
// finds the broker unavailable pauses the target.
func (l *lane) sendFailed(err error) {
	if l.gate.failed(l.r.cfg.clock.Now(), err) {
		l.met.up.Set(0)
		l.log.Warn("outbox: target unavailable; pausing it: its events wait, charged no attempt, until a probe gets through", "err", err)
	}
}

// delivered notes a confirmed send: a pause (another worker's, or of a
// Flush) ends, since the broker takes messages.
func (l *lane) delivered() {
	l.gate.delivered()
	if d, ok := l.gate.resume(l.r.cfg.clock.Now()); ok {
		l.met.up.Set(1)
		l.log.Info("outbox: target took a send again; resuming", "paused_for", d)
	}
}

// message builds the broker message of a claimed event (see newMessage).
func message(e *claimed, ce CloudEvents) (*broker.Message, error) {
	var h map[string]string
	if len(e.headers) > 0 {
		if err := json.Unmarshal(e.headers, &h); err != nil {
			return nil, fmt.Errorf("outbox: headers of %s: %w", e.eventID, err)
		}
	}
	if h == nil {
		h = make(map[string]string, 2)
	}
	return newMessage(h, e.eventID, e.key, e.typ, e.payload, e.createdAt, ce), nil
}

// newMessage is the broker message of an event, with the event's own
// headers h (taken over): the event id travels as the msgx-event-id header,
// the event type as msgx-type (unless h sets one), a Tombstone as an empty
// payload, and the lane's CloudEvents headers when it has them. Both
// relays, the table's and the WAL's, send what it builds.
func newMessage(h map[string]string, id, key string, typ EventType, payload []byte, created time.Time, ce CloudEvents) *broker.Message {
	h[broker.HeaderEventID] = id
	if _, ok := h[broker.HeaderType]; !ok {
		h[broker.HeaderType] = string(typ)
	}
	if typ == Tombstone {
		payload = nil
	}
	ce.headers(h, id, key, created, len(payload) > 0)
	return &broker.Message{Key: key, Payload: payload, Headers: h}
}

// finish records the outcomes. Its statements run even when ctx is cancelled
// (the relay is stopping), each under the database timeout.
func (l *lane) finish(ctx context.Context, evs []*claimed, res []outcome, errs []error, lease time.Time, st *Stats, wk *worker) error {
	f := &finishing{l: l, evs: evs, res: res, errs: errs, lease: lease, now: l.r.cfg.clock.Now(), st: st}
	stopping := ctx.Err() != nil // a stopping relay claims no successors
	ctx = context.WithoutCancel(ctx)
	for i, e := range evs {
		switch res[i] {
		case sent:
			if e.head.id != 0 {
				f.sentReps = append(f.sentReps, e.rowRef)
			} else {
				f.sentIDs = append(f.sentIDs, e.rowRef)
			}
		case release, pending:
			f.relIDs = append(f.relIDs, e.rowRef)
			if e.head.id != 0 && e.head.id != e.id {
				f.clearHeads = append(f.clearHeads, e.head)
			}
		case hold:
			f.held = append(f.held, i)
			if e.head.id != 0 && e.head.id != e.id {
				f.clearHeads = append(f.clearHeads, e.head)
			}
		case lost:
			st.LeaseLost++
		default:
			f.failed = append(f.failed, i)
		}
	}
	if wk != nil && !stopping && l.r.pg != nil {
		f.sentAndAdvance(ctx, wk)
	} else {
		f.sent(ctx)
	}
	f.covered(ctx)
	f.dead(ctx)
	f.retries(ctx)
	f.heldBack(ctx)
	f.released(ctx)
	return errors.Join(f.all...)
}

// finishing is one finish: the rows by outcome, and the errors so far.
type finishing struct {
	l                                     *lane
	evs                                   []*claimed
	res                                   []outcome
	errs                                  []error
	lease, now                            time.Time
	st                                    *Stats
	sentIDs, sentReps, relIDs, clearHeads []rowRef
	failed, held                          []int
	all                                   []error
}

// published counts the sent events (metrics, stats, log).
func (f *finishing) published(n int) {
	f.st.Published += n
	f.l.met.published.Add(float64(n))
	if n > 0 {
		f.l.log.Debug("outbox events sent", "events", n, "first_event_id", firstSent(f.evs, f.res))
	}
}

// sent moves the sent events (not compacted heads) to the sent records.
func (f *finishing) sent(ctx context.Context) {
	if len(f.sentIDs) == 0 {
		return
	}
	n, err := f.l.r.ops.markSent(ctx, f.l.cfg.target, f.sentIDs, f.lease, f.now)
	f.all = append(f.all, err)
	if err == nil && int(n) < len(f.sentIDs) {
		f.l.log.Warn("outbox lease lost before the sent events were marked; another relay will send them again",
			"events", len(f.sentIDs), "marked", n, "first_event_id", firstSent(f.evs, f.res))
	}
	f.published(len(f.sentIDs))
}

// sentAndAdvance is sent that also claims, into the worker's carry, the next
// event of each sent key (per-key lanes on PostgreSQL).
func (f *finishing) sentAndAdvance(ctx context.Context, wk *worker) {
	var adv []advance
	parent := map[string]*claimed{}
	for i, e := range f.evs {
		if f.res[i] == sent && e.key != "" && e.chain < maxChain {
			a := advance{id: e.id}
			if len(e.succ) > 0 {
				a.succ = e.succ[0]
			}
			adv = append(adv, a)
			parent[e.key] = e
		}
	}
	if len(adv) == 0 {
		f.sent(ctx)
		return
	}
	newLease := leaseUntil(f.now, f.l.r.cfg.lease)
	next, succ, err := f.l.r.pg.markSentAdvance(ctx, f.l.cfg.target, f.sentIDs, f.lease, f.now, newLease, adv)
	f.all = append(f.all, err)
	var keep, stray []*claimed
	for _, c := range next {
		p := parent[c.key]
		switch {
		case p != nil && len(p.succ) > 0 && p.succ[0].id == c.id:
			c.succ = p.succ[1:]
		case p != nil && len(p.succ) == 0:
			c.succ = succ[c.key]
		default:
			// The row at a successor's ctid is not the one read ahead
			// (the slot was reused after a lease was lost): give it back.
			stray = append(stray, c)
			continue
		}
		c.chain = p.chain + 1
		keep = append(keep, c)
	}
	if len(stray) > 0 {
		f.all = append(f.all, f.l.releaseAll(ctx, stray, newLease))
	}
	wk.carry, wk.lease = keep, newLease
	f.published(len(f.sentIDs))
}

// covered finishes the sent newest events of compacted keys, covering the
// older ones.
func (f *finishing) covered(ctx context.Context) {
	if len(f.sentReps) == 0 {
		return
	}
	n, err := f.l.r.ops.coverSent(ctx, f.l.cfg.target, f.sentReps, f.lease, f.now, false, "")
	f.all = append(f.all, err)
	f.st.Covered += int(n)
	f.l.met.covered.Add(float64(n))
	f.published(len(f.sentReps))
}

// dead makes the failed events without attempts left DEAD, one by one so
// each gets its own log line and reason.
func (f *finishing) dead(ctx context.Context) {
	o, target := f.l.r.ops, f.l.cfg.target
	for _, i := range f.failed {
		if f.res[i] != dead {
			continue
		}
		e := f.evs[i]
		reason := f.errs[i].Error()
		var err error
		if e.head.id != 0 {
			var n int64
			n, err = o.coverSent(ctx, target, []rowRef{e.rowRef}, f.lease, f.now, true, reason)
			f.st.Covered += int(n)
			f.l.met.covered.Add(float64(n))
		} else {
			var n int64
			n, err = o.finish(ctx, "MarkDead", target, []rowRef{e.rowRef}, f.lease, f.now, reason)
			if err == nil && n == 0 {
				// The lease ran out under the send and another relay took
				// the row: it is that relay's now, not DEAD. Counting or
				// logging it as dead would report an event that is later
				// sent.
				f.st.LeaseLost++
				f.l.log.Warn("outbox lease lost before the event was marked dead; another relay has it",
					"event_id", e.eventID, "topic", e.topic, "attempts", e.attempts, "err", f.errs[i])
				continue
			}
		}
		f.all = append(f.all, err)
		f.st.Dead++
		f.l.met.dead.Inc()
		if f.l.cfg.kind == PerKey && e.key != "" {
			// The key's later events wait for it (see BlockedKeys).
			f.l.log.Error("outbox event dead; it holds its key until it is replayed or skipped", "event_id", e.eventID,
				"topic", e.topic, "key", e.key, "attempts", e.attempts, "err", f.errs[i])
			continue
		}
		f.l.log.Error("outbox event dead", "event_id", e.eventID, "topic", e.topic, "attempts", e.attempts, "err", f.errs[i])
	}
}

// retries schedules the other failed events, grouped by their own attempts
// (one due time per group).
func (f *finishing) retries(ctx context.Context) {
	groups := map[int][]int{}
	for _, i := range f.failed {
		if f.res[i] == dead {
			continue
		}
		// A claim always counts its attempt; max keeps a retry off the
		// current instant even if it did not.
		a := max(f.evs[i].own(), 1)
		groups[a] = append(groups[a], i)
	}
	for attempts, idx := range groups {
		next := f.now.Add(f.l.r.cfg.retry.Delay(attempts))
		ids := make([]rowRef, len(idx))
		for j, i := range idx {
			ids[j] = f.evs[i].rowRef
			if h := f.evs[i].head; h.id != 0 && h.id != f.evs[i].id {
				f.clearHeads = append(f.clearHeads, h)
			}
		}
		first := f.evs[idx[0]]
		_, err := f.l.r.ops.finish(ctx, "MarkRetry", f.l.cfg.target, ids, f.lease, next, f.errs[idx[0]].Error())
		if err == nil && f.l.r.wm != nil && f.l.cfg.kind == Unordered {
			f.l.floor.retryAt(next, first.id) // idx is in id order
		}
		f.all = append(f.all, err)
		f.st.Retried += len(ids)
		f.l.met.retried.Add(float64(len(ids)))
		f.l.log.Warn("outbox send failed; will retry", "event_id", first.eventID, "events", len(ids), "topic", first.topic,
			"attempts", attempts, "next_attempt", next, "err", f.errs[idx[0]])
	}
}

// heldBack gives back the claims held because the broker was unavailable,
// undoing their claim's attempt and noting the error on them. An unordered
// lane's floor comes back to them (they lie below it) once the target
// resumes.
func (f *finishing) heldBack(ctx context.Context) {
	if len(f.held) == 0 {
		return
	}
	rows := make([]rowRef, len(f.held))
	for j, i := range f.held {
		rows[j] = f.evs[i].rowRef
	}
	first := f.evs[f.held[0]] // f.held is in id order
	_, err := f.l.r.ops.finish(ctx, "Hold", f.l.cfg.target, rows, f.lease, f.errs[f.held[0]].Error())
	if err == nil && f.l.r.wm != nil && f.l.cfg.kind == Unordered {
		f.l.floor.retryAt(f.now, first.id)
	}
	f.all = append(f.all, err)
	f.st.Held += len(rows)
	f.l.met.held.Add(float64(len(rows)))
	// One line per send held: the pause stops sends, so these are few.
	f.l.log.Info("outbox events held back: the target is unavailable; no attempt charged", "events", len(rows),
		"event_id", first.eventID, "topic", first.topic, "err", f.errs[f.held[0]])
}

// released gives unsent claims back and ends the lease of compacted heads
// whose key was not sent.
func (f *finishing) released(ctx context.Context) {
	o, target := f.l.r.ops, f.l.cfg.target
	if len(f.relIDs) > 0 {
		_, err := o.finish(ctx, "Release", target, f.relIDs, f.lease)
		f.all = append(f.all, err)
		f.st.Released += len(f.relIDs)
	}
	if len(f.clearHeads) > 0 {
		_, err := o.finish(ctx, "ClearLease", target, f.clearHeads, f.lease)
		f.all = append(f.all, err)
	}
}

// releaseAll gives back claims that will not be published in this cycle.
func (l *lane) releaseAll(ctx context.Context, evs []*claimed, lease time.Time) error {
	if len(evs) == 0 {
		return nil
	}
	res := make([]outcome, len(evs))
	for i := range res {
		res[i] = release
	}
	var st Stats
	return l.finish(ctx, evs, res, make([]error, len(evs)), lease, &st, nil)
}

func firstSent(evs []*claimed, res []outcome) string {
	for i, r := range res {
		if r == sent {
			return evs[i].eventID
		}
	}
	return ""
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
