package admin

import (
	"context"
	"embed"

	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
)

//go:embed migrations
var migrationFS embed.FS

// Schema is the admin API's migration line: its audit (msgx_admin_audit).
// It requires the inbox's and the outbox's lines, whose tables the API
// reads and replays.
func Schema() store.Line {
	return store.Line{
		Name:       "admin",
		Migrations: store.DirMigrations(migrationFS, "migrations"),
		Requires:   []store.Line{inbox.Schema(), outbox.Schema()},
		// 0050_admin_audit in the single sequence msgx kept before lines.
		Legacy: map[int]int{50: 1},
	}
}

// Migrate creates or upgrades the admin API's tables, and those of the
// lines it requires, in db (see Schema).
func Migrate(ctx context.Context, db *store.DB) error {
	return db.Migrate(ctx, Schema())
}
