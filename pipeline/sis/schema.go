package sis

import (
	"context"
	"embed"

	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
)

//go:embed migrations
var migrationFS embed.FS

// Schema is the SIS pipeline's migration line: the flight state (flight_*),
// the reference data, the requests and the history (sis_*). It requires the
// inbox's line (the processor runs in an inbox stream, whose messages the
// flight versions name) and the outbox's (it enqueues the events).
func Schema() store.Line {
	return store.Line{
		Name:       "sis",
		Migrations: store.DirMigrations(migrationFS, "migrations"),
		Requires:   []store.Line{inbox.Schema(), outbox.Schema()},
		// The versions of these migrations in the single sequence msgx kept
		// before lines (0010_sis_flight ... 0017_sis_flight_version).
		Legacy: map[int]int{10: 1, 11: 2, 12: 3, 13: 4, 14: 5, 16: 6, 17: 7},
	}
}

// Migrate creates or upgrades the SIS tables, and those of the lines they
// require, in db (see Schema).
func Migrate(ctx context.Context, db *store.DB) error {
	return db.Migrate(ctx, Schema())
}
