package store

import (
	"context"
	"errors"
)

// ErrDeferredFailed matches the error of a statement that Defer held back and
// that failed when it was sent.
var ErrDeferredFailed = errors.New("store: held-back statement failed")

// DeferredError is the failure of a held-back statement. The server aborted
// the transaction with it: every later statement and the commit return it,
// and only the rollback of the whole transaction remains.
type DeferredError struct{ err error }

func (e *DeferredError) Error() string        { return ErrDeferredFailed.Error() + ": " + e.err.Error() }
func (e *DeferredError) Unwrap() error        { return e.err }
func (e *DeferredError) Is(target error) bool { return target == ErrDeferredFailed }

// deferrer is a transaction that can hold writes back.
type deferrer interface {
	deferWrites(ctx context.Context, fn func(ctx context.Context) error) error
}

// Defer runs fn with tx's ExecBatch statements held back: on PostgreSQL they
// reach the server in one pipeline with the next statement that returns an
// answer (Exec, Query, QueryRow), or when Defer returns, so that writers that
// only write — one per message of a batch — cost one round trip together
// instead of one each. Savepoints keep their meaning: a savepoint whose fn
// fails drops what it held back.
//
// The price is where a failure shows: ExecBatch reports none, and a held-back
// statement that fails is reported, as an error matching ErrDeferredFailed, by
// the statement that sent it or by Defer. The transaction is then aborted as
// a whole; callers that must know which write failed run again without Defer.
//
// Where statements cost no round trip (SQLite), Defer just runs fn.
func Defer(ctx context.Context, tx Tx, fn func(ctx context.Context) error) error {
	if d, ok := tx.(deferrer); ok {
		return d.deferWrites(ctx, fn)
	}
	return fn(ctx)
}

// holder is a transaction that can hold statements back for its commit.
type holder interface {
	hold(stmts []Stmt) error
}

// Hold queues stmts to reach the server with tx's next statement that returns
// an answer or with its COMMIT, whichever comes first, in one pipeline: a
// write whose result nobody reads (a logical decoding message, say) then
// costs no round trip of its own. Like Defer's, a held statement that fails
// aborts the transaction and is reported, as an error matching
// ErrDeferredFailed, by the statement that sent it or by the commit.
//
// Where statements cost no round trip (SQLite), Hold runs them at once.
func Hold(ctx context.Context, tx Tx, stmts ...Stmt) error {
	if h, ok := tx.(holder); ok {
		return h.hold(stmts)
	}
	return tx.ExecBatch(ctx, stmts...)
}
