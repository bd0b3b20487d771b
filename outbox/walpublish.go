package outbox

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/failpoint"
	"github.com/msgx/msgx/store"
)

// spill is an event the WAL relay hands to msgx_outbox.
type spill struct {
	i      int
	status Status
	// attempts charged (1 after its own failed send, 0 when it only waits
	// behind its key or has no lane here).
	attempts int
	next     time.Time
	err      string
}

// batchRun is one publication of a batch: which events are done (confirmed
// or handed over) survives a pause, so that the sends after it skip them.
type batchRun struct {
	evs  []walEvent
	done []bool
	mu   sync.Mutex
	// spills gathered by the lanes of one attempt.
	spills []spill
	down   error
}

func (b *batchRun) spillOne(s spill) {
	b.mu.Lock()
	b.spills = append(b.spills, s)
	b.mu.Unlock()
}

func (b *batchRun) isDown() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.down != nil
}

func (b *batchRun) setDown(err error) {
	b.mu.Lock()
	if b.down == nil {
		b.down = err
	}
	b.mu.Unlock()
}

// publish sends the events of a batch (complete transactions, in commit
// order) and returns once each was confirmed by the broker or handed to the
// table. While a broker is unavailable it waits and tries again, charging
// nothing; tick is called during the wait so that the stream keeps the
// server informed. It returns an error only when ctx ends or the database
// fails.
func (r *WALRelay) publish(ctx context.Context, evs []walEvent, tick func() error) error {
	b := &batchRun{evs: evs, done: make([]bool, len(evs))}
	oldest := evs[0].commit
	paused := time.Time{}
	failures := 0
	for {
		r.met.lagSeconds.Set(max(time.Since(oldest).Seconds(), 0))
		err := r.publishOnce(ctx, b)
		if err == nil {
			if !paused.IsZero() {
				r.log.Info("outbox: the broker took the wal stream's events again; resuming", "paused_for", time.Since(paused))
				r.setPaused(false)
			}
			r.met.lagSeconds.Set(0)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !broker.IsUnavailable(err) {
			return err
		}
		failures++
		if paused.IsZero() {
			paused = time.Now()
			r.setPaused(true)
			r.log.Warn("outbox: a broker is unavailable; the wal stream pauses (nothing is charged, the slot retains the WAL)", "err", err)
		}
		wait := r.table.errorPause(failures)
		for end := time.Now().Add(wait); time.Now().Before(end); {
			if !sleepReal(ctx, min(time.Until(end), time.Second)) {
				return ctx.Err()
			}
			if err := tick(); err != nil {
				return err
			}
		}
	}
}

func (r *WALRelay) setPaused(on bool) {
	st := *r.status.Load()
	st.Paused = on
	r.status.Store(&st)
	if on {
		r.met.paused.Set(1)
	} else {
		r.met.paused.Set(0)
	}
}

// publishOnce runs the lanes over the events not done yet, hands the
// failed and held ones to the table, and returns the broker's unavailable
// error when a lane met one (the events it could not send stay not done).
func (r *WALRelay) publishOnce(ctx context.Context, b *batchRun) error {
	b.down = nil
	byTarget := map[string][]int{}
	var order []string
	for i := range b.evs {
		if b.done[i] {
			continue
		}
		t := b.evs[i].Target
		if _, ok := r.lanes[t]; !ok {
			// No lane here: the table keeps it (PENDING, uncharged) for a
			// relay that has one, as the table mode would.
			b.spills = append(b.spills, spill{i: i, status: StatusPending})
			continue
		}
		if _, ok := byTarget[t]; !ok {
			order = append(order, t)
		}
		byTarget[t] = append(byTarget[t], i)
	}
	held, err := r.heldKeys(ctx, b, byTarget)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	for _, t := range order {
		lc := r.lanes[t]
		idx := byTarget[t]
		wg.Go(func() {
			switch lc.kind {
			case Unordered:
				r.sendUnordered(ctx, lc, b, idx)
			case PerKey:
				r.sendPerKey(ctx, lc, b, idx, held[t])
			case Compacted:
				r.sendCompacted(ctx, lc, b, idx, held[t])
			}
		})
	}
	wg.Wait()
	if err := r.spillAll(ctx, b); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return b.down
}

// heldKeys returns, per keyed target, the keys of the batch that have events
// in the table: the batch's events of those keys go behind them.
func (r *WALRelay) heldKeys(ctx context.Context, b *batchRun, byTarget map[string][]int) (map[string]map[string]bool, error) {
	var targets, keys []string
	seen := map[[2]string]bool{}
	for t, idx := range byTarget {
		if r.lanes[t].kind == Unordered {
			continue
		}
		for _, i := range idx {
			if b.evs[i].Key == "" {
				// An event without a key waits behind nothing.
				continue
			}
			k := [2]string{t, b.evs[i].Key}
			if !seen[k] {
				seen[k] = true
				targets, keys = append(targets, t), append(keys, b.evs[i].Key)
			}
		}
	}
	if len(targets) == 0 {
		return nil, nil
	}
	qctx, cancel := context.WithTimeout(ctx, r.cfg.dbTimeout)
	defer cancel()
	rows, err := r.db.Query(qctx, r.q.Get("WALHeld"), targets, keys)
	if err != nil {
		return nil, fmt.Errorf("outbox: keys held in the table: %w", err)
	}
	defer rows.Close()
	out := map[string]map[string]bool{}
	for rows.Next() {
		var t, k string
		if err := rows.Scan(&t, &k); err != nil {
			return nil, fmt.Errorf("outbox: keys held in the table: %w", err)
		}
		if out[t] == nil {
			out[t] = map[string]bool{}
		}
		out[t][k] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("outbox: keys held in the table: %w", err)
	}
	return out, nil
}

// sendUnordered sends the lane's events by topic in sends of the lane's batch
// size.
func (r *WALRelay) sendUnordered(ctx context.Context, lc *laneConfig, b *batchRun, idx []int) {
	topics, byTopic := groupBy(idx, func(i int) string { return b.evs[i].Topic })
	for _, tp := range topics {
		all := byTopic[tp]
		for len(all) > 0 {
			n := min(len(all), lc.batch)
			r.sendSplit(ctx, lc, b, tp, all[:n], nil)
			all = all[n:]
		}
	}
}

// sendPerKey keeps at most one event of a key in flight: round after round
// it sends the next event of every key at once. A key whose event failed,
// or that waits in the table, sends nothing more: its later events go to
// the table behind the failed one.
func (r *WALRelay) sendPerKey(ctx context.Context, lc *laneConfig, b *batchRun, idx []int, held map[string]bool) {
	keys, queues := groupBy(idx, func(i int) string { return b.evs[i].Key })
	blocked := map[string]bool{}
	for k := range held {
		blocked[k] = true
	}
	for {
		var round []int
		for _, k := range keys {
			q := queues[k]
			if len(q) == 0 {
				continue
			}
			if blocked[k] && k != "" {
				for _, i := range q {
					b.spillOne(spill{i: i, status: StatusPending})
				}
				queues[k] = nil
				continue
			}
			round = append(round, q[0])
			queues[k] = q[1:]
		}
		if len(round) == 0 || ctx.Err() != nil {
			return
		}
		failed := r.sendByTopic(ctx, lc, b, round)
		if b.isDown() {
			return
		}
		for _, i := range failed {
			blocked[b.evs[i].Key] = true
		}
	}
}

// sendCompacted sends the newest event of each key (the batch is in commit
// order, so the last one): the older ones are covered by it. A key that waits
// in the table gets its newest event there too. Events without a key are no
// key's state: each is sent, as the table lane sends them.
func (r *WALRelay) sendCompacted(ctx context.Context, lc *laneConfig, b *batchRun, idx []int, held map[string]bool) {
	newest := map[string]int{}
	for _, i := range idx {
		newest[b.evs[i].Key] = i
	}
	var send []int
	for _, i := range idx {
		k := b.evs[i].Key
		switch {
		case k == "":
			send = append(send, i)
		case newest[k] != i:
			b.done[i] = true // covered by the key's newer event
		case held[k]:
			b.spillOne(spill{i: i, status: StatusPending})
		default:
			send = append(send, i)
		}
	}
	for len(send) > 0 && ctx.Err() == nil && !b.isDown() {
		n := min(len(send), lc.batch)
		r.sendByTopic(ctx, lc, b, send[:n])
		send = send[n:]
	}
}

// sendByTopic sends events grouped by topic and returns the ones that failed
// for themselves (handed to the table).
func (r *WALRelay) sendByTopic(ctx context.Context, lc *laneConfig, b *batchRun, idx []int) []int {
	topics, byTopic := groupBy(idx, func(i int) string { return b.evs[i].Topic })
	var failed []int
	for _, tp := range topics {
		failed = r.sendSplit(ctx, lc, b, tp, byTopic[tp], failed)
	}
	return failed
}

// sendSplit sends events of one topic together. A send the broker rejects as
// a whole is split at once, each event sent alone, so that only the event
// the broker refuses fails (as the table lanes do on a first attempt). It
// appends the events that failed for themselves to failed.
func (r *WALRelay) sendSplit(ctx context.Context, lc *laneConfig, b *batchRun, topic string, idx []int, failed []int) []int {
	if ctx.Err() != nil || b.isDown() {
		return failed
	}
	err := r.send(ctx, lc, b, topic, idx)
	switch {
	case err == nil:
		return failed
	case ctx.Err() != nil:
		return failed
	case broker.IsUnavailable(err):
		b.setDown(err)
		return failed
	case broker.IsRejected(err) && len(idx) > 1:
		for _, i := range idx {
			failed = r.sendSplit(ctx, lc, b, topic, []int{i}, failed)
		}
		return failed
	}
	// Failed for itself: the table relay retries it with the same policy,
	// its first attempt charged; a lone refusal is final, as in the table
	// mode.
	now := r.cfg.clock.Now()
	final := (broker.IsRejected(err) && len(idx) == 1) || r.cfg.retry.Exhausted(1)
	for _, i := range idx {
		s := spill{i: i, status: StatusPending, attempts: 1, next: now.Add(r.cfg.retry.Delay(1)), err: err.Error()}
		if final {
			s.status = StatusDead
		}
		b.spillOne(s)
		failed = append(failed, i)
	}
	level := r.log.Warn
	if final {
		level = r.log.Error
	}
	level("outbox: wal event send failed; handed to the outbox table", "target", lc.target, "topic", topic,
		"events", len(idx), "first_event_id", b.evs[idx[0]].ID, "dead", final, "err", err)
	return failed
}

// send is one confirmed send; the events it confirmed are done.
func (r *WALRelay) send(ctx context.Context, lc *laneConfig, b *batchRun, topic string, idx []int) error {
	msgs := make([]*broker.Message, len(idx))
	for j, i := range idx {
		msgs[j] = walMessage(&b.evs[i].Event, lc.ce)
	}
	pctx, cancel := context.WithTimeout(ctx, r.cfg.publishTimeout)
	err := lc.pub.SendConfirmed(pctx, topic, msgs...)
	cancel()
	if err != nil {
		return err
	}
	// Confirmed by the broker, its position not yet confirmed to the
	// slot: a crash here sends the events again (same ids) after the
	// restart.
	r.cfg.failpoints.Hit(failpoint.OutboxAfterConfirm)
	for _, i := range idx {
		b.done[i] = true
	}
	r.met.published.WithLabelValues(lc.target).Add(float64(len(idx)))
	// The mode-independent series too, so that dashboards and alerts over
	// msgx_outbox_published_total see the events of either mode.
	r.table.met.published.WithLabelValues(lc.target).Add(float64(len(idx)))
	return nil
}

// walMessage is message() for an event read from the stream.
func walMessage(e *Event, ce CloudEvents) *broker.Message {
	h := make(map[string]string, len(e.Headers)+2)
	maps.Copy(h, e.Headers)
	return newMessage(h, e.ID, e.Key, e.Type, e.Payload, e.CreatedAt, ce)
}

// spillAll writes the attempt's spills into msgx_outbox in one transaction,
// in the batch's order (so a key's ids follow its commit order), and wakes
// the table relays.
func (r *WALRelay) spillAll(ctx context.Context, b *batchRun) error {
	if len(b.spills) == 0 {
		return nil
	}
	sp := b.spills
	b.spills = nil
	sortSpills(sp)
	n := len(sp)
	ids, targets, topics, keys, types := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	payloads := make([][]byte, n)
	headers := make([]*string, n)
	created, next := make([]time.Time, n), make([]time.Time, n)
	statuses, errs := make([]string, n), make([]*string, n)
	attempts := make([]int32, n)
	now := r.cfg.clock.Now()
	evs := make([]Event, n)
	for j, s := range sp {
		e := &b.evs[s.i].Event
		evs[j] = *e
		ids[j], targets[j], topics[j], keys[j], types[j] = e.ID, e.Target, e.Topic, e.Key, string(e.Type)
		payloads[j], created[j] = e.Payload, e.CreatedAt
		if len(e.Headers) > 0 {
			h, err := jsonHeaders(e.Headers)
			if err != nil {
				return err
			}
			headers[j] = &h
		}
		statuses[j], attempts[j] = string(s.status), int32(s.attempts)
		next[j] = now
		if !s.next.IsZero() {
			next[j] = s.next
		}
		if s.err != "" {
			errs[j] = &s.err
		}
	}
	stmt := store.Stmt{SQL: r.q.Get("WALSpill"), Args: []any{ids, targets, topics, keys, types, payloads, headers, created,
		statuses, attempts, next, errs, keyLocks(evs)}}
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.dbTimeout)
	defer cancel()
	err := r.db.InTx(tctx, func(ctx context.Context, tx store.Tx) error {
		if err := tx.ExecBatch(ctx, stmt); err != nil {
			return err
		}
		notify(tx)
		return nil
	})
	if err != nil {
		// Not done: the batch is published again (the sent events with the
		// same ids) once the stream restarts.
		return fmt.Errorf("outbox: hand %d wal events to the table: %w", n, err)
	}
	for _, s := range sp {
		b.done[s.i] = true
		r.met.spilled.WithLabelValues(b.evs[s.i].Target).Inc()
		if s.status == StatusDead {
			r.table.met.dead.WithLabelValues(b.evs[s.i].Target).Inc()
		}
	}
	return nil
}

func sortSpills(sp []spill) { slices.SortFunc(sp, func(a, b spill) int { return a.i - b.i }) }

func jsonHeaders(h map[string]string) (string, error) {
	b, err := json.Marshal(h)
	if err != nil {
		return "", fmt.Errorf("outbox: headers: %w", err)
	}
	return string(b), nil
}

// groupBy groups the event indexes idx by key, keeping their order within a
// group, and lists the keys in the order they first appear.
func groupBy(idx []int, key func(i int) string) (order []string, groups map[string][]int) {
	groups = map[string][]int{}
	for _, i := range idx {
		k := key(i)
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], i)
	}
	return order, groups
}
