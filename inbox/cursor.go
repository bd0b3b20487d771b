package inbox

// The ordering ledger of a stream whose source keeps a watermark (a mailbox
// poller, or any source that promises that no message overtakes an older
// one): the cursor, the ids declared permanently missing, and what became of
// an id that showed up after all. The inbox keeps it, not the source,
// because the inbox enforces it: the pump never processes beyond the
// watermark, every writer that enqueues for itself is held to the permanent
// gaps (EnqueueWritten), and the admin API shows it. The source decides when
// an id is missing for good and what a late one becomes; the ledger only
// records it, in the caller's transaction.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/msgx/msgx/store"
)

// Cursor is a source's watermark for a stream: every source id up to and
// including Watermark is enqueued (or declared a permanent gap); the pump
// never processes a message beyond it. GapFrom, when non-zero, is the first
// missing id the source is waiting for, seen first at GapSeenAt.
type Cursor struct {
	Watermark int64
	GapFrom   int64
	GapSeenAt time.Time
}

// ErrCursorMoved means another writer advanced the cursor first; rescan.
var ErrCursorMoved = errors.New("inbox: cursor moved concurrently")

// InitCursor creates the stream's cursor at startAfter unless it exists.
// Creating it makes the pump wait for the watermark.
func InitCursor(ctx context.Context, q store.Querier, stream string, startAfter int64, now time.Time) error {
	qs, err := queriesFor(q.Dialect())
	if err != nil {
		return err
	}
	if _, err := q.Exec(ctx, qs.Get("CursorInit"), stream, startAfter, now); err != nil {
		return fmt.Errorf("inbox: init cursor %s: %w", stream, err)
	}
	return nil
}

// LoadCursor reads the stream's cursor; ok is false when there is none.
func LoadCursor(ctx context.Context, q store.Querier, stream string) (c Cursor, ok bool, err error) {
	qs, err := queriesFor(q.Dialect())
	if err != nil {
		return c, false, err
	}
	var gap *int64
	var seen *time.Time
	err = q.QueryRow(ctx, qs.Get("CursorGet"), stream).Scan(&c.Watermark, &gap, &seen)
	if errors.Is(err, store.ErrNoRows) {
		return c, false, nil
	}
	if err != nil {
		return c, false, fmt.Errorf("inbox: load cursor %s: %w", stream, err)
	}
	if gap != nil {
		c.GapFrom = *gap
	}
	if seen != nil {
		c.GapSeenAt = *seen
	}
	return c, true, nil
}

// SetCursor moves the cursor from prev to next in tx (compare-and-set on the
// watermark); ErrCursorMoved when prev is stale.
func SetCursor(ctx context.Context, tx store.Tx, stream string, prev, next Cursor, now time.Time) error {
	qs, err := queriesFor(tx.Dialect())
	if err != nil {
		return err
	}
	var gap any
	var seen *time.Time
	if next.GapFrom != 0 {
		gap = next.GapFrom
		t := next.GapSeenAt
		seen = &t
	}
	n, err := tx.Exec(ctx, qs.Get("CursorSet"), stream, prev.Watermark, next.Watermark, gap, seen, now)
	if err != nil {
		return fmt.Errorf("inbox: set cursor %s: %w", stream, err)
	}
	if n == 0 {
		return ErrCursorMoved
	}
	return nil
}

// RecordGap records source ids from..to as a permanent gap: they were never
// seen within the commit delay and are skipped.
func RecordGap(ctx context.Context, tx store.Tx, stream string, from, to int64, firstSeen, declared time.Time) error {
	qs, err := queriesFor(tx.Dialect())
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, qs.Get("GapRecord"), stream, from, to, firstSeen, declared); err != nil {
		return fmt.Errorf("inbox: record gap %s %d-%d: %w", stream, from, to, err)
	}
	return nil
}

// Gap is a range of source ids declared permanently missing.
type Gap struct {
	ID       int64
	From, To int64
	// FirstSeenAt is when the ids were first seen missing, DeclaredAt when
	// they were declared permanent.
	FirstSeenAt, DeclaredAt time.Time
}

// GapsSince lists the permanent gaps of stream declared at or after since,
// newest first, at most limit.
func GapsSince(ctx context.Context, q store.Querier, stream string, since time.Time, limit int) ([]Gap, error) {
	qs, err := queriesFor(q.Dialect())
	if err != nil {
		return nil, err
	}
	rows, err := q.Query(ctx, qs.Get("GapsSince"), stream, since, limit)
	if err != nil {
		return nil, fmt.Errorf("inbox: read gaps %s: %w", stream, err)
	}
	defer rows.Close()
	var out []Gap
	for rows.Next() {
		var g Gap
		if err := rows.Scan(&g.ID, &g.From, &g.To, &g.FirstSeenAt, &g.DeclaredAt); err != nil {
			return nil, fmt.Errorf("inbox: read gaps %s: %w", stream, err)
		}
		out = append(out, g)
	}
	return out, rows.Err()
}

// LateAction is what became of a row that showed up in a permanent gap.
type LateAction string

// Late actions.
const (
	// LateTaken: enqueued, out of order (after the ids above it).
	LateTaken LateAction = "TAKEN"
	// LateRefused: recorded DEAD with class LATE and not processed.
	LateRefused LateAction = "REFUSED"
)

// RecordLate records that source id msgID of permanent gap gapID showed up
// late and what became of it; it reports false when it was recorded before.
func RecordLate(ctx context.Context, tx store.Tx, stream string, gapID, msgID int64, action LateAction, now time.Time) (bool, error) {
	qs, err := queriesFor(tx.Dialect())
	if err != nil {
		return false, err
	}
	n, err := tx.Exec(ctx, qs.Get("LateRecord"), stream, msgID, gapID, string(action), now)
	if err != nil {
		return false, fmt.Errorf("inbox: record late row %s %d: %w", stream, msgID, err)
	}
	return n == 1, nil
}

// EnqueueDead stores m as DEAD with class and reason in the caller's
// transaction, with the reason in its error history: a message that is kept
// and shown to operators but not processed unless replayed. A message whose
// id is known already is left alone; it reports whether m was stored.
func EnqueueDead(ctx context.Context, tx store.Tx, stream string, now time.Time, m Incoming, class Class, reason string) (bool, error) {
	qs, err := queriesFor(tx.Dialect())
	if err != nil {
		return false, err
	}
	reason = truncate(reason)
	n, err := tx.Exec(ctx, qs.Get("EnqueueDead"), stream, m.ID, m.Payload, now, string(class), reason)
	if err != nil {
		return false, fmt.Errorf("inbox: store %d as dead: %w", m.ID, err)
	}
	if n == 0 {
		return false, nil
	}
	if _, err := tx.Exec(ctx, qs.Get("LogError"), stream, m.ID, 0, string(class), reason, now); err != nil {
		return false, fmt.Errorf("inbox: record error of %d: %w", m.ID, err)
	}
	return true, nil
}

// EnqueueWritten is Enqueue for a writer that stored the messages at the
// stream's source itself and enqueues them after its insert (the HTTP
// ingress or a broker source writing into a mailbox). A message whose id the
// stream's source has passed and declared a permanent gap committed after
// that: it is not enqueued here, and the source's late-row policy decides
// what becomes of it (and records it, RecordLate), as for any other late
// row — enqueued here, it would be processed after newer messages. Without a
// cursor it is Enqueue. It returns how many rows were written.
func EnqueueWritten(ctx context.Context, tx store.Tx, stream string, now time.Time, msgs ...Incoming) (int, error) {
	cur, ok, err := LoadCursor(ctx, tx, stream)
	if err != nil {
		return 0, err
	}
	if !ok {
		return Enqueue(ctx, tx, stream, now, msgs...)
	}
	qs, err := queriesFor(tx.Dialect())
	if err != nil {
		return 0, err
	}
	keep := make([]Incoming, 0, len(msgs))
	for _, m := range msgs {
		if m.ID <= cur.Watermark {
			var n int
			if err := tx.QueryRow(ctx, qs.Get("InPermanentGap"), stream, m.ID).Scan(&n); err != nil {
				return 0, fmt.Errorf("inbox: is %d in a permanent gap: %w", m.ID, err)
			}
			if n > 0 {
				continue
			}
		}
		keep = append(keep, m)
	}
	return Enqueue(ctx, tx, stream, now, keep...)
}

// Applied counts the processed (SUCCEEDED) messages of a stream above an id.
type Applied struct {
	Count       int
	First, Last int64
}

// AppliedAfter reads which messages above id were processed already.
func AppliedAfter(ctx context.Context, q store.Querier, stream string, id int64) (Applied, error) {
	qs, err := queriesFor(q.Dialect())
	if err != nil {
		return Applied{}, err
	}
	var a Applied
	if err := q.QueryRow(ctx, qs.Get("AppliedAfter"), stream, id).Scan(&a.Count, &a.First, &a.Last); err != nil {
		return Applied{}, fmt.Errorf("inbox: messages processed after %d: %w", id, err)
	}
	return a, nil
}
