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

// ScalarColumns are the fields with a column of their own.
func ScalarColumns() []string { return append([]string(nil), scalarColumns...) }

// KnownCollections are the collections the processor knows by name.
func KnownCollections() []string { return sortedKeys(collectionSeq) }
