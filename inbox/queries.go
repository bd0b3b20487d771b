package inbox

import (
	"embed"
	"encoding/json"

	"github.com/msgx/msgx/store"
)

//go:embed sql
var sqlFS embed.FS

var queries = store.MustLoadQuerySet("inbox", sqlFS, "sql")

func queriesFor(d store.Dialect) (store.Queries, error) { return queries.For(d) }

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
