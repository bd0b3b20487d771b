package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/msgx/msgx/store"
)

// relayDB is the relay's database access: one implementation per dialect
// (pgOps, sqliteOps), each running its dialect's statements of
// sql/<dialect>/relay.sql under the database timeout. What only PostgreSQL
// offers (claim-after-send, the watermark, notifications, the server clock)
// is on pgOps alone; the relay holds it apart (Relay.pg).
type relayDB interface {
	// claimUnordered leases up to limit due events of target with ids above
	// after, in id order.
	claimUnordered(ctx context.Context, target string, after int64, now, lease time.Time, limit int) ([]*claimed, error)
	// claimKeyless leases due events of target that have no key.
	claimKeyless(ctx context.Context, target string, now, lease time.Time, limit int) ([]*claimed, error)
	// claimHeads walks up to limit keys after the cursor and leases the
	// heads that are due and unleased; it returns them with the number of
	// keys visited and the last one.
	claimHeads(ctx context.Context, target, after string, now, lease time.Time, limit int) (evs []*claimed, walked int, last string, err error)
	// walkCompacted returns up to limit keys after the cursor with their
	// heads and newest events.
	walkCompacted(ctx context.Context, target, after string, now time.Time, limit int) ([]head, error)
	// claimCompacted leases the heads that are still free together with
	// their keys' newest events, and returns the newest events (head set).
	claimCompacted(ctx context.Context, target string, keys []head, now, lease time.Time) ([]*claimed, error)
	// finish runs the finishing statement name (MarkDead, MarkRetry,
	// Release, ClearLease) on rows still held under lease.
	finish(ctx context.Context, name, target string, rows []rowRef, lease time.Time, args ...any) (int64, error)
	// markSent moves sent events to msgx_outbox_sent; it returns how many it
	// moved (fewer when a lease was lost).
	markSent(ctx context.Context, target string, rows []rowRef, lease, now time.Time) (int64, error)
	// coverSent finishes the newest events of compacted keys: SENT, or DEAD
	// when dead is set (with reason), and records the older pending events
	// of their keys as COVERED by them. It returns how many were covered.
	coverSent(ctx context.Context, target string, reps []rowRef, lease, now time.Time, dead bool, reason string) (int64, error)
	// extendLease moves the lease of claimed rows (fenced by the current
	// one) to newLease and returns the rows it moved, by id, with their new
	// row references.
	extendLease(ctx context.Context, target string, rows []rowRef, lease, newLease time.Time) (map[int64]rowRef, error)
	// oldestPending returns the creation time of target's oldest pending
	// event, and false when there is none.
	oldestPending(ctx context.Context, target string) (time.Time, bool, error)
	// deleteDone deletes up to limit finished rows older than cutoff.
	deleteDone(ctx context.Context, cutoff time.Time, limit int) (int64, error)
	close()
}

// newRelayDB returns db's dialect's relayDB.
func newRelayDB(db *store.DB, timeout time.Duration, conns int32, syncCommit bool) (relayDB, *pgOps, error) {
	q, err := queriesFor(db.Dialect())
	if err != nil {
		return nil, nil, err
	}
	s := stmts{q: q, timeout: timeout}
	if db.Dialect() == store.Postgres {
		p, err := newPgOps(db, s, conns, syncCommit)
		if err != nil {
			return nil, nil, err
		}
		return p, p, nil
	}
	return &sqliteOps{db: db, stmts: s}, nil, nil
}

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

// lease times are compared for equality in the database, which keeps
// microseconds: round them there once so both sides agree.
func leaseUntil(now time.Time, d time.Duration) time.Time {
	return now.Add(d).Truncate(time.Microsecond)
}

// querier is what statements run on: a pool, the store or a transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (int64, error)
	Query(ctx context.Context, sql string, args ...any) (store.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) store.Row
}

// stmts runs named statements of one dialect under the database timeout;
// both dialects' implementations build on it.
type stmts struct {
	q       store.Queries
	timeout time.Duration
}

func (s stmts) exec(ctx context.Context, q querier, name string, args ...any) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	n, err := q.Exec(ctx, s.q.Get(name), args...)
	if err != nil {
		return 0, fmt.Errorf("outbox: %s: %w", name, err)
	}
	return n, nil
}

// claim runs a claiming statement and scans its events; withTID says the
// rows start with their ctid (PostgreSQL).
func (s stmts) claim(ctx context.Context, q querier, withTID bool, name string, args ...any) ([]*claimed, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	rows, err := q.Query(ctx, s.q.Get(name), args...)
	if err != nil {
		return nil, fmt.Errorf("outbox: %s: %w", name, err)
	}
	defer rows.Close()
	var out []*claimed
	for rows.Next() {
		c := &claimed{}
		var typ string
		dest := []any{&c.id, &c.eventID, &c.topic, &c.key, &typ, &c.payload, &c.headers, &c.attempts, &c.createdAt, &c.expiries}
		if withTID {
			dest = append([]any{&c.tid}, dest...)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("outbox: %s: %w", name, err)
		}
		c.typ = EventType(typ)
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("outbox: %s: %w", name, err)
	}
	return out, nil
}

// heads runs a walk over keys and scans one head per row with scan.
func (s stmts) heads(ctx context.Context, q querier, name string, limit int, scan func(store.Rows, *head) error, args ...any) ([]head, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	rows, err := q.Query(ctx, s.q.Get(name), args...)
	if err != nil {
		return nil, fmt.Errorf("outbox: %s: %w", name, err)
	}
	defer rows.Close()
	out := make([]head, 0, limit)
	for rows.Next() {
		var h head
		if err := scan(rows, &h); err != nil {
			return nil, fmt.Errorf("outbox: %s: %w", name, err)
		}
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("outbox: %s: %w", name, err)
	}
	return out, nil
}

// extendLease is relayDB.extendLease on q with the dialect's arguments;
// withTID says the rows come back with their new ctids (PostgreSQL).
func (s stmts) extendLease(ctx context.Context, q querier, withTID bool, n int, args ...any) (map[int64]rowRef, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	r, err := q.Query(ctx, s.q.Get("ExtendLease"), args...)
	if err != nil {
		return nil, fmt.Errorf("outbox: ExtendLease: %w", err)
	}
	defer r.Close()
	out := make(map[int64]rowRef, n)
	for r.Next() {
		var ref rowRef
		dest := []any{&ref.id}
		if withTID {
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

// oldestPending is relayDB.oldestPending on q; noRows tells the driver's
// "no rows" error.
func (s stmts) oldestPending(ctx context.Context, q querier, target string, noRows error) (time.Time, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var t time.Time
	err := q.QueryRow(ctx, s.q.Get("OldestPending"), target).Scan(&t)
	if errors.Is(err, noRows) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("outbox: OldestPending: %w", err)
	}
	return t, true, nil
}

// pairHeads lays out keys' heads and newest rows for claimCompacted, with
// the map from each newest row's id to its head's id.
func pairHeads(keys []head) (heads, reps []rowRef, headOf map[int64]int64) {
	headOf = make(map[int64]int64, len(keys))
	heads, reps = make([]rowRef, len(keys)), make([]rowRef, len(keys))
	for i, k := range keys {
		headOf[k.rep.id] = k.id.id
		heads[i], reps[i] = k.id, k.rep
	}
	return heads, reps, headOf
}

// newestWithHeads returns, of the rows leased by a compacted claim (heads and
// newest events alike), the newest events whose head was leased too, with
// head set; a key whose head was not leased is held by someone else.
func newestWithHeads(all []*claimed, headOf map[int64]int64) []*claimed {
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
			continue
		}
		c.head = hc.rowRef
		out = append(out, c)
	}
	return out
}
