package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

type pgBackend struct {
	pool *pgxpool.Pool
	// side are the pools SessionPool opened, closed with this one.
	mu   sync.Mutex
	side []*pgxpool.Pool
}

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
func (b *pgBackend) close() {
	b.mu.Lock()
	side := b.side
	b.side = nil
	b.mu.Unlock()
	for _, p := range side {
		p.Close()
	}
	b.pool.Close()
}

// SessionPool opens a second pool on the server of a PostgreSQL database,
// with the store's connection settings (DSN, credentials, TLS, search_path),
// at most maxConns connections and the session settings given (run-time
// parameters; application_name is set only where the DSN sets none). It is
// for work whose sessions must differ from the business transactions': the
// outbox relay commits asynchronously and plans with its own settings, which
// must not reach the callers' transactions. Close closes it too; closing it
// earlier is allowed.
func (db *DB) SessionPool(ctx context.Context, maxConns int32, settings map[string]string) (*pgxpool.Pool, error) {
	b, ok := db.b.(*pgBackend)
	if !ok {
		return nil, fmt.Errorf("store: a session pool needs PostgreSQL, not %s", db.dialect)
	}
	cfg := b.pool.Config()
	cfg.MaxConns = maxConns
	cfg.MinConns = 0
	params := maps.Clone(cfg.ConnConfig.RuntimeParams)
	if params == nil {
		params = map[string]string{}
	}
	for k, v := range settings {
		if k == "application_name" && params[k] != "" {
			continue
		}
		params[k] = v
	}
	cfg.ConnConfig.RuntimeParams = params
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("store: session pool: %w", err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.side = append(b.side, p)
	return p, nil
}

// begin opens the transaction on a connection of its own rather than with
// pool.Begin, so that commit may send COMMIT in a pipeline with the statements
// held back for it (Hold) and still give the connection back: a pool
// transaction returns its connection only from its own Commit or Rollback.
func (b *pgBackend) begin(ctx context.Context) (txBackend, error) {
	c, err := b.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	tx, err := c.Begin(ctx)
	if err != nil {
		c.Release()
		return nil, err
	}
	return &pgTx{tx: tx, conn: c}, nil
}

type pgTx struct {
	commitHooks
	tx   pgx.Tx
	conn *pgxpool.Conn
	// ended is set once a pipeline carried COMMIT: the server ended the
	// transaction, though tx does not know it.
	ended bool
	// depth is the number of open savepoints; it names them, so that the
	// commands are the same few texts (prepared once) in every transaction,
	// and seq tells this transaction's savepoints apart in pending.
	depth int
	seq   int64
	// pending holds what is not sent yet: SAVEPOINT / RELEASE SAVEPOINT
	// commands, which travel in one pipeline with the next statement, so that
	// a savepoint costs no round trip of its own (one per message matters to
	// batch processing) and a savepoint inside which nothing ran costs
	// nothing; and, under Defer, the statements of ExecBatch.
	pending []queued
	// deferring counts the Defer calls in progress.
	deferring int
	// broken is the failure of a held-back statement: the server aborted the
	// transaction, so every later statement and the commit fail with it.
	broken error
}

// queued is a pending command; deferred marks a held-back ExecBatch
// statement, sp the SAVEPOINT command of savepoint number sp.
type queued struct {
	sql      string
	args     []any
	deferred bool
	sp       int64
}

// PgxTx returns the pgx transaction behind tx on PostgreSQL (nil elsewhere),
// for pgx features such as batches. What is still pending is sent first, so
// that what the caller does lands inside the open savepoints, after the
// held-back writes.
func PgxTx(tx Tx) pgx.Tx {
	if t, ok := tx.(*pgTx); ok {
		// A failure aborts the transaction, which the caller's next
		// statement reports.
		_ = t.flush(context.Background())
		return t.tx
	}
	return nil
}

func (t *pgTx) Dialect() Dialect { return Postgres }

// send sends the pending commands and qs in one pipeline and returns the
// results positioned at qs'. A held-back statement that fails breaks the
// transaction.
func (t *pgTx) send(ctx context.Context, qs ...Stmt) (pgx.BatchResults, error) {
	if t.broken != nil {
		return nil, t.broken
	}
	b := &pgx.Batch{}
	for _, p := range t.pending {
		b.Queue(p.sql, p.args...)
	}
	for _, q := range qs {
		b.Queue(q.SQL, q.Args...)
	}
	sent := t.pending
	t.pending = t.pending[:0]
	br := t.tx.SendBatch(ctx, b)
	for _, p := range sent {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			if p.deferred {
				t.broken = &DeferredError{err: err}
				return nil, t.broken
			}
			return nil, fmt.Errorf("store: savepoint: %w", err)
		}
	}
	return br, nil
}

// flush sends what is pending, if anything.
func (t *pgTx) flush(ctx context.Context) error {
	if t.broken != nil {
		return t.broken
	}
	if len(t.pending) == 0 {
		return nil
	}
	br, err := t.send(ctx)
	if err != nil {
		return err
	}
	return br.Close()
}

func (t *pgTx) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	if len(t.pending) == 0 && t.broken == nil {
		tag, err := t.tx.Exec(ctx, q, args...)
		return tag.RowsAffected(), err
	}
	br, err := t.send(ctx, Stmt{SQL: q, Args: args})
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
	if t.broken != nil {
		return t.broken
	}
	if t.deferring > 0 {
		return t.hold(stmts)
	}
	switch len(stmts) {
	case 0:
		return nil
	case 1:
		_, err := t.Exec(ctx, stmts[0].SQL, stmts[0].Args...)
		return err
	}
	br, err := t.send(ctx, stmts...)
	if err != nil {
		return err
	}
	for range stmts {
		if _, err = br.Exec(); err != nil {
			break
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

func (t *pgTx) Query(ctx context.Context, q string, args ...any) (Rows, error) {
	if len(t.pending) == 0 && t.broken == nil {
		r, err := t.tx.Query(ctx, q, args...)
		if err != nil {
			return nil, err
		}
		return pgRows{r}, nil
	}
	br, err := t.send(ctx, Stmt{SQL: q, Args: args})
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
	if len(t.pending) == 0 && t.broken == nil {
		return pgRow{t.tx.QueryRow(ctx, q, args...)}
	}
	br, err := t.send(ctx, Stmt{SQL: q, Args: args})
	if err != nil {
		return errRow{err}
	}
	return batchRow{br}
}

func (t *pgTx) Savepoint(ctx context.Context, fn func(ctx context.Context) error) error {
	// A name reused by a later savepoint at the same depth is fine: the
	// earlier one is released or rolled back by then.
	t.depth++
	defer func() { t.depth-- }()
	t.seq++
	name := "msgx_sp_" + strconv.Itoa(t.depth)
	sp := t.seq
	t.pending = append(t.pending, queued{sql: "SAVEPOINT " + name, sp: sp})
	at := len(t.pending) - 1
	err := fn(ctx)
	if at < len(t.pending) && t.pending[at].sp == sp {
		// Not sent yet: what fn queued after it never reached the server
		// either.
		if err != nil || at == len(t.pending)-1 {
			// A failure undoes what fn queued by dropping it; an empty
			// savepoint was never needed.
			t.pending = t.pending[:at]
			return err
		}
		t.pending = append(t.pending, queued{sql: "RELEASE SAVEPOINT " + name})
		return nil
	}
	if err != nil {
		if t.broken != nil {
			// The server aborted the transaction; there is no savepoint to
			// return to, only the rollback of the whole.
			t.pending = t.pending[:0]
			return errors.Join(err, t.broken)
		}
		// Commands queued after the savepoint concern savepoints inside it,
		// or writes it held back, which the rollback removes.
		t.pending = t.pending[:0]
		if _, rbErr := t.tx.Exec(context.WithoutCancel(ctx), "ROLLBACK TO SAVEPOINT "+name); rbErr != nil {
			return errors.Join(err, fmt.Errorf("store: rollback to savepoint: %w", rbErr))
		}
		return err
	}
	t.pending = append(t.pending, queued{sql: "RELEASE SAVEPOINT " + name})
	return nil
}

// deferWrites holds ExecBatch statements back while fn runs and sends what
// is still held when it returns.
func (t *pgTx) deferWrites(ctx context.Context, fn func(ctx context.Context) error) error {
	t.deferring++
	err := fn(ctx)
	t.deferring--
	if err != nil {
		if t.broken != nil && !errors.Is(err, t.broken) {
			err = errors.Join(err, t.broken)
		}
		return err
	}
	if t.deferring == 0 && slices.ContainsFunc(t.pending, func(q queued) bool { return q.deferred }) {
		return t.flush(ctx)
	}
	return t.broken
}

// hold queues stmts to travel with the next statement or the commit.
func (t *pgTx) hold(stmts []Stmt) error {
	if t.broken != nil {
		return t.broken
	}
	for _, st := range stmts {
		t.pending = append(t.pending, queued{sql: st.SQL, args: st.Args, deferred: true})
	}
	return nil
}

// commit sends the held-back writes and COMMIT in one pipeline; without
// them, pending releases are dropped, since COMMIT releases every savepoint.
// The connection goes back to the pool unless the transaction is still open
// (a failed commit): rollback gives it back then.
func (t *pgTx) commit(ctx context.Context) error {
	if t.broken != nil {
		return t.broken
	}
	if !slices.ContainsFunc(t.pending, func(q queued) bool { return q.deferred }) {
		t.pending = nil
		if err := t.tx.Commit(ctx); err != nil {
			return err
		}
		t.release()
		return nil
	}
	br, err := t.send(ctx, Stmt{SQL: "COMMIT"})
	if err != nil {
		return err // the transaction is aborted: rollback ends it
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	t.ended = true
	t.release()
	if tag.String() == "ROLLBACK" {
		return pgx.ErrTxCommitRollback
	}
	return nil
}

func (t *pgTx) rollback(ctx context.Context) error {
	t.pending = nil
	defer t.release()
	if t.ended {
		return nil
	}
	if err := t.tx.Rollback(ctx); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
		return err
	}
	return nil // rolled back, or ended already by a failed commit
}

// release gives the connection back to the pool, once; the pool closes it
// instead if a transaction is still open on it.
func (t *pgTx) release() {
	if t.conn != nil {
		t.conn.Release()
		t.conn = nil
	}
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
