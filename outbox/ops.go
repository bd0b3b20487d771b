package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/msgx/msgx/store"
)

// rowRef names a claimed row: by ctid on PostgreSQL (the version the claim
// wrote; it stays valid while the relay holds the lease), by id on SQLite.
type rowRef struct {
	id  int64
	tid pgtype.TID
}

// claimed is one event a relay holds under its lease.
type claimed struct {
	rowRef
	eventID   string
	topic     string
	key       string
	typ       EventType
	payload   []byte
	headers   []byte
	attempts  int // claims of the row, this one included
	expiries  int // claims that found the previous claim's lease expired
	createdAt time.Time
	// head is, for the newest event of a compacted key, the key's smallest
	// pending row, whose lease marks the key as in flight (head.id is 0 for
	// other events).
	head rowRef
	// chain counts how many events of this key the relay has claimed one
	// after the other without walking (per-key lanes); succ are the key's
	// next pending rows, read ahead, in order.
	chain int
	succ  []rowRef
}

// own is how many times the event has been sent by a relay that lived to
// record the result, this attempt included: a lease that expired without a
// result is not the event's failure.
func (c *claimed) own() int { return c.attempts - c.expiries }

// head is one key met by a walk over the keys of a target.
type head struct {
	key   string
	id    rowRef // the key's smallest pending row
	rep   rowRef // compacted walks: the key's newest pending row
	ready bool   // claimable now (due and unleased)
}

// querier is what ops runs statements on: the relay's own pgx pool on
// PostgreSQL, the store on SQLite.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (int64, error)
	Query(ctx context.Context, sql string, args ...any) (store.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) store.Row
}

// pgPool adapts a pgx pool (pgx.Rows and pgx.Row already have the shape of
// store.Rows and store.Row).
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

// ops runs the relay's statements of one dialect, each under the database
// timeout. PostgreSQL takes id lists as arrays, SQLite as JSON arrays.
type ops struct {
	db      *store.DB
	run     querier
	pool    *pgxpool.Pool // PostgreSQL: the relay's own pool
	q       store.Queries
	pg      bool
	timeout time.Duration
}

// newOps prepares the statements of db's dialect. On PostgreSQL the relay
// gets its own small pool (with the store pool's connection settings) so that
// its bookkeeping can commit asynchronously without touching the business
// transactions of the store pool: losing the last relay commits in a database
// crash only makes events be sent again, which at-least-once allows.
func newOps(db *store.DB, timeout time.Duration, conns int32, syncCommit bool) (*ops, error) {
	q, err := queriesFor(db.Dialect())
	if err != nil {
		return nil, err
	}
	o := &ops{db: db, run: db, q: q, pg: db.Dialect() == store.Postgres, timeout: timeout}
	if o.pg {
		cfg := db.Pool().Config()
		cfg.MaxConns = conns
		cfg.MinConns = 0
		if cfg.ConnConfig.RuntimeParams == nil {
			cfg.ConnConfig.RuntimeParams = map[string]string{}
		}
		if !syncCommit {
			cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
		}
		cfg.ConnConfig.RuntimeParams["application_name"] = appName(cfg.ConnConfig.RuntimeParams["application_name"])
		p, err := pgxpool.NewWithConfig(context.Background(), cfg)
		if err != nil {
			return nil, fmt.Errorf("outbox: relay pool: %w", err)
		}
		o.pool, o.run = p, pgPool{p}
	}
	return o, nil
}

func appName(base string) string {
	if base == "" {
		return "msgx-outbox-relay"
	}
	return base
}

func (o *ops) close() {
	if o.pool != nil {
		o.pool.Close()
	}
}

// refs encodes rows for the finishing statements: ctids or ids.
func (o *ops) refs(rs []rowRef) any {
	if o.pg {
		tids := make([]pgtype.TID, len(rs))
		for i, r := range rs {
			tids[i] = r.tid
		}
		return tids
	}
	ids := make([]int64, len(rs))
	for i, r := range rs {
		ids[i] = r.id
	}
	return o.ids(ids)
}

// ids encodes ids as a JSON array for SQLite.
func (o *ops) ids(ids []int64) any {
	var b strings.Builder
	b.Grow(len(ids) * 8)
	b.WriteByte('[')
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(id, 10))
	}
	b.WriteByte(']')
	return b.String()
}

// jsonStrings encodes a string list for SQLite's json_each.
func jsonStrings(s []string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// lease times are compared for equality in the database, which keeps
// microseconds: round them there once so both sides agree.
func leaseUntil(now time.Time, d time.Duration) time.Time {
	return now.Add(d).Truncate(time.Microsecond)
}

func (o *ops) exec(ctx context.Context, name string, args ...any) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	n, err := o.run.Exec(ctx, o.q.Get(name), args...)
	if err != nil {
		return 0, fmt.Errorf("outbox: %s: %w", name, err)
	}
	return n, nil
}

func (o *ops) scanClaimed(rows store.Rows, out []*claimed) ([]*claimed, error) {
	defer rows.Close()
	for rows.Next() {
		c := &claimed{}
		var typ string
		dest := []any{&c.id, &c.eventID, &c.topic, &c.key, &typ, &c.payload, &c.headers, &c.attempts, &c.createdAt, &c.expiries}
		if o.pg {
			dest = append([]any{&c.tid}, dest...)
		}
		if err := rows.Scan(dest...); err != nil {
			return out, err
		}
		c.typ = EventType(typ)
		out = append(out, c)
	}
	return out, rows.Err()
}

func (o *ops) claim(ctx context.Context, q querier, name string, args ...any) ([]*claimed, error) {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	rows, err := q.Query(ctx, o.q.Get(name), args...)
	if err != nil {
		return nil, fmt.Errorf("outbox: %s: %w", name, err)
	}
	out, err := o.scanClaimed(rows, nil)
	if err != nil {
		return nil, fmt.Errorf("outbox: %s: %w", name, err)
	}
	return out, nil
}

func (o *ops) claimUnordered(ctx context.Context, target string, after int64, now, lease time.Time, limit int) ([]*claimed, error) {
	return o.claim(ctx, o.run, "ClaimUnordered", target, after, now, lease, limit)
}

func (o *ops) claimKeyless(ctx context.Context, target string, now, lease time.Time, limit int) ([]*claimed, error) {
	return o.claim(ctx, o.run, "ClaimKeyless", target, now, lease, limit)
}

// claimHeads walks up to limit keys after the cursor and claims the heads
// that are due and unleased; it returns them with the number of keys visited
// and the last one.
func (o *ops) claimHeads(ctx context.Context, target, after string, now, lease time.Time, limit int) (evs []*claimed, walked int, last string, err error) {
	if o.pg {
		rows, err := o.claim(ctx, o.run, "ClaimHeads", target, after, now, lease, limit)
		if err != nil {
			return nil, 0, "", err
		}
		for _, c := range rows {
			if c.id == 0 { // the walk's summary row
				walked, last = c.attempts, c.key
				continue
			}
			evs = append(evs, c)
		}
		return evs, walked, last, nil
	}
	err = o.inTx(ctx, func(ctx context.Context, tx store.Tx) error {
		keys, err := o.walkHeads(ctx, tx, target, after, now, limit)
		if err != nil {
			return err
		}
		walked = len(keys)
		if walked > 0 {
			last = keys[walked-1].key
		}
		ready := make([]int64, 0, len(keys))
		for _, k := range keys {
			if k.ready {
				ready = append(ready, k.id.id)
			}
		}
		if len(ready) > 0 {
			evs, err = o.claim(ctx, tx, "ClaimHeadIDs", target, o.ids(ready), now, lease)
		}
		return err
	})
	return evs, walked, last, err
}

// walkHeads returns up to limit keys after the cursor with their heads
// (SQLite; PostgreSQL walks inside ClaimHeads).
func (o *ops) walkHeads(ctx context.Context, q querier, target, after string, now time.Time, limit int) ([]head, error) {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	rows, err := q.Query(ctx, o.q.Get("WalkHeads"), target, after, now, limit)
	if err != nil {
		return nil, fmt.Errorf("outbox: WalkHeads: %w", err)
	}
	defer rows.Close()
	out := make([]head, 0, limit)
	for rows.Next() {
		var h head
		if err := rows.Scan(&h.key, &h.id.id, &h.ready); err != nil {
			return nil, fmt.Errorf("outbox: WalkHeads: %w", err)
		}
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("outbox: WalkHeads: %w", err)
	}
	return out, nil
}

// walkCompacted is walkHeads that also finds each key's newest event.
func (o *ops) walkCompacted(ctx context.Context, target, after string, now time.Time, limit int) ([]head, error) {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	rows, err := o.run.Query(ctx, o.q.Get("WalkCompacted"), target, after, now, limit)
	if err != nil {
		return nil, fmt.Errorf("outbox: WalkCompacted: %w", err)
	}
	defer rows.Close()
	out := make([]head, 0, limit)
	for rows.Next() {
		var h head
		dest := []any{&h.key, &h.id.id, &h.rep.id, &h.ready}
		if o.pg {
			dest = []any{&h.key, &h.id.id, &h.id.tid, &h.rep.id, &h.rep.tid, &h.ready}
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("outbox: WalkCompacted: %w", err)
		}
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("outbox: WalkCompacted: %w", err)
	}
	return out, nil
}

// claimCompacted leases the heads that are still free together with their
// keys' newest events, and returns the newest events (with head set).
func (o *ops) claimCompacted(ctx context.Context, target string, keys []head, now, lease time.Time) ([]*claimed, error) {
	headOf := make(map[int64]int64, len(keys)) // rep id -> head id
	heads, reps := make([]rowRef, len(keys)), make([]rowRef, len(keys))
	for i, k := range keys {
		headOf[k.rep.id] = k.id.id
		heads[i], reps[i] = k.id, k.rep
	}
	var all []*claimed
	if o.pg {
		var err error
		hids, rids := make([]int64, len(keys)), make([]int64, len(keys))
		for i, k := range keys {
			hids[i], rids[i] = k.id.id, k.rep.id
		}
		if all, err = o.claim(ctx, o.run, "ClaimCompacted", target, o.refs(heads), o.refs(reps), now, lease, hids, rids); err != nil {
			return nil, err
		}
	} else {
		err := o.db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
			tctx, cancel := context.WithTimeout(ctx, o.timeout)
			defer cancel()
			hr, err := tx.Query(tctx, o.q.Get("LeaseHeads"), target, o.refs(heads), now, lease)
			if err != nil {
				return fmt.Errorf("outbox: LeaseHeads: %w", err)
			}
			leased := map[int64]bool{}
			for hr.Next() {
				var id int64
				if err := hr.Scan(&id); err != nil {
					hr.Close()
					return err
				}
				leased[id] = true
			}
			hr.Close()
			if err := hr.Err(); err != nil {
				return err
			}
			var want []int64
			for _, k := range keys {
				if leased[k.id.id] {
					want = append(want, k.rep.id)
				}
				if leased[k.id.id] && k.id.id != k.rep.id {
					all = append(all, &claimed{rowRef: k.id}) // the head, for its lease
				}
			}
			if len(want) == 0 {
				return nil
			}
			rs, err := o.claim(ctx, tx, "LeaseReps", target, o.ids(want), lease)
			all = append(all, rs...)
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	// The rows come back for heads and newest events alike.
	byID := make(map[int64]*claimed, len(all))
	for _, c := range all {
		byID[c.id] = c
	}
	var out []*claimed
	for rep, h := range headOf {
		c, ok := byID[rep]
		if !ok {
			continue
		}
		hc, ok := byID[h]
		if !ok {
			continue // not leased: someone else holds the key
		}
		c.head = hc.rowRef
		out = append(out, c)
	}
	return out, nil
}

func (o *ops) finish(ctx context.Context, name, target string, rows []rowRef, lease time.Time, args ...any) (int64, error) {
	return o.exec(ctx, name, o.finishArgs(target, rows, lease, args...)...)
}

// finishArgs lays out the parameters of a finishing statement: target, rows,
// lease, then args, and on PostgreSQL last the rows' ids (paired with their
// ctids).
func (o *ops) finishArgs(target string, rows []rowRef, lease time.Time, args ...any) []any {
	out := append([]any{target, o.refs(rows), lease}, args...)
	if o.pg {
		ids := make([]int64, len(rows))
		for i, r := range rows {
			ids[i] = r.id
		}
		out = append(out, ids)
	}
	return out
}

// markSent moves sent events to msgx_outbox_sent; it returns how many it
// moved (fewer when a lease was lost).
func (o *ops) markSent(ctx context.Context, target string, rows []rowRef, lease, now time.Time) (int64, error) {
	if o.pg {
		return o.finish(ctx, "MarkSent", target, rows, lease, now)
	}
	var n int64
	err := o.inTx(ctx, func(ctx context.Context, tx store.Tx) error {
		var err error
		if n, err = o.txExec(ctx, tx, "SentInsert", target, o.refs(rows), lease, now); err != nil {
			return err
		}
		_, err = o.txExec(ctx, tx, "SentDelete", target, o.refs(rows), lease)
		return err
	})
	return n, err
}

// canAdvance says whether markSentAdvance is available (PostgreSQL).
func (o *ops) canAdvance() bool { return o.pg }

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
func (o *ops) markSentAdvance(ctx context.Context, target string, rows []rowRef, lease, now, newLease time.Time, adv []advance) ([]*claimed, map[string][]rowRef, error) {
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

// coverSent finishes the newest events of compacted keys: SENT, or DEAD when
// dead is set (with reason), and records the older pending events of their
// keys as COVERED by them. It returns how many were covered.
func (o *ops) coverSent(ctx context.Context, target string, reps []rowRef, lease, now time.Time, dead bool, reason string) (int64, error) {
	if o.pg {
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
	var covered int64
	err := o.inTx(ctx, func(ctx context.Context, tx store.Tx) error {
		var err error
		ids := o.refs(reps)
		if covered, err = o.txExec(ctx, tx, "CoverInsert", target, ids, lease, now); err != nil {
			return err
		}
		if _, err := o.txExec(ctx, tx, "CoverDelete", target, ids, lease); err != nil {
			return err
		}
		if dead {
			_, err = o.txExec(ctx, tx, "MarkDead", target, ids, lease, now, reason)
			return err
		}
		if _, err := o.txExec(ctx, tx, "KeyState", target, ids, lease); err != nil {
			return err
		}
		if _, err := o.txExec(ctx, tx, "SentInsert", target, ids, lease, now); err != nil {
			return err
		}
		_, err = o.txExec(ctx, tx, "SentDelete", target, ids, lease)
		return err
	})
	return covered, err
}

func (o *ops) inTx(ctx context.Context, fn func(ctx context.Context, tx store.Tx) error) error {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	return o.db.InTx(ctx, fn)
}

func (o *ops) txExec(ctx context.Context, tx store.Tx, name string, args ...any) (int64, error) {
	n, err := tx.Exec(ctx, o.q.Get(name), args...)
	if err != nil {
		return 0, fmt.Errorf("outbox: %s: %w", name, err)
	}
	return n, nil
}

func (o *ops) oldestPending(ctx context.Context, target string) (time.Time, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	var t time.Time
	err := o.run.QueryRow(ctx, o.q.Get("OldestPending"), target).Scan(&t)
	if errors.Is(err, store.ErrNoRows) || errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("outbox: OldestPending: %w", err)
	}
	return t, true, nil
}

// dbNow reads the database server's clock (PostgreSQL).
func (o *ops) dbNow(ctx context.Context) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	var t time.Time
	if err := o.run.QueryRow(ctx, o.q.Get("DBNow")).Scan(&t); err != nil {
		return time.Time{}, fmt.Errorf("outbox: DBNow: %w", err)
	}
	return t, nil
}

// extendLease moves the lease of claimed rows (fenced by the current one) to
// newLease and returns the rows it moved with their new row references (the
// update gives a row a new ctid on PostgreSQL), by id.
func (o *ops) extendLease(ctx context.Context, target string, rows []rowRef, lease, newLease time.Time) (map[int64]rowRef, error) {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	r, err := o.run.Query(ctx, o.q.Get("ExtendLease"), o.finishArgs(target, rows, lease, newLease)...)
	if err != nil {
		return nil, fmt.Errorf("outbox: ExtendLease: %w", err)
	}
	defer r.Close()
	out := make(map[int64]rowRef, len(rows))
	for r.Next() {
		var ref rowRef
		dest := []any{&ref.id}
		if o.pg {
			dest = append(dest, &ref.tid)
		}
		if err := r.Scan(dest...); err != nil {
			return nil, fmt.Errorf("outbox: ExtendLease: %w", err)
		}
		out[ref.id] = ref
	}
	if err := r.Err(); err != nil {
		return nil, fmt.Errorf("outbox: ExtendLease: %w", err)
	}
	return out, nil
}
