package routepassport

import (
	"regexp"
	"testing"

	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// The pipeline's statements go through an index in the plans the
// connections cache, even plans made while the tables were empty (a service
// started on a new database), where a sequential scan looks cheaper and the
// cached plan would go on reading the whole table as it grows: the source
// ledger's cleanup runs every few minutes over a table of every record of
// the retention period.
func TestPlansKeepTheirIndexPathsOnEmptyTables(t *testing.T) {
	db := storetest.NewPostgres(t, store.WithMigrate(Schema()))
	q, err := store.LoadQueries(sqlFS, "sql", store.Postgres)
	if err != nil {
		t.Fatal(err)
	}
	storetest.CheckPlans(t, db.Pool(), q, regexp.MustCompile(`^route_passport`))
}
