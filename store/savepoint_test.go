package store_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// TestSavepointSemantics covers what batch processing relies on: each
// savepoint undoes exactly its own writes, whichever statement kind ran
// first inside it (PostgreSQL sends the savepoint with that statement), and
// nested, empty and pgx-level work behave.
func TestSavepointSemantics(t *testing.T) {
	storetest.Each(t, nil, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		q := dialectSQL(db)
		if _, err := db.Exec(ctx, "CREATE TABLE sp (v INTEGER PRIMARY KEY)"); err != nil {
			t.Fatal(err)
		}
		boom := errors.New("boom")
		ins := func(ctx context.Context, tx store.Tx, v int) error {
			_, err := tx.Exec(ctx, q("INSERT INTO sp (v) VALUES ($1)"), v)
			return err
		}
		err := db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
			// Kept: a plain savepoint.
			if err := tx.Savepoint(ctx, func(ctx context.Context) error { return ins(ctx, tx, 1) }); err != nil {
				return err
			}
			// Undone: fails after writing.
			if err := tx.Savepoint(ctx, func(ctx context.Context) error {
				if err := ins(ctx, tx, 2); err != nil {
					return err
				}
				return boom
			}); !errors.Is(err, boom) {
				t.Errorf("savepoint 2: %v", err)
			}
			// Empty savepoints, failing or not.
			if err := tx.Savepoint(ctx, func(context.Context) error { return nil }); err != nil {
				t.Errorf("empty savepoint: %v", err)
			}
			if err := tx.Savepoint(ctx, func(context.Context) error { return boom }); !errors.Is(err, boom) {
				t.Errorf("empty failing savepoint: %v", err)
			}
			// A query first, then a write; the failing statement itself aborts
			// only the savepoint.
			if err := tx.Savepoint(ctx, func(ctx context.Context) error {
				var n int
				if err := tx.QueryRow(ctx, "SELECT COUNT(*) FROM sp").Scan(&n); err != nil || n != 1 {
					t.Errorf("count in savepoint = %d, %v", n, err)
				}
				if err := ins(ctx, tx, 3); err != nil {
					return err
				}
				return ins(ctx, tx, 1) // duplicate key
			}); !store.IsUniqueViolation(err) {
				t.Errorf("savepoint 3: %v", err)
			}
			// Rows read first inside a savepoint.
			if err := tx.Savepoint(ctx, func(ctx context.Context) error {
				rows, err := tx.Query(ctx, "SELECT v FROM sp ORDER BY v")
				if err != nil {
					return err
				}
				var got []int
				for rows.Next() {
					var v int
					if err := rows.Scan(&v); err != nil {
						return err
					}
					got = append(got, v)
				}
				rows.Close()
				if !slices.Equal(got, []int{1}) {
					t.Errorf("rows in savepoint = %v", got)
				}
				return ins(ctx, tx, 4)
			}); err != nil {
				return err
			}
			// Nested: the inner failure keeps the outer's writes; the outer
			// failure undoes the inner's success.
			if err := tx.Savepoint(ctx, func(ctx context.Context) error {
				if err := ins(ctx, tx, 5); err != nil {
					return err
				}
				if err := tx.Savepoint(ctx, func(ctx context.Context) error {
					if err := ins(ctx, tx, 6); err != nil {
						return err
					}
					return boom
				}); !errors.Is(err, boom) {
					t.Errorf("inner: %v", err)
				}
				return nil
			}); err != nil {
				return err
			}
			if err := tx.Savepoint(ctx, func(ctx context.Context) error {
				if err := tx.Savepoint(ctx, func(ctx context.Context) error { return ins(ctx, tx, 7) }); err != nil {
					return err
				}
				return boom
			}); !errors.Is(err, boom) {
				t.Errorf("outer: %v", err)
			}
			// pgx-level work inside a savepoint is undone with it.
			if db.Dialect() == store.Postgres {
				if err := tx.Savepoint(ctx, func(ctx context.Context) error {
					if _, err := store.PgxTx(tx).Exec(ctx, "INSERT INTO sp (v) VALUES (8)"); err != nil {
						return err
					}
					return boom
				}); !errors.Is(err, boom) {
					t.Errorf("pgx savepoint: %v", err)
				}
			}
			return ins(ctx, tx, 9)
		})
		if err != nil {
			t.Fatal(err)
		}
		rows, err := db.Query(ctx, "SELECT v FROM sp ORDER BY v")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var got []int
		for rows.Next() {
			var v int
			if err := rows.Scan(&v); err != nil {
				t.Fatal(err)
			}
			got = append(got, v)
		}
		if want := []int{1, 4, 5, 9}; !slices.Equal(got, want) {
			t.Fatalf("committed %v, want %v", got, want)
		}
	})
}
