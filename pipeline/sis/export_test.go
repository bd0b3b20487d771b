package sis

import (
	"strings"

	"github.com/msgx/msgx/store"
)

// StateJSON exposes the state encoding to the tests.
func StateJSON(f *Flight) ([]byte, error) { return f.stateJSON() }

// FlightReads are the PostgreSQL statements that read flights by a FLID
// list, by name.
func FlightReads() map[string]string {
	q, err := queries.For(store.Postgres)
	if err != nil {
		panic(err)
	}
	out := map[string]string{}
	for name, sql := range q {
		if name == "LoadFlights" || strings.HasPrefix(name, "Read") {
			out[name] = sql
		}
	}
	return out
}
