package sis

import (
	"maps"

	"github.com/msgx/msgx/store"
)

// StateJSON exposes the state encoding to the tests.
func StateJSON(f *Flight) ([]byte, error) { return f.stateJSON() }

// Statements are the package's PostgreSQL statements, by name (a copy).
func Statements() map[string]string {
	q, err := queries.For(store.Postgres)
	if err != nil {
		panic(err)
	}
	return maps.Clone(q)
}
