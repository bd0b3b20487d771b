package inbox_test

import (
	"regexp"
	"testing"

	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// The engine's statements keep their index paths in the plans the
// connections cache, even plans made while the inbox tables were empty, as
// they are when a stream starts: there a sequential scan looks cheaper, and
// the cached plan would go on reading every row of the table as it grows.
func TestPlansKeepTheirIndexPathsOnEmptyTables(t *testing.T) {
	db := storetest.NewPostgres(t, store.WithMigrate(inbox.Schema(), outbox.Schema()))
	stmts := inbox.Statements()
	if len(stmts) < 30 {
		t.Fatalf("found %d statements", len(stmts))
	}
	storetest.CheckPlans(t, db.Pool(), stmts, regexp.MustCompile(`^msgx_(inbox|lease)`))
}
