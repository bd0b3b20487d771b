package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

func TestEnqueueCommitsWithTheCallerOnly(t *testing.T) {
	storetest.Each(t, []store.Line{outbox.Schema()}, func(t *testing.T, db *store.DB) {
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

// A call's events of one key get ids in the order of the call, whether they
// are written a statement each (a few events) or by one statement for all,
// and the relay's per-key lane sends them in that order.
func TestEventsOfAKeyKeepTheCallsOrder(t *testing.T) {
	// Two keys interleaved, so that sorting the statements by key lock would
	// reorder the call.
	keys := []string{"K", "L"}
	for _, n := range []int{2, 3, 4, 5, 12} {
		t.Run(fmt.Sprintf("%d events", n), func(t *testing.T) {
			storetest.Each(t, []store.Line{outbox.Schema()}, func(t *testing.T, db *store.DB) {
				ctx := context.Background()
				var evs []outbox.Event
				for i := range n {
					evs = append(evs, ev("p", keys[i%2], i))
				}
				if err := db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
					return outbox.Enqueue(ctx, tx, t0, evs...)
				}); err != nil {
					t.Fatal(err)
				}
				for i := 2; i < n; i++ {
					if a, b := get(t, db, evs[i-2].ID), get(t, db, evs[i].ID); a.Seq >= b.Seq {
						t.Fatalf("n=%d: %s has id %d, the later %s %d", n, evs[i-2].ID, a.Seq, evs[i].ID, b.Seq)
					}
				}
				s := &sink{}
				flush(t, newRelay(t, db, clock.NewFake(t0), outbox.Target("p", s, outbox.PerKey)))
				got := byKey(s.messages())
				for i, e := range evs {
					k := keys[i%2]
					if got[k][i/2] != e.ID {
						t.Fatalf("n=%d: key %s sent as %v", n, k, got[k])
					}
				}
			})
		})
	}
}
