package mailbox_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/source/mailbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

var t0 = time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)

// patience bounds every wait of these tests for a condition.
const patience = 15 * time.Second

// env is one mailbox backend with the store the inbox lives in.
type env struct {
	t     *testing.T
	name  string
	db    *store.DB // the inbox's store
	table *mailbox.Table
	raw   *sql.DB // the MySQL handle, for the mariadb backend
}

// eachMailbox runs fn with the mailbox in SQLite (embedded default), in
// PostgreSQL (same-shape table) and in MariaDB (production: the inbox in
// PostgreSQL, the mailbox on the shared server). Every run has its own
// uniquely named table, dropped at cleanup.
func eachMailbox(t *testing.T, fn func(t *testing.T, e *env)) {
	t.Run("sqlite", func(t *testing.T) {
		db := storetest.NewSQLite(t, store.WithMigrate(mailbox.Schema()))
		fn(t, newStoreEnv(t, "sqlite", db))
	})
	t.Run("postgres", func(t *testing.T) {
		db := storetest.NewPostgres(t, store.WithMigrate(mailbox.Schema()))
		fn(t, newStoreEnv(t, "postgres", db))
	})
	t.Run("mariadb", func(t *testing.T) {
		fn(t, newMariaDBEnv(t))
	})
}

func tableName() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "t_cminmsgs_" + hex.EncodeToString(b[:])
}

func newStoreEnv(t *testing.T, name string, db *store.DB) *env {
	t.Helper()
	tbl, err := mailbox.NewStore(db, mailbox.WithTable(tableName()), mailbox.WithProcessedValue("DONE"))
	if err != nil {
		t.Fatal(err)
	}
	if err := tbl.Create(context.Background()); err != nil {
		t.Fatal(err)
	}
	return &env{t: t, name: name, db: db, table: tbl}
}

func newMariaDBEnv(t *testing.T) *env {
	t.Helper()
	ctx := context.Background()
	raw := storetest.OpenMySQL(t)
	tbl, err := mailbox.NewMySQL(raw, mailbox.WithTable(tableName()), mailbox.WithProcessedValue("DONE"))
	if err != nil {
		t.Fatal(err)
	}
	if err := tbl.Create(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tbl.Drop(context.Background()); err != nil {
			t.Logf("drop %s: %v", tbl.Name(), err)
		}
	})
	return &env{t: t, name: "mariadb", db: storetest.NewPostgres(t, store.WithMigrate(mailbox.Schema())), table: tbl, raw: raw}
}

// exec runs SQL written with ? placeholders against the mailbox's database.
func (e *env) exec(q string, args ...any) {
	e.t.Helper()
	q = strings.ReplaceAll(q, "TBL", e.table.Name())
	var err error
	if e.raw != nil {
		_, err = e.raw.ExecContext(context.Background(), q, args...)
	} else {
		if e.db.Dialect() == store.Postgres {
			q = numbered(q, "$")
		}
		_, err = e.db.Exec(context.Background(), q, args...)
	}
	if err != nil {
		e.t.Fatalf("%s: %v", q, err)
	}
}

func numbered(q, prefix string) string {
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			b.WriteString(prefix)
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// put inserts rows with explicit ids (to make gaps).
func (e *env) put(ids ...int64) {
	e.t.Helper()
	for _, id := range ids {
		e.exec("INSERT INTO TBL (CMINMSGS_ID, CMINMSGS_CLOB_MSG) VALUES (?, ?)", id, payload(id))
	}
}

func payload(id int64) string { return "msg-" + strconv.FormatInt(id, 10) }

func (e *env) poller(clk clock.Clock, opts ...mailbox.PollerOption) *mailbox.Poller {
	base := []mailbox.PollerOption{mailbox.WithPollerClock(clk), mailbox.WithPollerLogger(testkit.Quiet()), mailbox.WithGapTimesFromClock(),
		mailbox.WithStart(mailbox.FromBeginning())}
	return mailbox.NewPoller(e.table, e.db, "sis", append(base, opts...)...)
}

func (e *env) poll(p *mailbox.Poller) mailbox.PollResult {
	e.t.Helper()
	res, err := p.Poll(context.Background())
	if err != nil {
		e.t.Fatalf("poll: %v", err)
	}
	return res
}

// enqueued lists the inbox's message ids and checks their payloads.
func (e *env) enqueued() []int64 {
	e.t.Helper()
	q := "SELECT msg_id, payload FROM msgx_inbox WHERE stream = 'sis' ORDER BY msg_id"
	rows, err := e.db.Query(context.Background(), q)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		var p []byte
		if err := rows.Scan(&id, &p); err != nil {
			e.t.Fatal(err)
		}
		if string(p) != payload(id) {
			e.t.Fatalf("message %d payload %q", id, p)
		}
		ids = append(ids, id)
	}
	return ids
}

func (e *env) cursor() inbox.Cursor {
	e.t.Helper()
	c, ok, err := inbox.LoadCursor(context.Background(), e.db, "sis")
	if err != nil || !ok {
		e.t.Fatalf("cursor: %v %v", ok, err)
	}
	return c
}

func seq(from, to int64) []int64 {
	var out []int64
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}
