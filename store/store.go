// Package store is msgx's database access: open by DSN (PostgreSQL through a
// pgx pool for production, SQLite through modernc.org/sqlite for the embedded
// default), the runner of the migration lines that the packages owning tables
// embed (Line, DB.Migrate), and the transaction helper that business code uses
// to write state and enqueue events together.
//
// Callers write SQL per dialect (kept in .sql files next to the package that
// owns the tables) and run it through the small Querier interface, which both
// dialects implement with the same Go types: on SQLite, time.Time arguments and
// scan targets are stored as INTEGER Unix microseconds so that comparisons and
// ordering are exact.
package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// Dialect names a database family.
type Dialect string

// The supported dialects.
const (
	Postgres Dialect = "postgres"
	SQLite   Dialect = "sqlite"
)

// Querier runs SQL. Tx and DB implement it.
type Querier interface {
	// Exec runs a statement and returns the number of rows it affected.
	Exec(ctx context.Context, query string, args ...any) (int64, error)
	Query(ctx context.Context, query string, args ...any) (Rows, error)
	QueryRow(ctx context.Context, query string, args ...any) Row
	Dialect() Dialect
}

// Rows is a result set; Close it when done (it is safe to call twice).
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// Row is a single-row result; Scan returns ErrNoRows when there is none.
type Row interface {
	Scan(dest ...any) error
}

// ErrNoRows is returned by Row.Scan when the query selected nothing.
var ErrNoRows = errors.New("store: no rows")

// Stmt is one statement of a batch.
type Stmt struct {
	SQL  string
	Args []any
}

// Tx is an open transaction.
type Tx interface {
	Querier
	// ExecBatch runs statements in order, on PostgreSQL in one round trip (a
	// pipeline), elsewhere one by one. The first failure stops the batch and is
	// returned; what ran before it stays in the transaction, so callers that
	// need all-or-nothing run it inside a Savepoint.
	ExecBatch(ctx context.Context, stmts ...Stmt) error
	// Savepoint runs fn inside a savepoint: if fn returns an error, only what fn
	// did is rolled back and the transaction stays usable.
	Savepoint(ctx context.Context, fn func(ctx context.Context) error) error
}

// backend is what each dialect implements.
type backend interface {
	Querier
	begin(ctx context.Context) (txBackend, error)
	ping(ctx context.Context) error
	close()
}

type txBackend interface {
	Tx
	commit(ctx context.Context) error
	rollback(ctx context.Context) error
}

// DB is an open database.
type DB struct {
	b       backend
	dialect Dialect
	log     *slog.Logger
	dsn     string
	shared  shared
}

type options struct {
	logger   *slog.Logger
	maxConns int32
	migrate  []Line
}

// Option configures Open.
type Option func(*options)

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithMaxConns bounds the PostgreSQL pool (default: pgx's default, or
// pool_max_conns in the DSN).
func WithMaxConns(n int32) Option { return func(o *options) { o.maxConns = n } }

// WithMigrate applies the migration lines (and those they require) during
// Open, as DB.Migrate does (default none).
func WithMigrate(lines ...Line) Option {
	return func(o *options) { o.migrate = append(o.migrate, lines...) }
}

// Open opens a database by DSN: "postgres://…" / "postgresql://…" (pgx DSN;
// extra parameters such as search_path become session settings) or
// "sqlite:PATH" ("sqlite::memory:" for a private in-memory database).
func Open(ctx context.Context, dsn string, opts ...Option) (*DB, error) {
	o := options{logger: slog.Default()}
	for _, opt := range opts {
		opt(&o)
	}
	var (
		b   backend
		d   Dialect
		err error
	)
	switch {
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		d = Postgres
		b, err = openPostgres(ctx, dsn, o)
	case strings.HasPrefix(dsn, "sqlite:"):
		d = SQLite
		b, err = openSQLite(ctx, strings.TrimPrefix(dsn, "sqlite:"))
	default:
		return nil, fmt.Errorf("store: unsupported DSN %q (want postgres://… or sqlite:PATH)", redact(dsn))
	}
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", d, err)
	}
	db := &DB{b: b, dialect: d, log: o.logger, dsn: dsn}
	if err := b.ping(ctx); err != nil {
		b.close()
		return nil, fmt.Errorf("store: ping %s: %w", d, err)
	}
	if len(o.migrate) > 0 {
		if err := db.Migrate(ctx, o.migrate...); err != nil {
			b.close()
			return nil, err
		}
	}
	return db, nil
}

// redact hides a password in a DSN for error messages.
func redact(dsn string) string {
	if i := strings.Index(dsn, "@"); i > 0 {
		if j := strings.Index(dsn, "://"); j > 0 && j < i {
			return dsn[:j+3] + "…" + dsn[i:]
		}
	}
	return dsn
}

// Dialect reports the database family.
func (db *DB) Dialect() Dialect { return db.dialect }

// Exec implements Querier outside any transaction.
func (db *DB) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	return db.b.Exec(ctx, query, args...)
}

// Query implements Querier outside any transaction.
func (db *DB) Query(ctx context.Context, query string, args ...any) (Rows, error) {
	return db.b.Query(ctx, query, args...)
}

// QueryRow implements Querier outside any transaction.
func (db *DB) QueryRow(ctx context.Context, query string, args ...any) Row {
	return db.b.QueryRow(ctx, query, args...)
}

// Ping checks the database is reachable (health endpoints use it).
func (db *DB) Ping(ctx context.Context) error { return db.b.ping(ctx) }

// Close releases the connections (and closes the Shared values).
func (db *DB) Close() {
	db.closeShared()
	db.b.close()
}

// InTx runs fn in one transaction and commits it if fn returns nil; otherwise,
// or if fn panics, it rolls back. A failed commit is returned: nothing fn wrote
// is then kept.
func (db *DB) InTx(ctx context.Context, fn func(ctx context.Context, tx Tx) error) (err error) {
	tx, err := db.b.begin(ctx)
	if err != nil {
		return fmt.Errorf("store: begin: %w", err)
	}
	defer func() {
		if p := recover(); p != nil {
			_ = tx.rollback(context.WithoutCancel(ctx))
			panic(p)
		}
		if err != nil {
			if rbErr := tx.rollback(context.WithoutCancel(ctx)); rbErr != nil {
				db.log.Warn("rollback failed", "err", rbErr)
			}
		}
	}()
	if h, ok := tx.(hooked); ok {
		h.setDB(db)
	}
	if err = fn(ctx, tx); err != nil {
		return err
	}
	if err = tx.commit(ctx); err != nil {
		return fmt.Errorf("store: commit: %w", err)
	}
	if h, ok := tx.(hooked); ok {
		for _, fn := range h.commitHookList() {
			fn(db)
		}
	}
	return nil
}

// micros converts a time to the SQLite storage form.
func micros(t time.Time) int64 { return t.UnixMicro() }

func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }
