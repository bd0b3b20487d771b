package sis_test

import (
	"maps"
	"regexp"
	"slices"
	"testing"

	"github.com/msgx/msgx/pipeline/sis"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// The statements go through an index in the plans the connections cache,
// even plans made while the tables were empty (a service started on a new
// database): there a sequential scan looks cheaper, and the cached plan
// would go on reading the whole table as it grows, on every batch (the
// reads by FLID list), every sweep chunk (the history's deletes) or every
// RESP (the newest request of its type).
//
// Two statements are left to the planner: the query API's page of flights
// and the admin list of requests filter by optional criteria, and whether
// an index scan in key order or a scan and a sort is cheaper depends on how
// many rows the criteria of the moment keep, which a cached plan cannot
// know.
func TestPlansKeepTheirIndexPathsOnEmptyTables(t *testing.T) {
	db := storetest.NewPostgres(t, store.WithMigrate(sis.Schema()))
	stmts := sis.Statements()
	for _, name := range []string{"FlightPage", "ListRequests"} {
		if _, ok := stmts[name]; !ok {
			t.Fatalf("no statement %s", name)
		}
		delete(stmts, name)
	}
	if len(stmts) < 40 {
		t.Fatalf("found %d statements: %v", len(stmts), slices.Sorted(maps.Keys(stmts)))
	}
	storetest.CheckPlans(t, db.Pool(), stmts, regexp.MustCompile(`^(flight_|sis_)`))
}
