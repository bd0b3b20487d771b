package outbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/msgx/msgx/backoff"
	"github.com/msgx/msgx/internal/dbclock"
	"github.com/msgx/msgx/store"
)

// Relay publishes the outbox's pending events of its configured targets,
// at-least-once. Any number of relays (processes) may run over one
// PostgreSQL database at once: claims lock rows with SKIP LOCKED and lease
// them until locked_until, so that a crashed relay's events return to the
// others when the lease ends. There is no leader and no in-memory lock.
// On SQLite a single process may run relays.
type Relay struct {
	cfg     config
	db      *store.DB
	ops     relayDB
	pg      *pgOps // PostgreSQL: what only it offers
	met     *metrics
	wm      *watermark     // PostgreSQL: where unordered claims may start
	dbc     *dbclock.Clock // PostgreSQL without WithClock: the database's clock
	lanes   []*lane
	running atomic.Bool
}

// NewRelay builds a relay over db (migrated) from options; Target options
// name what it relays.
func NewRelay(db *store.DB, opts ...Option) (*Relay, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	conns := int32(3) // maintenance, notifications and a spare
	for _, l := range cfg.lanes {
		conns += int32(l.workers)
	}
	o, pg, err := newRelayDB(db, cfg.dbTimeout, conns, cfg.syncCommit)
	if err != nil {
		return nil, err
	}
	r := &Relay{cfg: cfg, db: db, ops: o, pg: pg, met: newMetrics(cfg.registerer)}
	if pg != nil {
		r.wm = &watermark{}
		if !cfg.dbClockOff {
			r.dbc = dbclock.New(cfg.clock)
			r.cfg.clock = r.dbc
		}
	}
	for _, lc := range cfg.lanes {
		l := &lane{
			r:    r,
			cfg:  lc,
			wake: make(chan struct{}, 1),
			log:  cfg.logger.With("target", lc.target, "lane", lc.kind.String()),
			met:  r.met.forLane(lc.target),
		}
		l.gate.st.Target = lc.target
		l.gate.st.Kind = lc.kind
		l.met.up.Set(1)
		r.lanes = append(r.lanes, l)
	}
	return r, nil
}

// Close releases the relay's own database connections (PostgreSQL). Call it
// when Run has returned and no Flush is running.
func (r *Relay) Close() { r.ops.close() }

// Run relays until ctx ends: each lane runs its workers, and a maintenance
// loop measures the lag and deletes expired rows. Claims in flight when ctx
// ends are finished or given back before Run returns; it returns nil then.
func (r *Relay) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return errors.New("outbox: relay already running")
	}
	defer r.running.Store(false)
	if err := r.syncClock(ctx); err != nil && ctx.Err() == nil {
		r.cfg.logger.Warn("outbox: reading the database clock failed; the relay keeps its last offset", "err", err)
	}
	var wg sync.WaitGroup
	for _, l := range r.lanes {
		for range l.cfg.workers {
			wg.Go(func() { r.work(ctx, l) })
		}
	}
	wg.Go(func() { r.maintain(ctx) })
	if !r.cfg.noWake {
		wg.Go(func() { r.listen(ctx) })
	}
	wg.Wait()
	return nil
}

// errorPause is how long a worker waits after failing cycles in a row.
func (r *Relay) errorPause(failures int) time.Duration {
	p := backoff.Policy{Initial: r.cfg.pollInterval, Max: 10 * time.Second, Jitter: 0.2}
	return p.Delay(failures)
}

func (r *Relay) work(ctx context.Context, l *lane) {
	var wk worker
	defer func() {
		if err := wk.release(ctx, l); err != nil {
			l.log.Warn("outbox: giving back claims on stop failed; they return when their lease ends", "err", err)
		}
	}()
	failures := 0
	for ctx.Err() == nil {
		if l.gate.paused() {
			// Nothing of the target is sent while it is paused: carried
			// claims go back (uncharged) and the worker probes or waits.
			if err := wk.release(ctx, l); err != nil {
				l.log.Warn("outbox: giving back claims of a paused target failed; they return when their lease ends", "err", err)
			}
			l.await(ctx)
			continue
		}
		res, err := l.cycle(ctx, &l.walk, &wk, false)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			l.met.errors.Inc()
			pause := r.errorPause(failures)
			l.log.Error("outbox relay cycle failed", "err", err, "failures", failures, "retry_in", pause)
			r.sleep(ctx, pause)
			continue
		}
		failures = 0
		if res.more {
			continue
		}
		if l.cfg.kind == Compacted {
			// Gathering changes is the point of the flush period: no wake-up.
			r.sleep(ctx, l.cfg.flushPeriod)
			continue
		}
		r.sleepOrWake(ctx, r.cfg.pollInterval, l.wake)
	}
}

// sleepOrWake is sleep that also ends when wake receives (events committed).
func (r *Relay) sleepOrWake(ctx context.Context, d time.Duration, wake <-chan struct{}) {
	t := r.cfg.clock.NewTimer(d)
	select {
	case <-t.C():
	case <-wake:
		t.Stop()
	case <-ctx.Done():
		t.Stop()
	}
}

func (r *Relay) sleep(ctx context.Context, d time.Duration) {
	t := r.cfg.clock.NewTimer(d)
	select {
	case <-t.C():
	case <-ctx.Done():
		t.Stop()
	}
}

// Flush relays, lane after lane, everything that is due at the clock's
// current time, and returns when no lane has anything left to claim. Failed
// events wait for their backoff; compacted lanes flush without waiting for
// their period; a lane whose broker is unavailable stops at its first held
// send (its events stay due; the next Flush tries again). Tests and one-shot
// tools use it instead of Run.
func (r *Relay) Flush(ctx context.Context) (Stats, error) {
	var total Stats
	if err := r.syncClock(ctx); err != nil {
		return total, err
	}
	for _, l := range r.lanes {
		var (
			w  walkState
			wk worker
		)
		for {
			res, err := l.cycle(ctx, &w, &wk, true)
			total.add(res.st)
			if err != nil {
				return total, errors.Join(err, wk.release(ctx, l))
			}
			if res.st.Held > 0 {
				if err := wk.release(ctx, l); err != nil {
					return total, err
				}
				break
			}
			if res.idle {
				break
			}
		}
	}
	return total, nil
}

func (r *Relay) maintain(ctx context.Context) {
	cl := r.cfg.clock
	nextLag, nextClean := cl.Now(), cl.Now().Add(r.cfg.cleanupInterval)
	for ctx.Err() == nil {
		if err := r.syncClock(ctx); err != nil && ctx.Err() == nil {
			r.cfg.logger.Warn("outbox: reading the database clock failed; the relay keeps its last offset", "err", err)
		}
		now := cl.Now()
		if !now.Before(nextLag) {
			if _, err := r.Lag(ctx); err != nil && ctx.Err() == nil {
				r.cfg.logger.Warn("outbox lag measurement failed", "err", err)
			}
			nextLag = now.Add(r.cfg.lagInterval)
		}
		if r.cfg.cleanupInterval > 0 && !now.Before(nextClean) {
			if _, err := r.Cleanup(ctx); err != nil && ctx.Err() == nil {
				r.cfg.logger.Warn("outbox cleanup failed", "err", err)
			}
			nextClean = now.Add(r.cfg.cleanupInterval)
		}
		next := nextLag
		if r.cfg.cleanupInterval > 0 && nextClean.Before(next) {
			next = nextClean
		}
		if r.dbc != nil && now.Add(dbclock.Resync).Before(next) {
			next = now.Add(dbclock.Resync)
		}
		r.sleep(ctx, next.Sub(now))
	}
}

// syncClock measures the offset of the database's clock when it is due
// (PostgreSQL, unless WithClock chose the clock).
func (r *Relay) syncClock(ctx context.Context) error {
	if r.dbc == nil || !r.dbc.Due() {
		return nil
	}
	if err := r.dbc.Sync(ctx, r.pg.dbNow); err != nil {
		return fmt.Errorf("outbox: %w", err)
	}
	return nil
}

// Lag measures the age of the oldest pending event of each target (0 when
// none), updates the lag gauges and returns the ages.
func (r *Relay) Lag(ctx context.Context) (map[string]time.Duration, error) {
	out := make(map[string]time.Duration, len(r.lanes))
	now := r.cfg.clock.Now()
	for _, l := range r.lanes {
		t, ok, err := r.ops.oldestPending(ctx, l.cfg.target)
		if err != nil {
			return out, err
		}
		var age time.Duration
		if ok && now.After(t) {
			age = now.Sub(t)
		}
		out[l.cfg.target] = age
		l.met.lag.Set(age.Seconds())
	}
	return out, nil
}

// Targets returns what this relay knows of each target's broker (paused or
// not, the last error), in configuration order.
func (r *Relay) Targets() []TargetState {
	out := make([]TargetState, len(r.lanes))
	for i, l := range r.lanes {
		out[i] = l.gate.state()
	}
	return out
}

// cleanupChunk bounds one delete statement so that cleanup never holds many
// row locks or one long transaction.
const cleanupChunk = 5000

// Cleanup deletes SENT and COVERED rows (of every target) finished longer
// than the retention ago, in chunks, and returns how many it deleted. Several
// relays may run it at once: each skips the rows another is deleting.
func (r *Relay) Cleanup(ctx context.Context) (int64, error) {
	cutoff := r.cfg.clock.Now().Add(-r.cfg.retention)
	var total int64
	for ctx.Err() == nil {
		n, err := r.ops.deleteDone(ctx, cutoff, cleanupChunk)
		total += n
		r.met.cleaned.Add(float64(n))
		if err != nil {
			return total, fmt.Errorf("outbox: cleanup: %w", err)
		}
		if n < cleanupChunk {
			break
		}
	}
	return total, ctx.Err()
}
