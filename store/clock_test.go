package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// TestNowIsTheDatabasesClock: store.Now reads the server's present time on
// each dialect, inside a transaction too (not the transaction's start).
func TestNowIsTheDatabasesClock(t *testing.T) {
	storetest.Each(t, nil, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		// The database runs on this host: its clock and the test's agree
		// within the time the round trips take.
		before := time.Now().Add(-time.Second)
		now, err := store.Now(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		if now.Before(before) || now.After(time.Now().Add(time.Second)) {
			t.Fatalf("store.Now = %v, the host's clock %v", now, time.Now())
		}
		err = db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
			first, err := store.Now(ctx, tx)
			if err != nil {
				return err
			}
			// Wait until the database's clock has moved on, bounded.
			deadline := time.Now().Add(5 * time.Second)
			for time.Now().Before(deadline) {
				later, err := store.Now(ctx, tx)
				if err != nil {
					return err
				}
				if later.After(first) {
					return nil
				}
			}
			t.Errorf("store.Now stayed at %v inside a transaction", first)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}
