package outbox

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/msgx/msgx/internal/clock"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// The watermark must never pass the id of an event whose transaction is
// still open, even when later ids have committed; once it ends, the
// watermark moves past it.
func TestWatermarkWaitsForOpenTransactions(t *testing.T) {
	db := storetest.NewPostgres(t, store.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	o, err := newOps(db, 5*time.Second, 2, false)
	if err != nil {
		t.Fatal(err)
	}
	defer o.close()
	clk := clock.NewFake(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	var wm watermark
	sample := func() int64 {
		clk.Advance(watermarkInterval)
		return wm.current(ctx, o, clk.Now())
	}
	// The watermark also waits for other sessions' transactions on the
	// server (any database), so it is awaited, within a generous bound.
	reach := func(want int64) {
		t.Helper()
		deadline := time.Now().Add(45 * time.Second)
		for w := sample(); w < want; w = sample() {
			if time.Now().After(deadline) {
				t.Fatalf("watermark stuck at %d, want %d", w, want)
			}
		}
	}
	seq := func(id string) int64 {
		var n int64
		if err := db.QueryRow(ctx, "SELECT id FROM msgx_outbox WHERE event_id = $1", id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	enq := func(tx store.Tx, id string) {
		if err := Enqueue(ctx, tx, clk.Now(), Event{ID: id, Target: "t", Topic: "t", Key: id}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.InTx(ctx, func(ctx context.Context, tx store.Tx) error { enq(tx, "before"); return nil }); err != nil {
		t.Fatal(err)
	}
	reach(seq("before"))

	open, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
			enq(tx, "late")
			close(open)
			<-release
			return nil
		})
	}()
	<-open
	for i := range 5 {
		if err := db.InTx(ctx, func(ctx context.Context, tx store.Tx) error { enq(tx, "after"+string(rune('a'+i))); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	last := seq("aftere")
	lateID := seq("aftera") - 1 // taken just before, by the open transaction
	for range 50 {
		if w := sample(); w >= lateID {
			t.Fatalf("watermark %d reached the open transaction's event %d", w, lateID)
		}
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	reach(last)
	if got := seq("late"); got != lateID {
		t.Fatalf("the open transaction's event has id %d, want %d", got, lateID)
	}
}

func TestFloorAdvance(t *testing.T) {
	var f floor
	start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	if got := f.start(start); got != 0 {
		t.Fatalf("first claim starts at %d, want a full claim", got)
	}
	f.advance(100, 40, true) // a full batch up to 40, watermark 100
	if got := f.start(start); got != 40 {
		t.Fatalf("floor %d, want 40", got)
	}
	f.advance(100, 60, false) // a short batch saw everything up to the watermark
	if got := f.start(start); got != 100 {
		t.Fatalf("floor %d, want 100", got)
	}
	f.advance(50, 0, false) // never goes back
	if got := f.start(start.Add(rescanInterval)); got != 0 {
		t.Fatalf("after the rescan interval the claim starts at %d, want a full claim", got)
	}
	if got := f.start(start.Add(rescanInterval)); got != 100 {
		t.Fatalf("floor %d, want 100", got)
	}
}
