// Package mailbox is the shared-table source: the legacy mailbox table
// (cminmsgs) in the shared MySQL/MariaDB server, or a table of the same shape
// in the engine's own store for the embedded default. It provides the poller
// that enqueues new rows into the inbox behind a watermark, the insert used by
// the HTTP ingress, and the backfill of the processed mark.
package mailbox

import (
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	// The shared mailbox is MySQL/MariaDB in production.
	_ "github.com/go-sql-driver/mysql"

	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/store"
)

// MySQL is the dialect of the shared mailbox server.
const MySQL store.Dialect = "mysql"

//go:embed sql
var sqlFS embed.FS

// Row is one mailbox message as the poller reads it: UTF-8 text (the column
// is text), its XML declaration, if any, saying so.
type Row struct {
	ID  int64
	Msg []byte
}

// Meta fills the subsystem columns of an inserted row; zero fields are NULL.
type Meta struct {
	Subsystem string // CMINMSGS_SUBSYSTEM_NAME (SNDR)
	Sequence  int64  // CMINMSGS_SUBSYSTEM_SEQUENCE (SEQN)
	DateSent  time.Time
	Subtype   string // CMINMSGS_SUBSYSTEM_SUBTYPE (STYP)
	Type      string // CMINMSGS_SUBSYSTEM_TYPE (TYPE)
}

// Table is a mailbox table.
type Table struct {
	dialect   store.Dialect
	name      string
	q         store.Queries
	sqldb     *sql.DB   // MySQL
	st        *store.DB // a same-shape table in the store
	processed string
	owned     bool
	zone      *time.Location
	// limitMu guards limit, the largest message a row holds (0: not read
	// yet; see MaxMessage).
	limitMu sync.Mutex
	limit   int64
}

type options struct {
	table     string
	processed string
	zone      *time.Location
}

// DefaultTimeZone is the airport time zone DATETIME columns of a MySQL
// mailbox are written in unless WithTimeZone says otherwise.
const DefaultTimeZone = "Asia/Shanghai"

// defaultZone is Asia/Shanghai, or UTC+8 where the system has no zone
// database (China has kept UTC+8 without daylight saving since 1991).
func defaultZone() *time.Location {
	if loc, err := time.LoadLocation(DefaultTimeZone); err == nil {
		return loc
	}
	return time.FixedZone("CST", 8*3600)
}

// WithTimeZone sets the airport time zone (airport.timezone) that the
// DATETIME columns of a MySQL mailbox are written in (default
// Asia/Shanghai): DATETIME keeps no zone, and the other systems sharing the
// table read it as local airport time. Tables in the store keep zoned times.
func WithTimeZone(loc *time.Location) Option { return func(o *options) { o.zone = loc } }

// Option configures a Table.
type Option func(*options)

// WithTable sets the table name (default cminmsgs).
func WithTable(name string) Option { return func(o *options) { o.table = name } }

// WithProcessedValue sets the CMINMSGS_STATUS value the backfill writes
// (mailbox.processed-value; default "PROCESSED"). Only use a value the owners
// of the shared table accept.
func WithProcessedValue(v string) Option { return func(o *options) { o.processed = v } }

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)

func build(d store.Dialect, opts []Option) (*Table, error) {
	o := options{table: "cminmsgs", processed: "PROCESSED"}
	for _, opt := range opts {
		opt(&o)
	}
	if !identRE.MatchString(o.table) {
		return nil, fmt.Errorf("mailbox: invalid table name %q", o.table)
	}
	if o.processed == "" || len(o.processed) > 20 {
		return nil, fmt.Errorf("mailbox: processed value %q must be 1 to 20 characters", o.processed)
	}
	q, err := store.LoadQueries(sqlFS, "sql", d)
	if err != nil {
		return nil, fmt.Errorf("mailbox: %w", err)
	}
	for k, v := range q {
		q[k] = strings.ReplaceAll(v, "{{table}}", o.table)
	}
	if o.zone == nil {
		o.zone = defaultZone()
	}
	return &Table{dialect: d, name: o.table, q: q, processed: o.processed, zone: o.zone}, nil
}

// OpenMySQL opens the shared mailbox on a MySQL/MariaDB server. The DSN is
// go-sql-driver/mysql's (user@tcp(host:3306)/db?parseTime=true); parseTime is
// added when missing. DATETIME values are written in the airport zone
// (WithTimeZone), whatever the DSN's loc.
func OpenMySQL(ctx context.Context, dsn string, opts ...Option) (*Table, error) {
	if !strings.Contains(dsn, "parseTime=") {
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		dsn += sep + "parseTime=true"
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return nil, fmt.Errorf("mailbox: open mysql: %w", err)
	}
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("mailbox: ping mysql: %w", err)
	}
	t, err := NewMySQL(db, opts...)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	t.owned = true
	return t, nil
}

// datetime is a time as a DATETIME column of the MySQL mailbox holds it: the
// wall time in the airport zone, whatever the connection's loc.
func (t *Table) datetime(at time.Time) any {
	if at.IsZero() {
		return nil
	}
	if t.sqldb == nil {
		return at
	}
	return at.In(t.zone).Format("2006-01-02 15:04:05.999999")
}

// NewMySQL uses an open MySQL handle (opened with parseTime=true).
func NewMySQL(db *sql.DB, opts ...Option) (*Table, error) {
	t, err := build(MySQL, opts)
	if err != nil {
		return nil, err
	}
	t.sqldb = db
	return t, nil
}

// NewStore uses a mailbox table of the same shape in the engine's store
// (migration 0004 creates cminmsgs there).
func NewStore(db *store.DB, opts ...Option) (*Table, error) {
	t, err := build(db.Dialect(), opts)
	if err != nil {
		return nil, err
	}
	t.st = db
	return t, nil
}

// Name is the table name.
func (t *Table) Name() string { return t.name }

// Dialect is the database family of the table.
func (t *Table) Dialect() store.Dialect { return t.dialect }

// Close closes a connection opened by OpenMySQL.
func (t *Table) Close() error {
	if t.owned && t.sqldb != nil {
		return t.sqldb.Close()
	}
	return nil
}

// Ping checks that the mailbox is reachable.
func (t *Table) Ping(ctx context.Context) error {
	if t.sqldb != nil {
		return t.sqldb.PingContext(ctx)
	}
	return t.st.Ping(ctx)
}

// Create creates the table if it does not exist (tests and development; the
// shared production table belongs to its owners).
func (t *Table) Create(ctx context.Context) error {
	var err error
	if t.sqldb != nil {
		_, err = t.sqldb.ExecContext(ctx, t.q.Get("Create"))
	} else {
		_, err = t.st.Exec(ctx, t.q.Get("Create"))
	}
	if err != nil {
		return fmt.Errorf("mailbox: create %s: %w", t.name, err)
	}
	return nil
}

// Scan returns up to limit rows with an id above after, in id order.
func (t *Table) Scan(ctx context.Context, after int64, limit int) ([]Row, error) {
	return t.read(ctx, "Scan", after, limit)
}

// ScanRange returns up to limit rows with an id from from to to, in id order.
func (t *Table) ScanRange(ctx context.Context, from, to int64, limit int) ([]Row, error) {
	return t.read(ctx, "ScanRange", from, to, limit)
}

// MaxID returns the newest id of the table (0 when empty).
func (t *Table) MaxID(ctx context.Context) (int64, error) {
	var (
		id  int64
		err error
	)
	if t.sqldb != nil {
		err = t.sqldb.QueryRowContext(ctx, t.q.Get("MaxID")).Scan(&id)
	} else {
		err = t.st.QueryRow(ctx, t.q.Get("MaxID")).Scan(&id)
	}
	if err != nil {
		return 0, fmt.Errorf("mailbox: newest id of %s: %w", t.name, err)
	}
	return id, nil
}

// AutoIncrementStep returns the step between the ids writers get: MySQL's
// auto_increment_increment (the larger of the server's and this session's);
// 1 for a table in the store.
func (t *Table) AutoIncrementStep(ctx context.Context) (int64, error) {
	if t.sqldb == nil {
		return 1, nil
	}
	var step int64
	if err := t.sqldb.QueryRowContext(ctx, t.q.Get("AutoIncrementStep")).Scan(&step); err != nil {
		return 0, fmt.Errorf("mailbox: read auto_increment_increment: %w", err)
	}
	return step, nil
}

// read runs a query of (id, message) rows.
func (t *Table) read(ctx context.Context, query string, args ...any) ([]Row, error) {
	var (
		out []Row
		err error
	)
	if t.sqldb != nil {
		var rows *sql.Rows
		if rows, err = t.sqldb.QueryContext(ctx, t.q.Get(query), args...); err == nil {
			out, err = readRows(rows)
			_ = rows.Close()
		}
	} else {
		var rows store.Rows
		if rows, err = t.st.Query(ctx, t.q.Get(query), args...); err == nil {
			out, err = readRows(rows)
			rows.Close()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("mailbox: read %s: %w", t.name, err)
	}
	return out, nil
}

// readRows reads (id, message) rows from either a database/sql result (the
// MySQL mailbox) or a store result.
func readRows(rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}) ([]Row, error) {
	var out []Row
	for rows.Next() {
		var r Row
		if err := rows.Scan(&r.ID, &r.Msg); err != nil {
			return nil, err
		}
		r.Msg = DeclareUTF8(r.Msg)
		out = append(out, r)
	}
	return out, rows.Err()
}

// Insert stores a message and returns its mailbox id. A message the mailbox
// cannot store fails with ErrUnstorable or ErrTooLarge before anything is
// written (see Storable).
func (t *Table) Insert(ctx context.Context, msg []byte, received time.Time, meta Meta) (int64, error) {
	if err := t.Storable(ctx, msg); err != nil {
		return 0, err
	}
	args := []any{string(msg), t.datetime(received), nullString(meta.Subsystem), nullInt(meta.Sequence), t.datetime(meta.DateSent),
		nullString(meta.Subtype), nullString(meta.Type)}
	if t.sqldb != nil {
		res, err := t.sqldb.ExecContext(ctx, t.q.Get("Insert"), args...)
		if err != nil {
			return 0, fmt.Errorf("mailbox: insert into %s: %w", t.name, err)
		}
		id, err := res.LastInsertId()
		if err != nil {
			return 0, fmt.Errorf("mailbox: insert into %s: %w", t.name, err)
		}
		return id, nil
	}
	var id int64
	if err := t.st.QueryRow(ctx, t.q.Get("Insert"), args...).Scan(&id); err != nil {
		return 0, fmt.Errorf("mailbox: insert into %s: %w", t.name, err)
	}
	return id, nil
}

// Backfill writes the processed mark (CMINMSGS_DATE_PROCESSED and
// CMINMSGS_STATUS) of the given rows in one transaction; it implements
// inbox.Backfiller. Writing it twice is harmless.
func (t *Table) Backfill(ctx context.Context, ids []int64, at time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	if t.sqldb != nil {
		tx, err := t.sqldb.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("mailbox: backfill %s: %w", t.name, err)
		}
		defer func() { _ = tx.Rollback() }()
		stmt, err := tx.PrepareContext(ctx, t.q.Get("MarkProcessed"))
		if err != nil {
			return fmt.Errorf("mailbox: backfill %s: %w", t.name, err)
		}
		defer stmt.Close()
		for _, id := range ids {
			if _, err := stmt.ExecContext(ctx, t.datetime(at), t.processed, id); err != nil {
				return fmt.Errorf("mailbox: backfill %s row %d: %w", t.name, id, err)
			}
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("mailbox: backfill %s: %w", t.name, err)
		}
		return nil
	}
	if _, err := t.st.Exec(ctx, t.q.Get("MarkProcessedList"), at, t.processed, t.list(ids)); err != nil {
		return fmt.Errorf("mailbox: backfill %s: %w", t.name, err)
	}
	return nil
}

var _ inbox.TxBackfiller = (*Table)(nil)

// BackfillsIn reports whether the table lives in db (NewStore over db), so
// that its marks can be written in db's transactions; it and BackfillTx
// implement inbox.TxBackfiller. A MySQL mailbox never does.
func (t *Table) BackfillsIn(db *store.DB) bool { return t.st != nil && t.st == db }

// BackfillTx writes the processed mark of the given rows in tx, a
// transaction of the store the table lives in. The write goes through
// ExecBatch, so under store.Defer it travels with the transaction's next
// statement and a failure aborts the transaction.
func (t *Table) BackfillTx(ctx context.Context, tx store.Tx, ids []int64, at time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	if t.st == nil {
		return fmt.Errorf("mailbox: backfill %s: the table is not in the store", t.name)
	}
	if err := tx.ExecBatch(ctx, store.Stmt{SQL: t.q.Get("MarkProcessedList"), Args: []any{at, t.processed, t.list(ids)}}); err != nil {
		return fmt.Errorf("mailbox: backfill %s: %w", t.name, err)
	}
	return nil
}

// list passes ids as the store's dialect takes a list: an array, or JSON text
// for SQLite's json_each.
func (t *Table) list(ids []int64) any {
	if t.dialect == store.SQLite {
		b, _ := json.Marshal(ids) // []int64 always marshals
		return string(b)
	}
	return ids
}

// Drop removes the table (tests).
func (t *Table) Drop(ctx context.Context) error {
	var err error
	if t.sqldb != nil {
		_, err = t.sqldb.ExecContext(ctx, t.q.Get("Drop"))
	} else {
		_, err = t.st.Exec(ctx, t.q.Get("Drop"))
	}
	if err != nil {
		return fmt.Errorf("mailbox: drop %s: %w", t.name, err)
	}
	return nil
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func nullInt(n int64) any {
	if n == 0 {
		return nil
	}
	return n
}
