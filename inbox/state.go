package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/msgx/msgx/store"
)

// Row is the processing state of one message, as operators see it.
type Row struct {
	ID                  int64
	Status              Status
	ErrorClass          Class
	Reason              string
	Identity            string
	Kind                string
	Attempts            int
	NextAttemptAt       *time.Time
	ProcessingStartedAt *time.Time
	ReceivedAt          time.Time
	FinishedAt          *time.Time
	BackfillNextAt      *time.Time
	BackfillAttempts    int
	BackfillError       string
	BackfilledAt        *time.Time
}

// ErrNotFound is returned by Get for an unknown message.
var ErrNotFound = errors.New("inbox: message not found")

// Get reads the state of one message.
func Get(ctx context.Context, q store.Querier, stream string, id int64) (Row, error) {
	qs, err := queriesFor(q.Dialect())
	if err != nil {
		return Row{}, err
	}
	var r Row
	var status, class string
	err = q.QueryRow(ctx, qs.Get("Get"), stream, id).Scan(&r.ID, &status, &class, &r.Reason, &r.Identity, &r.Kind,
		&r.Attempts, &r.NextAttemptAt, &r.ProcessingStartedAt, &r.ReceivedAt, &r.FinishedAt,
		&r.BackfillNextAt, &r.BackfillAttempts, &r.BackfillError, &r.BackfilledAt)
	if errors.Is(err, store.ErrNoRows) {
		return Row{}, ErrNotFound
	}
	if err != nil {
		return Row{}, fmt.Errorf("inbox: get %d: %w", id, err)
	}
	r.Status, r.ErrorClass = Status(status), Class(class)
	return r, nil
}

// Counts returns how many messages of stream are in each status.
func Counts(ctx context.Context, q store.Querier, stream string) (map[Status]int, error) {
	qs, err := queriesFor(q.Dialect())
	if err != nil {
		return nil, err
	}
	rows, err := q.Query(ctx, qs.Get("Counts"), stream)
	if err != nil {
		return nil, fmt.Errorf("inbox: counts: %w", err)
	}
	defer rows.Close()
	out := map[Status]int{}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			return nil, fmt.Errorf("inbox: counts: %w", err)
		}
		out[Status(s)] = n
	}
	return out, rows.Err()
}
