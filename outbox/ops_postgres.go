package outbox

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/msgx/msgx/store"
)

// pgOps is the relay's database access on PostgreSQL. The relay runs on a
// small pool of its own, opened by the store (store.DB.SessionPool: the same
// server and connection settings, other session settings), rather than on
// the store's pool, because its sessions differ from the business
// transactions' in two ways that must not reach them:
//   - its bookkeeping commits asynchronously (synchronous_commit off, unless
//     WithSynchronousCommit): losing the last relay commits in a database
//     crash only makes events be sent again, which at-least-once allows,
//     while a business commit must be durable;
//   - its statements are planned with sequential scans and JIT off (see
//     below), settings that would mislead the planner on the callers' own
//     queries.
//
// Claimed rows are named by ctid (paired with their ids); each lane step is
// one statement, id lists travel as arrays.
type pgOps struct {
	stmts
	pool *pgxpool.Pool
	run  pgPool
}

func newPgOps(db *store.DB, s stmts, conns int32, syncCommit bool) (*pgOps, error) {
	settings := map[string]string{
		// Every relay statement reaches its rows through an index or by
		// ctid. A plan made while the table was nearly empty (a relay
		// started on an idle outbox) would otherwise find a sequential scan
		// cheaper for the ctid lookups, and the cached plan would keep
		// reading the whole table on every claim once a backlog builds up:
		// 40 ms instead of 1.5 ms for a claim of 100 heads among 30 000
		// pending events.
		"enable_seqscan": "off",
		// A plan that still has to scan sequentially (the id sequence has
		// no other path) is costed at the disabled path's penalty, far
		// above jit_above_cost: without this, reading one row of the
		// sequence would be compiled first, 100 ms and more each time. The
		// relay's statements are short and never gain from JIT.
		"jit":              "off",
		"application_name": "msgx-outbox-relay",
	}
	if !syncCommit {
		settings["synchronous_commit"] = "off"
	}
	p, err := db.SessionPool(context.Background(), conns, settings)
	if err != nil {
		return nil, fmt.Errorf("outbox: relay pool: %w", err)
	}
	return &pgOps{stmts: s, pool: p, run: pgPool{p}}, nil
}

// pgPool adapts a pgx pool to querier (pgx.Rows and pgx.Row already have the
// shape of store.Rows and store.Row).
type pgPool struct{ p *pgxpool.Pool }

func (p pgPool) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	tag, err := p.p.Exec(ctx, sql, args...)
	return tag.RowsAffected(), err
}

func (p pgPool) Query(ctx context.Context, sql string, args ...any) (store.Rows, error) {
	return p.p.Query(ctx, sql, args...)
}

func (p pgPool) QueryRow(ctx context.Context, sql string, args ...any) store.Row {
	return p.p.QueryRow(ctx, sql, args...)
}

func (o *pgOps) close() { o.pool.Close() }

func tids(rs []rowRef) []pgtype.TID {
	out := make([]pgtype.TID, len(rs))
	for i, r := range rs {
		out[i] = r.tid
	}
	return out
}

// finishArgs lays out the parameters of a finishing statement: target, the
// rows' ctids, lease, then args, and last the rows' ids (paired with their
// ctids).
func (o *pgOps) finishArgs(target string, rows []rowRef, lease time.Time, args ...any) []any {
	ids := make([]int64, len(rows))
	for i, r := range rows {
		ids[i] = r.id
	}
	out := append([]any{target, tids(rows), lease}, args...)
	return append(out, ids)
}

func (o *pgOps) claimUnordered(ctx context.Context, target string, after int64, now, lease time.Time, limit int) ([]*claimed, error) {
	return o.claim(ctx, o.run, true, "ClaimUnordered", target, after, now, lease, limit)
}

func (o *pgOps) claimKeyless(ctx context.Context, target string, now, lease time.Time, limit int) ([]*claimed, error) {
	return o.claim(ctx, o.run, true, "ClaimKeyless", target, now, lease, limit)
}

// claimHeads walks and claims in one statement; its last row (id 0) sums up
// the walk: keys visited and the last one.
func (o *pgOps) claimHeads(ctx context.Context, target, after string, now, lease time.Time, limit int) (evs []*claimed, walked int, last string, err error) {
	rows, err := o.claim(ctx, o.run, true, "ClaimHeads", target, after, now, lease, limit)
	if err != nil {
		return nil, 0, "", err
	}
	for _, c := range rows {
		if c.id == 0 {
			walked, last = c.attempts, c.key
			continue
		}
		evs = append(evs, c)
	}
	return evs, walked, last, nil
}

func (o *pgOps) walkCompacted(ctx context.Context, target, after string, now time.Time, limit int) ([]head, error) {
	return o.heads(ctx, o.run, "WalkCompacted", limit, func(r store.Rows, h *head) error {
		return r.Scan(&h.key, &h.id.id, &h.id.tid, &h.rep.id, &h.rep.tid, &h.ready)
	}, target, after, now, limit)
}

func (o *pgOps) claimCompacted(ctx context.Context, target string, keys []head, now, lease time.Time) ([]*claimed, error) {
	heads, reps, headOf := pairHeads(keys)
	hids, rids := make([]int64, len(keys)), make([]int64, len(keys))
	for i, k := range keys {
		hids[i], rids[i] = k.id.id, k.rep.id
	}
	all, err := o.claim(ctx, o.run, true, "ClaimCompacted", target, tids(heads), tids(reps), now, lease, hids, rids)
	if err != nil {
		return nil, err
	}
	return newestWithHeads(all, headOf), nil
}

func (o *pgOps) finish(ctx context.Context, name, target string, rows []rowRef, lease time.Time, args ...any) (int64, error) {
	return o.exec(ctx, o.run, name, o.finishArgs(target, rows, lease, args...)...)
}

func (o *pgOps) markSent(ctx context.Context, target string, rows []rowRef, lease, now time.Time) (int64, error) {
	return o.finish(ctx, "MarkSent", target, rows, lease, now)
}

// readAhead is how many successors of a key one descent of the key index
// reads (SentAdvance).
const readAhead = 32

// advance asks SentAdvance to claim the successor of the sent event id; succ
// is that successor when known (zero: look it up).
type advance struct {
	id   int64
	succ rowRef
}

// markSentAdvance is markSent that also claims, under newLease, the next
// pending event of the keys of the sent events in adv. It returns the claimed
// events and, per key looked up, the successors read ahead.
func (o *pgOps) markSentAdvance(ctx context.Context, target string, rows []rowRef, lease, now, newLease time.Time, adv []advance) ([]*claimed, map[string][]rowRef, error) {
	ids, stids, sids := make([]int64, len(adv)), make([]pgtype.TID, len(adv)), make([]int64, len(adv))
	for i, a := range adv {
		ids[i], stids[i], sids[i] = a.id, a.succ.tid, a.succ.id
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	r, err := o.run.Query(ctx, o.q.Get("SentAdvance"), o.finishArgs(target, rows, lease, now, newLease, ids, stids, sids, readAhead+1)...)
	if err != nil {
		return nil, nil, fmt.Errorf("outbox: SentAdvance: %w", err)
	}
	defer r.Close()
	var out []*claimed
	succ := map[string][]rowRef{}
	for r.Next() {
		c := &claimed{}
		var kind int
		var typ string
		if err := r.Scan(&kind, &c.tid, &c.id, &c.eventID, &c.topic, &c.key, &typ, &c.payload, &c.headers, &c.attempts, &c.createdAt, &c.expiries); err != nil {
			return nil, nil, fmt.Errorf("outbox: SentAdvance: %w", err)
		}
		if kind == 1 {
			succ[c.key] = append(succ[c.key], c.rowRef)
			continue
		}
		c.typ = EventType(typ)
		out = append(out, c)
	}
	if err := r.Err(); err != nil {
		return nil, nil, fmt.Errorf("outbox: SentAdvance: %w", err)
	}
	for _, rs := range succ {
		slices.SortFunc(rs, func(a, b rowRef) int { return cmpInt64(a.id, b.id) })
	}
	return out, succ, nil
}

// coverSent runs CoverSent or CoverDead, which return a status per row.
func (o *pgOps) coverSent(ctx context.Context, target string, reps []rowRef, lease, now time.Time, dead bool, reason string) (int64, error) {
	name, args := "CoverSent", []any{now}
	if dead {
		name, args = "CoverDead", []any{now, reason}
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	rows, err := o.run.Query(ctx, o.q.Get(name), o.finishArgs(target, reps, lease, args...)...)
	if err != nil {
		return 0, fmt.Errorf("outbox: %s: %w", name, err)
	}
	defer rows.Close()
	var covered int64
	for rows.Next() {
		var status string
		if err := rows.Scan(&status); err != nil {
			return 0, fmt.Errorf("outbox: %s: %w", name, err)
		}
		if status == "COVERED" {
			covered++
		}
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("outbox: %s: %w", name, err)
	}
	return covered, nil
}

// extendLease returns the moved rows with their new ctids (an update gives a
// row a new one).
func (o *pgOps) extendLease(ctx context.Context, target string, rows []rowRef, lease, newLease time.Time) (map[int64]rowRef, error) {
	return o.stmts.extendLease(ctx, o.run, true, len(rows), o.finishArgs(target, rows, lease, newLease)...)
}

func (o *pgOps) oldestPending(ctx context.Context, target string) (time.Time, bool, error) {
	return o.stmts.oldestPending(ctx, o.run, target, pgx.ErrNoRows)
}

func (o *pgOps) deleteDone(ctx context.Context, cutoff time.Time, limit int) (int64, error) {
	return o.exec(ctx, o.run, "DeleteDone", cutoff, limit)
}

// dbNow reads the database server's clock.
func (o *pgOps) dbNow(ctx context.Context) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	var t time.Time
	if err := o.run.QueryRow(ctx, o.q.Get("DBNow")).Scan(&t); err != nil {
		return time.Time{}, fmt.Errorf("outbox: DBNow: %w", err)
	}
	return t, nil
}

// watermarkSample reads the last event id handed out and then, in a later
// statement, the transaction ids running in the database (see watermark).
func (o *pgOps) watermarkSample(ctx context.Context) (last int64, running []int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	if err := o.run.QueryRow(ctx, o.q.Get("WatermarkLast")).Scan(&last); err != nil {
		return 0, nil, fmt.Errorf("outbox: WatermarkLast: %w", err)
	}
	if err := o.run.QueryRow(ctx, o.q.Get("WatermarkRunning")).Scan(&running); err != nil {
		return 0, nil, fmt.Errorf("outbox: WatermarkRunning: %w", err)
	}
	return last, running, nil
}
