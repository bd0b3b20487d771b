package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

type sqliteBackend struct{ db *sql.DB }

func openSQLite(_ context.Context, path string) (backend, error) {
	if path == "" {
		return nil, errors.New("empty sqlite path")
	}
	q := url.Values{}
	for _, p := range []string{"busy_timeout(10000)", "foreign_keys(1)", "synchronous(FULL)"} {
		q.Add("_pragma", p)
	}
	dsn := "file:" + path
	if path == ":memory:" {
		dsn = "file::memory:"
	} else {
		q.Add("_pragma", "journal_mode(WAL)")
	}
	q.Set("_txlock", "immediate") // writers queue at BEGIN instead of failing on upgrade
	db, err := sql.Open("sqlite", dsn+"?"+q.Encode())
	if err != nil {
		return nil, err
	}
	// SQLite has one writer; one connection serialises the process's work on it
	// and keeps an in-memory database a single database.
	db.SetMaxOpenConns(1)
	return &sqliteBackend{db: db}, nil
}

// SQLDB exposes the database/sql handle of an SQLite database; nil elsewhere.
func (db *DB) SQLDB() *sql.DB {
	if b, ok := db.b.(*sqliteBackend); ok {
		return b.db
	}
	return nil
}

type sqlRunner interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func sqliteExec(ctx context.Context, r sqlRunner, q string, args []any) (int64, error) {
	res, err := r.ExecContext(ctx, q, convertArgs(args)...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func sqliteQuery(ctx context.Context, r sqlRunner, q string, args []any) (Rows, error) {
	rows, err := r.QueryContext(ctx, q, convertArgs(args)...)
	if err != nil {
		return nil, err
	}
	return &sqliteRows{r: rows}, nil
}

func (b *sqliteBackend) Dialect() Dialect { return SQLite }
func (b *sqliteBackend) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	return sqliteExec(ctx, b.db, q, args)
}
func (b *sqliteBackend) Query(ctx context.Context, q string, args ...any) (Rows, error) {
	return sqliteQuery(ctx, b.db, q, args)
}
func (b *sqliteBackend) QueryRow(ctx context.Context, q string, args ...any) Row {
	return sqliteRow{b.db.QueryRowContext(ctx, q, convertArgs(args)...)}
}
func (b *sqliteBackend) ping(ctx context.Context) error { return b.db.PingContext(ctx) }
func (b *sqliteBackend) close()                         { _ = b.db.Close() }

func (b *sqliteBackend) begin(ctx context.Context) (txBackend, error) {
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	return &sqliteTx{tx: tx}, nil
}

type sqliteTx struct {
	commitHooks
	tx *sql.Tx
	sp atomic.Int64
}

func (t *sqliteTx) Dialect() Dialect { return SQLite }
func (t *sqliteTx) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	return sqliteExec(ctx, t.tx, q, args)
}
func (t *sqliteTx) Query(ctx context.Context, q string, args ...any) (Rows, error) {
	return sqliteQuery(ctx, t.tx, q, args)
}
func (t *sqliteTx) QueryRow(ctx context.Context, q string, args ...any) Row {
	return sqliteRow{t.tx.QueryRowContext(ctx, q, convertArgs(args)...)}
}

func (t *sqliteTx) ExecBatch(ctx context.Context, stmts ...Stmt) error {
	for _, st := range stmts {
		if _, err := t.Exec(ctx, st.SQL, st.Args...); err != nil {
			return err
		}
	}
	return nil
}

func (t *sqliteTx) Savepoint(ctx context.Context, fn func(ctx context.Context) error) error {
	name := fmt.Sprintf("msgx_sp_%d", t.sp.Add(1))
	if _, err := t.tx.ExecContext(ctx, "SAVEPOINT "+name); err != nil {
		return fmt.Errorf("store: savepoint: %w", err)
	}
	if err := fn(ctx); err != nil {
		// ROLLBACK TO keeps the savepoint open; RELEASE then removes it.
		if _, rbErr := t.tx.ExecContext(context.WithoutCancel(ctx), "ROLLBACK TO SAVEPOINT "+name+"; RELEASE SAVEPOINT "+name); rbErr != nil {
			return errors.Join(err, fmt.Errorf("store: rollback to savepoint: %w", rbErr))
		}
		return err
	}
	if _, err := t.tx.ExecContext(ctx, "RELEASE SAVEPOINT "+name); err != nil {
		return fmt.Errorf("store: release savepoint: %w", err)
	}
	return nil
}

func (t *sqliteTx) commit(context.Context) error { return t.tx.Commit() }
func (t *sqliteTx) rollback(context.Context) error {
	if err := t.tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
		return err
	}
	return nil // rolled back, or ended already by a failed commit
}

// convertArgs stores times as Unix microseconds.
func convertArgs(args []any) []any {
	var out []any
	for i, a := range args {
		var v any
		switch t := a.(type) {
		case time.Time:
			v = micros(t)
		case *time.Time:
			if t == nil {
				v = nil
			} else {
				v = micros(*t)
			}
		default:
			continue
		}
		if out == nil {
			out = append([]any(nil), args...)
		}
		out[i] = v
	}
	if out == nil {
		return args
	}
	return out
}

// scanTargets swaps time targets for integer ones and returns a function that
// converts them back after the scan.
func scanTargets(dest []any) ([]any, func()) {
	var fix []func()
	var out []any
	for i, d := range dest {
		switch t := d.(type) {
		case *time.Time:
			var n sql.NullInt64
			fix = append(fix, func() {
				if n.Valid {
					*t = fromMicros(n.Int64)
				} else {
					*t = time.Time{}
				}
			})
			if out == nil {
				out = append([]any(nil), dest...)
			}
			out[i] = &n
		case **time.Time:
			var n sql.NullInt64
			fix = append(fix, func() {
				if n.Valid {
					v := fromMicros(n.Int64)
					*t = &v
				} else {
					*t = nil
				}
			})
			if out == nil {
				out = append([]any(nil), dest...)
			}
			out[i] = &n
		}
	}
	if out == nil {
		return dest, func() {}
	}
	return out, func() {
		for _, f := range fix {
			f()
		}
	}
}

type sqliteRows struct {
	r *sql.Rows
}

func (r *sqliteRows) Next() bool { return r.r.Next() }
func (r *sqliteRows) Scan(dest ...any) error {
	d, fix := scanTargets(dest)
	if err := r.r.Scan(d...); err != nil {
		return err
	}
	fix()
	return nil
}
func (r *sqliteRows) Err() error { return r.r.Err() }
func (r *sqliteRows) Close()     { _ = r.r.Close() }

type sqliteRow struct{ r *sql.Row }

func (r sqliteRow) Scan(dest ...any) error {
	d, fix := scanTargets(dest)
	if err := r.r.Scan(d...); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNoRows
		}
		return err
	}
	fix()
	return nil
}

func isSQLiteUnique(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) {
		return se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
	}
	return err != nil && strings.Contains(err.Error(), "UNIQUE constraint failed")
}
