package outbox_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

func TestEnqueueCommitsWithTheCallerOnly(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
		ev := outbox.Event{ID: "e1", Target: "kafka:msg", Topic: "msg", Key: "F1", Payload: []byte{0, 1, 2}, Headers: map[string]string{"a": "b"}}
		if err := db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
			return outbox.Enqueue(ctx, tx, now, ev)
		}); err != nil {
			t.Fatal(err)
		}
		boom := errors.New("business failure")
		err := db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
			if err := outbox.Enqueue(ctx, tx, now, outbox.Event{ID: "e2", Target: "kafka:msg", Topic: "msg"}); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("InTx = %v", err)
		}
		var n int
		if err := db.QueryRow(ctx, "SELECT COUNT(*) FROM msgx_outbox").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Fatalf("%d outbox rows, want 1 (the rolled back event must not exist)", n)
		}
		// The event id is unique: enqueueing it twice fails.
		err = db.InTx(ctx, func(ctx context.Context, tx store.Tx) error { return outbox.Enqueue(ctx, tx, now, ev) })
		if !store.IsUniqueViolation(err) {
			t.Fatalf("duplicate event id: %v, want unique violation", err)
		}
	})
}
