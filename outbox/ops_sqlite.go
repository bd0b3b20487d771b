package outbox

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/msgx/msgx/store"
)

// sqliteOps is the relay's database access on SQLite: rows are named by id,
// id lists travel as JSON arrays (json_each), and what PostgreSQL does in one
// statement takes a short transaction of several.
type sqliteOps struct {
	stmts
	db *store.DB
}

func (o *sqliteOps) close() {}

// jsonIDs encodes ids as a JSON array.
func jsonIDs(ids []int64) string {
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

// jsonRefs encodes rows by id as a JSON array.
func jsonRefs(rs []rowRef) string {
	out := make([]int64, len(rs))
	for i, r := range rs {
		out[i] = r.id
	}
	return jsonIDs(out)
}

func (o *sqliteOps) inTx(ctx context.Context, fn func(ctx context.Context, tx store.Tx) error) error {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	return o.db.InTx(ctx, fn)
}

func (o *sqliteOps) claimUnordered(ctx context.Context, target string, after int64, now, lease time.Time, limit int) ([]*claimed, error) {
	return o.claim(ctx, o.db, false, "ClaimUnordered", target, after, now, lease, limit)
}

func (o *sqliteOps) claimKeyless(ctx context.Context, target string, now, lease time.Time, limit int) ([]*claimed, error) {
	return o.claim(ctx, o.db, false, "ClaimKeyless", target, now, lease, limit)
}

// claimHeads walks the keys, then leases the ready heads, in one transaction.
func (o *sqliteOps) claimHeads(ctx context.Context, target, after string, now, lease time.Time, limit int) (evs []*claimed, walked int, last string, err error) {
	err = o.inTx(ctx, func(ctx context.Context, tx store.Tx) error {
		keys, err := o.heads(ctx, tx, "WalkHeads", limit, func(r store.Rows, h *head) error {
			return r.Scan(&h.key, &h.id.id, &h.ready)
		}, target, after, now, limit)
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
			evs, err = o.claim(ctx, tx, false, "ClaimHeadIDs", target, jsonIDs(ready), now, lease)
		}
		return err
	})
	return evs, walked, last, err
}

func (o *sqliteOps) walkCompacted(ctx context.Context, target, after string, now time.Time, limit int) ([]head, error) {
	return o.heads(ctx, o.db, "WalkCompacted", limit, func(r store.Rows, h *head) error {
		return r.Scan(&h.key, &h.id.id, &h.rep.id, &h.ready)
	}, target, after, now, limit)
}

// claimCompacted leases the free heads, then the newest events of their
// keys, in one transaction.
func (o *sqliteOps) claimCompacted(ctx context.Context, target string, keys []head, now, lease time.Time) ([]*claimed, error) {
	heads, _, headOf := pairHeads(keys)
	var all []*claimed
	err := o.inTx(ctx, func(ctx context.Context, tx store.Tx) error {
		hr, err := tx.Query(ctx, o.q.Get("LeaseHeads"), target, jsonRefs(heads), now, lease)
		if err != nil {
			return fmt.Errorf("outbox: LeaseHeads: %w", err)
		}
		leased := map[int64]bool{}
		for hr.Next() {
			var id int64
			if err := hr.Scan(&id); err != nil {
				hr.Close()
				return fmt.Errorf("outbox: LeaseHeads: %w", err)
			}
			leased[id] = true
		}
		hr.Close()
		if err := hr.Err(); err != nil {
			return fmt.Errorf("outbox: LeaseHeads: %w", err)
		}
		var want []int64
		for _, k := range keys {
			if !leased[k.id.id] {
				continue
			}
			want = append(want, k.rep.id)
			if k.id.id != k.rep.id {
				all = append(all, &claimed{rowRef: k.id}) // the head, for its lease
			}
		}
		if len(want) == 0 {
			return nil
		}
		rs, err := o.claim(ctx, tx, false, "LeaseReps", target, jsonIDs(want), lease)
		all = append(all, rs...)
		return err
	})
	if err != nil {
		return nil, err
	}
	return newestWithHeads(all, headOf), nil
}

func (o *sqliteOps) finish(ctx context.Context, name, target string, rows []rowRef, lease time.Time, args ...any) (int64, error) {
	return o.exec(ctx, o.db, name, append([]any{target, jsonRefs(rows), lease}, args...)...)
}

func (o *sqliteOps) markSent(ctx context.Context, target string, rows []rowRef, lease, now time.Time) (int64, error) {
	var n int64
	err := o.inTx(ctx, func(ctx context.Context, tx store.Tx) error {
		var err error
		if n, err = o.exec(ctx, tx, "SentInsert", target, jsonRefs(rows), lease, now); err != nil {
			return err
		}
		_, err = o.exec(ctx, tx, "SentDelete", target, jsonRefs(rows), lease)
		return err
	})
	return n, err
}

func (o *sqliteOps) coverSent(ctx context.Context, target string, reps []rowRef, lease, now time.Time, dead bool, reason string) (int64, error) {
	var covered int64
	err := o.inTx(ctx, func(ctx context.Context, tx store.Tx) error {
		var err error
		rs := jsonRefs(reps)
		if covered, err = o.exec(ctx, tx, "CoverInsert", target, rs, lease, now); err != nil {
			return err
		}
		if _, err := o.exec(ctx, tx, "CoverDelete", target, rs, lease); err != nil {
			return err
		}
		if dead {
			_, err = o.exec(ctx, tx, "MarkDead", target, rs, lease, now, reason)
			return err
		}
		if _, err := o.exec(ctx, tx, "KeyState", target, rs, lease); err != nil {
			return err
		}
		if _, err := o.exec(ctx, tx, "SentInsert", target, rs, lease, now); err != nil {
			return err
		}
		_, err = o.exec(ctx, tx, "SentDelete", target, rs, lease)
		return err
	})
	return covered, err
}

func (o *sqliteOps) extendLease(ctx context.Context, target string, rows []rowRef, lease, newLease time.Time) (map[int64]rowRef, error) {
	return o.stmts.extendLease(ctx, o.db, false, len(rows), target, jsonRefs(rows), lease, newLease)
}

func (o *sqliteOps) oldestPending(ctx context.Context, target string) (time.Time, bool, error) {
	return o.stmts.oldestPending(ctx, o.db, target, store.ErrNoRows)
}

func (o *sqliteOps) deleteDone(ctx context.Context, cutoff time.Time, limit int) (int64, error) {
	return o.exec(ctx, o.db, "DeleteDone", cutoff, limit)
}
