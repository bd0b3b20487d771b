package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

func TestTxTimesSavepointsAndRollback(t *testing.T) {
	storetest.Each(t, []store.Line{leaseLine()}, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		ins := "INSERT INTO msgx_lease (name, owner, expires_at) VALUES ($1, $2, $3)"
		sel := "SELECT owner, expires_at FROM msgx_lease WHERE name = $1"
		if db.Dialect() == store.SQLite {
			ins = "INSERT INTO msgx_lease (name, owner, expires_at) VALUES (?1, ?2, ?3)"
			sel = "SELECT owner, expires_at FROM msgx_lease WHERE name = ?1"
		}
		at := time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC)
		errBoom := errors.New("boom")
		err := db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
			if _, err := tx.Exec(ctx, ins, "a", "me", at); err != nil {
				return err
			}
			// A failing savepoint undoes only its own writes.
			spErr := tx.Savepoint(ctx, func(ctx context.Context) error {
				if _, err := tx.Exec(ctx, ins, "b", "me", at); err != nil {
					return err
				}
				return errBoom
			})
			if !errors.Is(spErr, errBoom) {
				t.Errorf("savepoint error = %v", spErr)
			}
			// A unique violation inside a savepoint leaves the tx usable.
			dupErr := tx.Savepoint(ctx, func(ctx context.Context) error {
				_, err := tx.Exec(ctx, ins, "a", "other", at)
				return err
			})
			if !store.IsUniqueViolation(dupErr) {
				t.Errorf("duplicate insert error = %v, want unique violation", dupErr)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("tx: %v", err)
		}
		var owner string
		var got time.Time
		if err := db.QueryRow(ctx, sel, "a").Scan(&owner, &got); err != nil {
			t.Fatal(err)
		}
		if owner != "me" || !got.Equal(at) {
			t.Errorf("row = %s %v, want me %v", owner, got, at)
		}
		if err := db.QueryRow(ctx, sel, "b").Scan(&owner, &got); !errors.Is(err, store.ErrNoRows) {
			t.Errorf("savepoint row b survived: %v", err)
		}
		// A failing transaction leaves nothing behind.
		err = db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
			if _, err := tx.Exec(ctx, ins, "c", "me", at); err != nil {
				return err
			}
			return errBoom
		})
		if !errors.Is(err, errBoom) {
			t.Fatalf("InTx = %v, want boom", err)
		}
		if err := db.QueryRow(ctx, sel, "c").Scan(&owner, &got); !errors.Is(err, store.ErrNoRows) {
			t.Errorf("rolled back row c exists: %v", err)
		}
	})
}

func TestOpenRejectsUnknownDSN(t *testing.T) {
	if _, err := store.Open(context.Background(), "mysql://x"); err == nil {
		t.Fatal("Open accepted an unsupported DSN")
	}
}

func TestExecBatchRunsInOrderAndStopsAtTheFirstFailure(t *testing.T) {
	storetest.Each(t, []store.Line{leaseLine()}, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		ins := "INSERT INTO msgx_lease (name, owner, expires_at) VALUES ($1, $2, $3)"
		if db.Dialect() == store.SQLite {
			ins = "INSERT INTO msgx_lease (name, owner, expires_at) VALUES (?1, ?2, ?3)"
		}
		at := time.Unix(1700000000, 0)
		err := db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
			if err := tx.ExecBatch(ctx,
				store.Stmt{SQL: ins, Args: []any{"a", "me", at}},
				store.Stmt{SQL: ins, Args: []any{"b", "me", at}},
			); err != nil {
				return err
			}
			// Inside a savepoint a failing batch leaves nothing of its own behind.
			spErr := tx.Savepoint(ctx, func(ctx context.Context) error {
				return tx.ExecBatch(ctx,
					store.Stmt{SQL: ins, Args: []any{"c", "me", at}},
					store.Stmt{SQL: ins, Args: []any{"a", "dup", at}},
					store.Stmt{SQL: ins, Args: []any{"d", "me", at}},
				)
			})
			if !store.IsUniqueViolation(spErr) {
				t.Errorf("batch with a duplicate = %v, want a unique violation", spErr)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		rows, err := db.Query(ctx, "SELECT name FROM msgx_lease ORDER BY name")
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				t.Fatal(err)
			}
			names = append(names, n)
		}
		rows.Close()
		if len(names) != 2 || names[0] != "a" || names[1] != "b" {
			t.Fatalf("rows = %v, want [a b]", names)
		}
	})
}
