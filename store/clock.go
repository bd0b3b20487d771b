package store

import (
	"context"
	"fmt"
	"time"
)

// Now reads the database's clock. Times that several hosts compare (a gap's
// age, a lease's expiry, a message's age on the console) come from it, not
// from each host's own clock.
func Now(ctx context.Context, q Querier) (time.Time, error) {
	// PostgreSQL: the time the statement started, so a caller inside a
	// transaction reads the present, not the transaction's start. SQLite: the
	// embedded store's host clock in Unix microseconds, which its rows scan
	// into a time.Time.
	query := "SELECT statement_timestamp()"
	if q.Dialect() == SQLite {
		query = "SELECT CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)"
	}
	var now time.Time
	if err := q.QueryRow(ctx, query).Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("store: read the database's clock: %w", err)
	}
	return now, nil
}
