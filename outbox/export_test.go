package outbox

import (
	"regexp"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/msgx/msgx/store"
)

// Floor returns where the claims of an unordered target's lane start.
func Floor(r *Relay, target string) int64 {
	for _, l := range r.lanes {
		if l.cfg.target == target {
			return l.floor.v.Load()
		}
	}
	return -1
}

// RelayPool is the relay's own connection pool on PostgreSQL.
func RelayPool(r *Relay) *pgxpool.Pool { return r.pg.pool }

// RelayStatements are the statements the relay runs on its pool, by name.
func RelayStatements(t testing.TB) map[string]string {
	text, err := sqlFS.ReadFile("sql/postgres/relay.sql")
	if err != nil {
		t.Fatal(err)
	}
	q, err := queries.For(store.Postgres)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^-- name: (\w+)`).FindAllStringSubmatch(string(text), -1) {
		out[m[1]] = q.Get(m[1])
	}
	return out
}
