package routepassport

import (
	"context"
	"embed"

	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
)

//go:embed migrations
var migrationFS embed.FS

// Schema is the route-passport pipeline's migration line (PostgreSQL only):
// route_passports and route_passport_sources. It requires the outbox's
// line, in which the pipeline writes its events.
func Schema() store.Line {
	return store.Line{
		Name:       "routepassport",
		Migrations: store.DirMigrations(migrationFS, "migrations"),
		Requires:   []store.Line{outbox.Schema()},
		// 0020_route_passports and 0021_route_passports_json in the single
		// sequence msgx kept before lines.
		Legacy: map[int]int{20: 1, 21: 2},
	}
}

// Migrate creates or upgrades the route-passport tables, and the outbox's,
// in db (see Schema).
func Migrate(ctx context.Context, db *store.DB) error {
	return db.Migrate(ctx, Schema())
}
