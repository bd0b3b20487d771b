package outbox

import (
	"context"
	"embed"

	"github.com/msgx/msgx/store"
)

//go:embed migrations
var migrationFS embed.FS

// Schema is the outbox's migration line: the tables msgx_outbox,
// msgx_outbox_sent, msgx_outbox_key_state and msgx_outbox_replay, and
// nothing else. It requires no other line.
func Schema() store.Line {
	return store.Line{
		Name:       "outbox",
		Migrations: store.DirMigrations(migrationFS, "migrations"),
		// The versions of these migrations in the single sequence msgx kept
		// before lines (0002_outbox, 0040_outbox_lease_expiries, ...).
		Legacy: map[int]int{2: 1, 40: 2, 41: 3, 42: 4, 43: 5},
	}
}

// Migrate creates or upgrades the outbox's tables in db (see Schema): all a
// program that only enqueues and relays events needs.
func Migrate(ctx context.Context, db *store.DB) error {
	return db.Migrate(ctx, Schema())
}
