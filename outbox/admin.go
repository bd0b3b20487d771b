package outbox

import (
	"context"
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
	// StatusDead: attempts exhausted or poison; the row is the dead-letter
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

// Replay returns DEAD events to PENDING with their attempts reset and due at
// now; it keeps their last error for the audit and returns how many it moved.
// Replaying does not restore history: on a per-key or compacted target the
// replayed event becomes the key's head again and is sent after newer events
// of its key that were sent meanwhile.
func Replay(ctx context.Context, q store.Querier, now time.Time, eventIDs ...string) (int64, error) {
	if len(eventIDs) == 0 {
		return 0, nil
	}
	qs, err := queriesFor(q.Dialect())
	if err != nil {
		return 0, err
	}
	var ids any = eventIDs
	if q.Dialect() != store.Postgres {
		ids = jsonStrings(eventIDs)
	}
	n, err := q.Exec(ctx, qs.Get("ReplayIDs"), ids, now)
	if err != nil {
		return 0, fmt.Errorf("outbox: replay: %w", err)
	}
	return n, nil
}

// ReplayTarget replays every DEAD event of a target (see Replay).
func ReplayTarget(ctx context.Context, q store.Querier, now time.Time, target string) (int64, error) {
	qs, err := queriesFor(q.Dialect())
	if err != nil {
		return 0, err
	}
	n, err := q.Exec(ctx, qs.Get("ReplayTarget"), target, now)
	if err != nil {
		return 0, fmt.Errorf("outbox: replay %s: %w", target, err)
	}
	return n, nil
}
