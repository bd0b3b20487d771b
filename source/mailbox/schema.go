package mailbox

import (
	"context"
	"strings"

	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/store"
)

// Schema is the migration line of a mailbox table kept in the store (the
// embedded default's cminmsgs, or one beside the inbox in PostgreSQL) rather
// than on the shared MySQL server. Its table is made by the same statement
// as Table.Create's (sql/DIALECT/mailbox.sql), so the DDL is written once.
// It requires the inbox's line, into which the source enqueues the rows.
func Schema() store.Line {
	return store.Line{
		Name:       "mailbox",
		Migrations: mailboxMigrations,
		Requires:   []store.Line{inbox.Schema()},
		// 0004_mailbox in the single sequence msgx kept before lines.
		Legacy: map[int]int{4: 1},
	}
}

// Migrate creates the store's mailbox table (cminmsgs), and the inbox's
// tables, in db (see Schema).
func Migrate(ctx context.Context, db *store.DB) error {
	return db.Migrate(ctx, Schema())
}

func mailboxMigrations(d store.Dialect) ([]store.Migration, error) {
	q, err := store.LoadQueries(sqlFS, "sql", d)
	if err != nil {
		return nil, err
	}
	return []store.Migration{{Version: 1, Name: "cminmsgs", SQL: strings.ReplaceAll(q["Create"], "{{table}}", "cminmsgs")}}, nil
}
