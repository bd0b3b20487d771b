package inbox

import (
	"embed"
	"encoding/json"
	"fmt"

	"github.com/msgx/msgx/store"
)

//go:embed sql
var sqlFS embed.FS

// queries holds the embedded SQL per dialect; read-only after init, and a
// broken file is a build defect caught by every test.
var queries = map[store.Dialect]store.Queries{
	store.Postgres: mustLoad(store.Postgres),
	store.SQLite:   mustLoad(store.SQLite),
}

func mustLoad(d store.Dialect) store.Queries {
	q, err := store.LoadQueries(sqlFS, "sql", d)
	if err != nil {
		panic(err)
	}
	return q
}

func queriesFor(d store.Dialect) (store.Queries, error) {
	q, ok := queries[d]
	if !ok {
		return nil, fmt.Errorf("inbox: unsupported dialect %q", d)
	}
	return q, nil
}

// listArg passes a list parameter: a PostgreSQL array, or JSON text that the
// SQLite statements expand with json_each.
func listArg[T int64 | string](d store.Dialect, v []T) any {
	if d == store.Postgres {
		if v == nil {
			v = []T{}
		}
		return v
	}
	b, _ := json.Marshal(v) // a slice of numbers or strings always marshals
	if v == nil {
		return "[]"
	}
	return string(b)
}

// nullable turns an empty string into SQL NULL.
func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}
