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
	reads := sis.FlightReads()
	if len(reads) < 12 {
		t.Fatalf("found %d flight reads", len(reads))
	}
	storetest.CheckPlans(t, db.Pool(), reads, regexp.MustCompile(`^flight_`))
}
