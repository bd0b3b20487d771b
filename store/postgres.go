package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
	// pending holds SAVEPOINT / RELEASE SAVEPOINT commands not sent yet: they
	// travel in one pipeline with the next statement, so that a savepoint
	// costs no round trip of its own (one per message matters to batch
	// processing), and a savepoint inside which nothing ran costs nothing.
	pending []string
}

// PgxTx returns the pgx transaction behind tx on PostgreSQL (nil elsewhere),
// for pgx features such as batches. Savepoint commands still pending are sent
// first, so that what the caller does lands inside the open savepoints.
func PgxTx(tx Tx) pgx.Tx {
	if t, ok := tx.(*pgTx); ok {
		if len(t.pending) > 0 {
			// An error aborts the transaction, which the caller's next
			// statement reports.
			_, _ = t.tx.Exec(context.Background(), strings.Join(t.pending, "; "))
			t.pending = t.pending[:0]
		}
		return t.tx
	}
	return nil
}

func (t *pgTx) Dialect() Dialect { return Postgres }

// withPending sends the pending savepoint commands and q in one pipeline and
// returns the results positioned at q's.
func (t *pgTx) withPending(ctx context.Context, q string, args []any) (pgx.BatchResults, error) {
	b := &pgx.Batch{}
	for _, p := range t.pending {
		b.Queue(p)
	}
	t.pending = t.pending[:0]
	b.Queue(q, args...)
	br := t.tx.SendBatch(ctx, b)
	for range len(b.QueuedQueries) - 1 {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return nil, fmt.Errorf("store: savepoint: %w", err)
		}
	}
	return br, nil
}

func (t *pgTx) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	if len(t.pending) == 0 {
		tag, err := t.tx.Exec(ctx, q, args...)
		return tag.RowsAffected(), err
	}
	br, err := t.withPending(ctx, q, args)
	if err != nil {
		return 0, err
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag.RowsAffected(), err
}

func (t *pgTx) ExecBatch(ctx context.Context, stmts ...Stmt) error {
	switch len(stmts) {
	case 0:
		return nil
	case 1:
		_, err := t.Exec(ctx, stmts[0].SQL, stmts[0].Args...)
		return err
	}
	b := &pgx.Batch{}
	for _, p := range t.pending {
		b.Queue(p)
	}
	sent := len(t.pending)
	t.pending = t.pending[:0]
	for _, st := range stmts {
		b.Queue(st.SQL, st.Args...)
	}
	br := t.tx.SendBatch(ctx, b)
	var err error
	for i := range len(b.QueuedQueries) {
		if _, err = br.Exec(); err != nil {
			if i < sent {
				err = fmt.Errorf("store: savepoint: %w", err)
			}
			break
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

func (t *pgTx) Query(ctx context.Context, q string, args ...any) (Rows, error) {
	if len(t.pending) == 0 {
		r, err := t.tx.Query(ctx, q, args...)
		if err != nil {
			return nil, err
		}
		return pgRows{r}, nil
	}
	br, err := t.withPending(ctx, q, args)
	if err != nil {
		return nil, err
	}
	r, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	return batchRows{pgRows{r}, br}, nil
}

func (t *pgTx) QueryRow(ctx context.Context, q string, args ...any) Row {
	if len(t.pending) == 0 {
		return pgRow{t.tx.QueryRow(ctx, q, args...)}
	}
	br, err := t.withPending(ctx, q, args)
	if err != nil {
		return errRow{err}
	}
	return batchRow{br}
}

func (t *pgTx) Savepoint(ctx context.Context, fn func(ctx context.Context) error) error {
	name := fmt.Sprintf("msgx_sp_%d", t.sp.Add(1))
	cmd := "SAVEPOINT " + name
	t.pending = append(t.pending, cmd)
	at := len(t.pending) - 1
	err := fn(ctx)
	if at < len(t.pending) && t.pending[at] == cmd {
		// Nothing was sent since: the savepoint was never needed. Names are
		// unique in a transaction, so the entry is ours.
		t.pending = t.pending[:at]
		return err
	}
	if err != nil {
		// Commands queued after the savepoint concern savepoints inside it,
		// which the rollback removes.
		t.pending = t.pending[:0]
		if _, rbErr := t.tx.Exec(context.WithoutCancel(ctx), "ROLLBACK TO SAVEPOINT "+name); rbErr != nil {
			return errors.Join(err, fmt.Errorf("store: rollback to savepoint: %w", rbErr))
		}
		return err
	}
	t.pending = append(t.pending, "RELEASE SAVEPOINT "+name)
	return nil
}

// commit drops pending releases: COMMIT releases every savepoint.
func (t *pgTx) commit(ctx context.Context) error {
	t.pending = nil
	return t.tx.Commit(ctx)
}

func (t *pgTx) rollback(ctx context.Context) error {
	t.pending = nil
	return t.tx.Rollback(ctx)
}

// batchRows closes the pipeline that produced the rows with them.
type batchRows struct {
	pgRows
	br pgx.BatchResults
}

func (r batchRows) Close() {
	r.pgRows.Close()
	_ = r.br.Close()
}

// batchRow is QueryRow's result read from a pipeline.
type batchRow struct{ br pgx.BatchResults }

func (r batchRow) Scan(dest ...any) error {
	err := pgRow{r.br.QueryRow()}.Scan(dest...)
	if cerr := r.br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	return err
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

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
