package store

import (
	"io"
	"slices"
	"sync"
)

// commitHooks are what a transaction runs once it has committed (OnCommit).
type commitHooks struct {
	keys []any
	fns  []func(*DB)
	// db is the handle whose InTx opened the transaction (DBOf).
	db *DB
}

func (h *commitHooks) setDB(db *DB) { h.db = db }

func (h *commitHooks) txDB() *DB { return h.db }

func (h *commitHooks) addCommitHook(key any, fn func(*DB)) {
	if slices.Contains(h.keys, key) {
		return
	}
	h.keys = append(h.keys, key)
	h.fns = append(h.fns, fn)
}

func (h *commitHooks) commitHookList() []func(*DB) { return h.fns }

type hooked interface {
	addCommitHook(key any, fn func(*DB))
	commitHookList() []func(*DB)
	setDB(db *DB)
	txDB() *DB
}

// DBOf returns the DB handle whose InTx opened tx, or nil for a transaction
// that no InTx opened: what packages read per handle (Shared) while they
// write in a caller's transaction, such as the outbox's mode.
func DBOf(tx Tx) *DB {
	if h, ok := tx.(hooked); ok {
		return h.txDB()
	}
	return nil
}

// OnCommit registers fn to run, with the transaction's DB, right after tx
// has committed (never when it rolls back), once per key however often it is
// registered. Only transactions of DB.InTx run hooks; OnCommit reports
// whether tx does. Hooks run in the committing goroutine: keep them short
// (a wake-up, not a statement). A hook registered inside a savepoint that
// rolled back still runs.
func OnCommit(tx Tx, key any, fn func(db *DB)) bool {
	h, ok := tx.(hooked)
	if ok {
		h.addCommitHook(key, fn)
	}
	return ok
}

// shared holds values that belong to a DB handle (Shared).
type shared struct {
	mu     sync.Mutex
	values map[any]any
}

// Shared returns the value of the DB handle under key, made by mk on first
// use: state that packages keep per database handle (such as the outbox's
// commit bell) without a global. Values that are io.Closers are closed by
// Close.
func (db *DB) Shared(key any, mk func() any) any {
	db.shared.mu.Lock()
	defer db.shared.mu.Unlock()
	if v, ok := db.shared.values[key]; ok {
		return v
	}
	if db.shared.values == nil {
		db.shared.values = map[any]any{}
	}
	v := mk()
	db.shared.values[key] = v
	return v
}

func (db *DB) closeShared() {
	db.shared.mu.Lock()
	vs := db.shared.values
	db.shared.values = nil
	db.shared.mu.Unlock()
	for _, v := range vs {
		if c, ok := v.(io.Closer); ok {
			_ = c.Close()
		}
	}
}
