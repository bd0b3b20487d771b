package sis_test

import (
	"regexp"
	"testing"

	"github.com/msgx/msgx/pipeline/sis"
	"github.com/msgx/msgx/store/storetest"
)

// The reads by FLID list go to each flight by its key in the plans the
// connections cache, even plans made while the flight tables were empty (a
// service started on a new database): there a sequential scan looks cheaper,
// and the cached plan would go on reading the whole table on every batch as
// it grows.
func TestFlightReadPlansKeepTheirIndexPathsOnEmptyTables(t *testing.T) {
	db := storetest.NewPostgres(t)
	seq := regexp.MustCompile(`Seq Scan on flight_`)
	reads := sis.FlightReads()
	if len(reads) < 12 {
		t.Fatalf("found %d flight reads", len(reads))
	}
	for name, sql := range reads {
		if plan := storetest.GenericPlan(t, db.Pool(), sql); seq.MatchString(plan) {
			t.Errorf("%s reads a table sequentially:\n%s", name, plan)
		}
	}
}
