package store_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// TestDeferHoldsWritesBackWithSavepointMeaning: held-back writes are seen by
// the next read, a failing savepoint drops what it held back, and what Defer
// held is in the transaction when it returns.
func TestDeferHoldsWritesBackWithSavepointMeaning(t *testing.T) {
	storetest.Each(t, nil, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		q := dialectSQL(db)
		if _, err := db.Exec(ctx, "CREATE TABLE df (v INTEGER PRIMARY KEY)"); err != nil {
			t.Fatal(err)
		}
		ins := func(v int) store.Stmt { return store.Stmt{SQL: q("INSERT INTO df (v) VALUES ($1)"), Args: []any{v}} }
		boom := errors.New("boom")
		err := db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
			return store.Defer(ctx, tx, func(ctx context.Context) error {
				// Kept: two writers, each in its savepoint.
				for _, v := range []int{1, 2} {
					if err := tx.Savepoint(ctx, func(ctx context.Context) error { return tx.ExecBatch(ctx, ins(v)) }); err != nil {
						return err
					}
				}
				// Dropped: fails after queueing its write.
				if err := tx.Savepoint(ctx, func(ctx context.Context) error {
					if err := tx.ExecBatch(ctx, ins(3)); err != nil {
						return err
					}
					return boom
				}); !errors.Is(err, boom) {
					t.Errorf("failing savepoint: %v", err)
				}
				// A read sees the held-back writes before it, and sends them.
				var n int
				if err := tx.QueryRow(ctx, "SELECT COUNT(*) FROM df").Scan(&n); err != nil || n != 2 {
					t.Errorf("count inside Defer = %d, %v; want 2", n, err)
				}
				// Dropped after its savepoint was sent by a read inside it.
				if err := tx.Savepoint(ctx, func(ctx context.Context) error {
					if err := tx.ExecBatch(ctx, ins(4)); err != nil {
						return err
					}
					var n int
					if err := tx.QueryRow(ctx, "SELECT COUNT(*) FROM df").Scan(&n); err != nil || n != 3 {
						t.Errorf("count inside savepoint = %d, %v; want 3", n, err)
					}
					return tx.ExecBatch(ctx, ins(5), ins(6))
				}); err != nil {
					return err
				}
				if err := tx.Savepoint(ctx, func(ctx context.Context) error {
					if err := tx.ExecBatch(ctx, ins(7)); err != nil {
						return err
					}
					var n int
					if err := tx.QueryRow(ctx, "SELECT COUNT(*) FROM df").Scan(&n); err != nil || n != 6 {
						t.Errorf("count inside savepoint = %d, %v; want 6", n, err)
					}
					return tx.ExecBatch(ctx, ins(8))
				}); err != nil {
					return err
				}
				// Held back until Defer returns.
				return tx.ExecBatch(ctx, ins(9))
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := values(t, db, "df"); got != "1,2,4,5,6,7,8,9" {
			t.Errorf("committed %s", got)
		}
	})
}

// TestDeferredFailureAbortsTheTransaction: a held-back write that fails is
// reported by what sends it, as ErrDeferredFailed on PostgreSQL, and nothing
// of the transaction is kept.
func TestDeferredFailureAbortsTheTransaction(t *testing.T) {
	storetest.Each(t, nil, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		q := dialectSQL(db)
		if _, err := db.Exec(ctx, "CREATE TABLE dff (v INTEGER PRIMARY KEY)"); err != nil {
			t.Fatal(err)
		}
		ins := func(v int) store.Stmt { return store.Stmt{SQL: q("INSERT INTO dff (v) VALUES ($1)"), Args: []any{v}} }
		for _, how := range []string{"read", "defer-end", "commit"} {
			t.Run(how, func(t *testing.T) {
				var seen error
				err := db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
					derr := store.Defer(ctx, tx, func(ctx context.Context) error {
						if err := tx.Savepoint(ctx, func(ctx context.Context) error { return tx.ExecBatch(ctx, ins(1)) }); err != nil {
							return err
						}
						err := tx.Savepoint(ctx, func(ctx context.Context) error { return tx.ExecBatch(ctx, ins(1)) })
						if db.Dialect() != store.Postgres {
							// Sent at once: the savepoint reports it and undoes it alone.
							if !store.IsUniqueViolation(err) {
								t.Errorf("duplicate: %v", err)
							}
							return errors.New("stop")
						}
						if err != nil {
							t.Errorf("held-back duplicate reported at once: %v", err)
						}
						if how == "read" {
							var n int
							seen = tx.QueryRow(ctx, "SELECT COUNT(*) FROM dff").Scan(&n)
							// Every later statement reports the same failure.
							if _, err := tx.Exec(ctx, q("INSERT INTO dff (v) VALUES (9)")); !errors.Is(err, store.ErrDeferredFailed) {
								t.Errorf("statement after the failure: %v", err)
							}
							return seen
						}
						return nil
					})
					if how == "defer-end" || how == "read" || db.Dialect() != store.Postgres {
						if how == "defer-end" {
							seen = derr
						}
						return derr
					}
					return nil
				})
				if db.Dialect() != store.Postgres {
					if err == nil {
						t.Fatal("transaction committed")
					}
				} else {
					if how != "commit" && (!errors.Is(seen, store.ErrDeferredFailed) || !store.IsUniqueViolation(seen)) {
						t.Errorf("reported %v; want ErrDeferredFailed and the unique violation", seen)
					}
					if !errors.Is(err, store.ErrDeferredFailed) {
						t.Errorf("InTx = %v; want ErrDeferredFailed", err)
					}
				}
				if got := values(t, db, "dff"); got != "" {
					t.Errorf("kept %s", got)
				}
			})
		}
	})
}

// TestHoldTravelsWithTheCommit: a held statement reaches the server with the
// next statement or with the commit; one that fails is reported by the
// commit, nothing is kept, and every connection goes back to the pool.
func TestHoldTravelsWithTheCommit(t *testing.T) {
	storetest.Each(t, nil, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		q := dialectSQL(db)
		if _, err := db.Exec(ctx, "CREATE TABLE hd (v INTEGER PRIMARY KEY)"); err != nil {
			t.Fatal(err)
		}
		ins := func(v int) store.Stmt { return store.Stmt{SQL: q("INSERT INTO hd (v) VALUES ($1)"), Args: []any{v}} }
		err := db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
			if err := store.Hold(ctx, tx, ins(1), ins(2)); err != nil {
				return err
			}
			var n int
			if err := tx.QueryRow(ctx, "SELECT COUNT(*) FROM hd").Scan(&n); err != nil || n != 2 {
				t.Errorf("a read after Hold counts %d, %v; want 2", n, err)
			}
			return store.Hold(ctx, tx, ins(3)) // with the commit
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := values(t, db, "hd"); got != "1,2,3" {
			t.Errorf("committed %s", got)
		}

		err = db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
			if err := store.Hold(ctx, tx, ins(4)); err != nil {
				return err
			}
			err := store.Hold(ctx, tx, ins(1))
			if db.Dialect() != store.Postgres {
				return err // run at once: the duplicate is reported here
			}
			if err != nil {
				t.Errorf("a held duplicate reported at once: %v", err)
			}
			return nil
		})
		if !store.IsUniqueViolation(err) || db.Dialect() == store.Postgres && !errors.Is(err, store.ErrDeferredFailed) {
			t.Errorf("InTx = %v; want the unique violation (ErrDeferredFailed on PostgreSQL)", err)
		}
		if got := values(t, db, "hd"); got != "1,2,3" {
			t.Errorf("after the failed commit: %s", got)
		}

		// A held statement that fails is reported as such by the batch that
		// sends it.
		err = db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
			if err := store.Hold(ctx, tx, ins(1)); err != nil || db.Dialect() != store.Postgres {
				return err
			}
			err := tx.ExecBatch(ctx, ins(5), ins(6))
			if !errors.Is(err, store.ErrDeferredFailed) || !store.IsUniqueViolation(err) {
				t.Errorf("the batch after a failing held statement: %v", err)
			}
			return err
		})
		if !store.IsUniqueViolation(err) {
			t.Errorf("InTx = %v; want the unique violation", err)
		}
		if got := values(t, db, "hd"); got != "1,2,3" {
			t.Errorf("after the failed batch: %s", got)
		}

		// More transactions than the pool has connections: none is kept (a
		// kept one would make a later begin wait, until this bound).
		bounded, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		for i := range 40 {
			if err := db.InTx(bounded, func(ctx context.Context, tx store.Tx) error {
				return store.Hold(ctx, tx, ins(100+i))
			}); err != nil {
				t.Fatal(err)
			}
		}
		if p := db.Pool(); p != nil {
			if n := p.Stat().AcquiredConns(); n != 0 {
				t.Errorf("%d connections still acquired after the transactions ended", n)
			}
		}
	})
}

func dialectSQL(db *store.DB) func(string) string {
	return func(s string) string {
		if db.Dialect() == store.SQLite {
			return strings.ReplaceAll(s, "$", "?")
		}
		return s
	}
}

// values lists a table's v column in order, comma-separated.
func values(t *testing.T, db *store.DB, table string) string {
	t.Helper()
	rows, err := db.Query(context.Background(), "SELECT v FROM "+table+" ORDER BY v")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		out = append(out, strconv.Itoa(v))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(out, ",")
}
