package inbox

import (
	"context"
	"embed"

	"github.com/msgx/msgx/store"
)

//go:embed migrations
var migrationFS embed.FS

// Schema is the inbox's migration line: the stream leases (msgx_lease) and
// the msgx_inbox* tables. It requires no other line.
func Schema() store.Line {
	return store.Line{
		Name:       "inbox",
		Migrations: store.DirMigrations(migrationFS, "migrations"),
		// The versions of these migrations in the single sequence msgx kept
		// before lines (0001_core, 0003_inbox, 0005_inbox_collation, ...).
		Legacy: map[int]int{1: 1, 3: 2, 5: 3, 30: 4, 31: 5, 32: 6, 33: 7, 34: 8},
	}
}

// Migrate creates or upgrades the inbox's tables in db (see Schema).
func Migrate(ctx context.Context, db *store.DB) error {
	return db.Migrate(ctx, Schema())
}
