package outbox_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// CheckWAL names, in words, a role without the REPLICATION attribute, and
// finds nothing lacking for one that has it.
func TestCheckWAL(t *testing.T) {
	e := newWALEnv(t)
	if p := outbox.CheckWAL(context.Background(), e.db, e.dsn, e.slot); len(p) != 0 {
		t.Fatalf("a logical server and a replication role: %v", p)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, storetest.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	role := storetest.UniqueName("msgx_norepl_")
	if _, err := conn.Exec(ctx, "CREATE ROLE "+role+" LOGIN NOREPLICATION NOSUPERUSER"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, storetest.PostgresURL())
		if err == nil {
			_, _ = conn.Exec(ctx, "DROP ROLE IF EXISTS "+role)
			_ = conn.Close(ctx)
		}
	})
	u, err := url.Parse(e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	db, err := store.Open(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	p := outbox.CheckWAL(ctx, db, u.String(), e.slot)
	if len(p) != 1 || !strings.Contains(p[0], "REPLICATION attribute") {
		t.Fatalf("a role without REPLICATION: %v", p)
	}
}
