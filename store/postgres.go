package store

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

type pgBackend struct{ pool *pgxpool.Pool }

func openPostgres(ctx context.Context, dsn string, o options) (backend, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	if o.maxConns > 0 {
		cfg.MaxConns = o.maxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &pgBackend{pool: pool}, nil
}

// Pool exposes the pgx pool of a PostgreSQL database for code that needs pgx
// features (batches, COPY, LISTEN); it is nil on other dialects.
func (db *DB) Pool() *pgxpool.Pool {
	if b, ok := db.b.(*pgBackend); ok {
		return b.pool
	}
	return nil
}

func (b *pgBackend) Dialect() Dialect { return Postgres }

func (b *pgBackend) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	tag, err := b.pool.Exec(ctx, q, args...)
	return tag.RowsAffected(), err
}

func (b *pgBackend) Query(ctx context.Context, q string, args ...any) (Rows, error) {
	r, err := b.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return pgRows{r}, nil
}

func (b *pgBackend) QueryRow(ctx context.Context, q string, args ...any) Row {
	return pgRow{b.pool.QueryRow(ctx, q, args...)}
}

func (b *pgBackend) ping(ctx context.Context) error { return b.pool.Ping(ctx) }
func (b *pgBackend) close()                         { b.pool.Close() }

func (b *pgBackend) begin(ctx context.Context) (txBackend, error) {
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &pgTx{tx: tx}, nil
}

type pgTx struct {
	tx pgx.Tx
	sp atomic.Int64
}

// PgxTx returns the pgx transaction behind tx on PostgreSQL (nil elsewhere),
// for pgx features such as batches.
func PgxTx(tx Tx) pgx.Tx {
	if t, ok := tx.(*pgTx); ok {
		return t.tx
	}
	return nil
}

func (t *pgTx) Dialect() Dialect { return Postgres }

func (t *pgTx) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	tag, err := t.tx.Exec(ctx, q, args...)
	return tag.RowsAffected(), err
}

func (t *pgTx) Query(ctx context.Context, q string, args ...any) (Rows, error) {
	r, err := t.tx.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return pgRows{r}, nil
}

func (t *pgTx) QueryRow(ctx context.Context, q string, args ...any) Row {
	return pgRow{t.tx.QueryRow(ctx, q, args...)}
}

func (t *pgTx) Savepoint(ctx context.Context, fn func(ctx context.Context) error) error {
	name := fmt.Sprintf("msgx_sp_%d", t.sp.Add(1))
	if _, err := t.tx.Exec(ctx, "SAVEPOINT "+name); err != nil {
		return fmt.Errorf("store: savepoint: %w", err)
	}
	if err := fn(ctx); err != nil {
		if _, rbErr := t.tx.Exec(context.WithoutCancel(ctx), "ROLLBACK TO SAVEPOINT "+name); rbErr != nil {
			return errors.Join(err, fmt.Errorf("store: rollback to savepoint: %w", rbErr))
		}
		return err
	}
	if _, err := t.tx.Exec(ctx, "RELEASE SAVEPOINT "+name); err != nil {
		return fmt.Errorf("store: release savepoint: %w", err)
	}
	return nil
}

func (t *pgTx) commit(ctx context.Context) error   { return t.tx.Commit(ctx) }
func (t *pgTx) rollback(ctx context.Context) error { return t.tx.Rollback(ctx) }

type pgRows struct{ r pgx.Rows }

func (r pgRows) Next() bool             { return r.r.Next() }
func (r pgRows) Scan(dest ...any) error { return r.r.Scan(dest...) }
func (r pgRows) Err() error             { return r.r.Err() }
func (r pgRows) Close()                 { r.r.Close() }

type pgRow struct{ r pgx.Row }

func (r pgRow) Scan(dest ...any) error {
	if err := r.r.Scan(dest...); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNoRows
		}
		return err
	}
	return nil
}

// IsUniqueViolation reports whether err is a unique-constraint violation.
func IsUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code == "23505"
	}
	return isSQLiteUnique(err)
}
