package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/msgx/msgx/store"
)

// Status is where an outbox row is in its life.
type Status string

// The statuses.
const (
	StatusPending Status = "PENDING"
	StatusSent    Status = "SENT"
	// StatusCovered: a compacted lane sent a newer event of the same key
	// instead (or that newer event went DEAD, standing for this one).
	StatusCovered Status = "COVERED"
	// StatusDead: attempts exhausted or rejected; the row is the dead-letter
	// record and can be replayed.
	StatusDead Status = "DEAD"
)

// Record is an outbox row as operators see it (never its payload).
type Record struct {
	EventID       string
	Seq           int64 // the row id: the order of the events of a key
	Target        string
	Topic         string
	Key           string
	Type          EventType
	Status        Status
	Attempts      int
	LastError     string
	CreatedAt     time.Time
	NextAttemptAt time.Time
	// DoneAt is when the event was sent, covered or went dead.
	DoneAt *time.Time
	// CoveredBy is, for a COVERED event, the row id of the newer event of its
	// key that was sent (or went dead) for it.
	CoveredBy *int64
	// LeaseExpiries counts, for a pending or dead event, the claims that
	// ended without a result (the relay stopped or crashed); they are among
	// Attempts but do not count against the retry policy.
	LeaseExpiries int
	// SkippedAt is, for a DEAD event an operator skipped (Skip), when:
	// it stays DEAD but no longer holds its key on a per-key target.
	SkippedAt *time.Time
}

// ErrNotFound is returned by Get for an unknown event id.
var ErrNotFound = errors.New("outbox: no such event")

// Get returns the record of an event, pending, dead or finished (until
// retention removes the record of a finished one).
func Get(ctx context.Context, q store.Querier, eventID string) (Record, error) {
	qs, err := queriesFor(q.Dialect())
	if err != nil {
		return Record{}, err
	}
	var r Record
	var typ, status string
	err = q.QueryRow(ctx, qs.Get("Get"), eventID).Scan(&r.EventID, &r.Seq, &r.Target, &r.Topic, &r.Key, &typ, &status,
		&r.Attempts, &r.LastError, &r.CreatedAt, &r.NextAttemptAt, &r.DoneAt, &r.CoveredBy, &r.LeaseExpiries, &r.SkippedAt)
	if errors.Is(err, store.ErrNoRows) {
		return Record{}, fmt.Errorf("%w: %s", ErrNotFound, eventID)
	}
	if err != nil {
		return Record{}, fmt.Errorf("outbox: get %s: %w", eventID, err)
	}
	r.Type, r.Status = EventType(typ), Status(status)
	return r, nil
}

// ListDead returns up to limit dead-letter records of a target in id order,
// starting after the row id after (0 for the first page).
func ListDead(ctx context.Context, q store.Querier, target string, after int64, limit int) ([]Record, error) {
	qs, err := queriesFor(q.Dialect())
	if err != nil {
		return nil, err
	}
	rows, err := q.Query(ctx, qs.Get("ListDead"), target, after, limit)
	if err != nil {
		return nil, fmt.Errorf("outbox: list dead of %s: %w", target, err)
	}
	defer rows.Close()
	var out []Record
	for rows.Next() {
		r := Record{Status: StatusDead}
		var typ string
		if err := rows.Scan(&r.Seq, &r.EventID, &r.Target, &r.Topic, &r.Key, &typ, &r.Attempts, &r.LastError, &r.CreatedAt, &r.DoneAt); err != nil {
			return nil, fmt.Errorf("outbox: list dead of %s: %w", target, err)
		}
		r.Type = EventType(typ)
		out = append(out, r)
	}
	return out, rows.Err()
}

// ReplayRequest selects DEAD events to replay: the listed event ids, or every
// DEAD event of Target. Actor and Reason go to the audit (msgx_outbox_replay).
type ReplayRequest struct {
	EventIDs []string
	Target   string
	Actor    string
	Reason   string
}

// ReplayResult says what became of the selected DEAD events.
type ReplayResult struct {
	// Replayed are back to PENDING, due at once, attempts reset.
	Replayed []string
	// Covered were events of a compacted key whose newer state had been sent
	// since: they are recorded as COVERED by it instead of being sent again.
	Covered []string
}

// Replay returns the selected DEAD events to PENDING with their
// attempts reset and due at now, keeping their last error, and writes an
// audit row (when, who, why, what), in one transaction (q's own, when q is a
// store.Tx). Compaction never goes back in time: a DEAD event of a compacted
// key whose newer state was already sent is recorded as COVERED by that
// newer event instead. On a per-key target a DEAD event holds its key (its
// newer events wait), so the replayed event, the oldest of its key, is sent
// first and the waiting ones after it, in order. A replayed event that had
// been skipped (Skip) is sent after the newer events of its key that
// went out meanwhile: replay restores delivery, not history.
func Replay(ctx context.Context, q store.Querier, now time.Time, req ReplayRequest) (ReplayResult, error) {
	var res ReplayResult
	if (req.Target == "") == (len(req.EventIDs) == 0) {
		return res, errors.New("outbox: replay either a target or a list of event ids")
	}
	if req.Actor == "" {
		return res, errors.New("outbox: replay needs an actor")
	}
	qs, err := queriesFor(q.Dialect())
	if err != nil {
		return res, err
	}
	run := func(ctx context.Context, tx store.Querier) error {
		res = ReplayResult{}
		ids, selector := req.EventIDs, "ids"
		if req.Target != "" {
			selector = "target:" + req.Target
			if ids, err = queryStrings(ctx, tx, qs.Get("DeadOfTarget"), req.Target); err != nil {
				return err
			}
		}
		if len(ids) > 0 {
			if err := replayIDs(ctx, tx, qs, now, ids, &res); err != nil {
				return err
			}
		}
		replayed, _ := json.Marshal(append([]string{}, res.Replayed...))
		covered, _ := json.Marshal(append([]string{}, res.Covered...))
		if _, err := tx.Exec(ctx, qs.Get("ReplayAudit"), now, req.Actor, req.Reason, selector, string(replayed), string(covered), "replay"); err != nil {
			return fmt.Errorf("outbox: replay audit: %w", err)
		}
		return nil
	}
	err = inTx(ctx, q, run)
	if err != nil {
		return ReplayResult{}, err
	}
	return res, nil
}

// replayIDs replays DEAD events by id (see Replay).
func replayIDs(ctx context.Context, q store.Querier, qs store.Queries, now time.Time, ids []string, res *ReplayResult) error {
	if q.Dialect() == store.Postgres {
		rows, err := q.Query(ctx, qs.Get("ReplayIDs"), ids, now)
		if err != nil {
			return fmt.Errorf("outbox: replay: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			var covered bool
			if err := rows.Scan(&id, &covered); err != nil {
				return fmt.Errorf("outbox: replay: %w", err)
			}
			if covered {
				res.Covered = append(res.Covered, id)
			} else {
				res.Replayed = append(res.Replayed, id)
			}
		}
		return rows.Err()
	}
	list := jsonStrings(ids)
	var err error
	if res.Covered, err = queryStrings(ctx, q, qs.Get("ReplayCovered"), list, now); err != nil {
		return err
	}
	if _, err := q.Exec(ctx, qs.Get("ReplayCoveredDelete"), list); err != nil {
		return fmt.Errorf("outbox: replay: %w", err)
	}
	res.Replayed, err = queryStrings(ctx, q, qs.Get("ReplayIDs"), list, now)
	return err
}

func queryStrings(ctx context.Context, q store.Querier, sql string, args ...any) ([]string, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("outbox: replay: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, fmt.Errorf("outbox: replay: %w", err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("outbox: replay: %w", err)
	}
	return out, nil
}

// jsonStrings encodes a string list for SQLite's json_each.
func jsonStrings(s []string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// SkipRequest selects DEAD events to skip: the listed event ids. Actor and
// Reason go to the audit (msgx_outbox_replay, action skip).
type SkipRequest struct {
	EventIDs []string
	Actor    string
	Reason   string
}

// SkipResult lists the events marked skipped (DEAD ones not skipped before).
type SkipResult struct {
	Skipped []string
}

// Skip marks the selected DEAD events skipped at now and writes an
// audit row, in one transaction (q's own, when q is a store.Tx). A skipped
// event stays DEAD (it can still be replayed) but no longer holds its key on
// a per-key target: the key's waiting events go, in order. Events that are
// not DEAD, or already skipped, are left as they are and not listed.
func Skip(ctx context.Context, q store.Querier, now time.Time, req SkipRequest) (SkipResult, error) {
	var res SkipResult
	if len(req.EventIDs) == 0 {
		return res, errors.New("outbox: skip needs a list of event ids")
	}
	if req.Actor == "" {
		return res, errors.New("outbox: skip needs an actor")
	}
	qs, err := queriesFor(q.Dialect())
	if err != nil {
		return res, err
	}
	var ids any = req.EventIDs
	if q.Dialect() != store.Postgres {
		ids = jsonStrings(req.EventIDs)
	}
	run := func(ctx context.Context, tx store.Querier) error {
		skipped, err := queryStrings(ctx, tx, qs.Get("Skip"), ids, now)
		if err != nil {
			return err
		}
		res.Skipped = skipped
		list, _ := json.Marshal(append([]string{}, skipped...))
		if _, err := tx.Exec(ctx, qs.Get("ReplayAudit"), now, req.Actor, req.Reason, "ids", string(list), "[]", "skip"); err != nil {
			return fmt.Errorf("outbox: skip audit: %w", err)
		}
		return nil
	}
	err = inTx(ctx, q, run)
	if err != nil {
		return SkipResult{}, err
	}
	return res, nil
}

// BlockedKey is a key of a per-key target held by a DEAD event: its later
// events wait until the event is replayed or skipped.
type BlockedKey struct {
	Key string `json:"key"`
	// EventID and Seq name the DEAD event holding the key (the oldest not
	// skipped), DeadAt when it went dead.
	EventID string     `json:"event_id"`
	Seq     int64      `json:"seq"`
	DeadAt  *time.Time `json:"dead_at,omitempty"`
	// Waiting counts the key's PENDING events behind it.
	Waiting int64 `json:"waiting"`
}

// BlockedKeys returns up to limit keys of target held by a DEAD event that
// was not skipped, oldest dead event first. The rule applies to per-key
// targets only: the caller asks for those.
func BlockedKeys(ctx context.Context, q store.Querier, target string, limit int) ([]BlockedKey, error) {
	qs, err := queriesFor(q.Dialect())
	if err != nil {
		return nil, err
	}
	rows, err := q.Query(ctx, qs.Get("BlockedKeys"), target, limit)
	if err != nil {
		return nil, fmt.Errorf("outbox: blocked keys of %s: %w", target, err)
	}
	defer rows.Close()
	var out []BlockedKey
	for rows.Next() {
		var b BlockedKey
		if err := rows.Scan(&b.Key, &b.EventID, &b.Seq, &b.DeadAt, &b.Waiting); err != nil {
			return nil, fmt.Errorf("outbox: blocked keys of %s: %w", target, err)
		}
		out = append(out, b)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("outbox: blocked keys of %s: %w", target, err)
	}
	return out, nil
}

// BlockedKeyCount counts the keys of target held by a DEAD event that was
// not skipped (see BlockedKeys).
func BlockedKeyCount(ctx context.Context, q store.Querier, target string) (int64, error) {
	qs, err := queriesFor(q.Dialect())
	if err != nil {
		return 0, err
	}
	var n int64
	if err := q.QueryRow(ctx, qs.Get("BlockedKeyCount"), target).Scan(&n); err != nil {
		return 0, fmt.Errorf("outbox: blocked keys of %s: %w", target, err)
	}
	return n, nil
}

// WaitingBehind returns, for each of the listed DEAD events that has a key,
// how many PENDING events of its key are newer: on a per-key target they
// wait behind it, and a replay sends them after it.
func WaitingBehind(ctx context.Context, q store.Querier, eventIDs []string) (map[string]int64, error) {
	out := map[string]int64{}
	if len(eventIDs) == 0 {
		return out, nil
	}
	qs, err := queriesFor(q.Dialect())
	if err != nil {
		return nil, err
	}
	var ids any = eventIDs
	if q.Dialect() != store.Postgres {
		ids = jsonStrings(eventIDs)
	}
	rows, err := q.Query(ctx, qs.Get("WaitingBehind"), ids)
	if err != nil {
		return nil, fmt.Errorf("outbox: waiting events: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var n int64
		if err := rows.Scan(&id, &n); err != nil {
			return nil, fmt.Errorf("outbox: waiting events: %w", err)
		}
		out[id] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("outbox: waiting events: %w", err)
	}
	return out, nil
}

// inTx runs fn in a transaction of its own when q is the database, or in q
// when q already is the caller's transaction.
func inTx(ctx context.Context, q store.Querier, fn func(context.Context, store.Querier) error) error {
	if db, ok := q.(*store.DB); ok {
		return db.InTx(ctx, func(ctx context.Context, tx store.Tx) error { return fn(ctx, tx) })
	}
	return fn(ctx, q)
}
