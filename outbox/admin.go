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
		&r.Attempts, &r.LastError, &r.CreatedAt, &r.NextAttemptAt, &r.DoneAt, &r.CoveredBy, &r.LeaseExpiries)
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

// ReplayEvents returns the selected DEAD events to PENDING with their
// attempts reset and due at now, keeping their last error, and writes an
// audit row (when, who, why, what), in one transaction (q's own, when q is a
// store.Tx). Compaction never goes back in time: a DEAD event of a compacted
// key whose newer state was already sent is recorded as COVERED by that
// newer event instead. On a per-key target a replayed event is sent after
// the newer events of its key that went out meanwhile (replay restores
// delivery, not history).
func ReplayEvents(ctx context.Context, q store.Querier, now time.Time, req ReplayRequest) (ReplayResult, error) {
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
		if _, err := tx.Exec(ctx, qs.Get("ReplayAudit"), now, req.Actor, req.Reason, selector, string(replayed), string(covered)); err != nil {
			return fmt.Errorf("outbox: replay audit: %w", err)
		}
		return nil
	}
	if db, ok := q.(*store.DB); ok {
		err = db.InTx(ctx, func(ctx context.Context, tx store.Tx) error { return run(ctx, tx) })
	} else {
		err = run(ctx, q)
	}
	if err != nil {
		return ReplayResult{}, err
	}
	return res, nil
}

// replayIDs replays DEAD events by id (see ReplayEvents).
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

// unnamedActor is the audit's actor of Replay and ReplayTarget, which do not
// name one.
const unnamedActor = "unnamed"

// Replay is ReplayEvents of the listed events without naming an actor; it
// returns how many went back to PENDING.
func Replay(ctx context.Context, q store.Querier, now time.Time, eventIDs ...string) (int64, error) {
	if len(eventIDs) == 0 {
		return 0, nil
	}
	res, err := ReplayEvents(ctx, q, now, ReplayRequest{EventIDs: eventIDs, Actor: unnamedActor})
	return int64(len(res.Replayed)), err
}

// ReplayTarget is ReplayEvents of every DEAD event of a target without
// naming an actor; it returns how many went back to PENDING.
func ReplayTarget(ctx context.Context, q store.Querier, now time.Time, target string) (int64, error) {
	if target == "" {
		return 0, errors.New("outbox: replay needs a target")
	}
	res, err := ReplayEvents(ctx, q, now, ReplayRequest{Target: target, Actor: unnamedActor})
	return int64(len(res.Replayed)), err
}

// jsonStrings encodes a string list for SQLite's json_each.
func jsonStrings(s []string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
