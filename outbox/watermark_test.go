package outbox

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// newWatermarkProbe gives a fresh PostgreSQL store and a function that
// takes a watermark sample, its interval later on clk each time, and returns
// the watermark.
func newWatermarkProbe(t *testing.T) (context.Context, *store.DB, *clock.Fake, func() int64) {
	t.Helper()
	db := storetest.NewPostgres(t, store.WithMigrate(Schema()), store.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	_, o, err := newRelayDB(db, 5*time.Second, 2, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.close)
	clk := clock.NewFake(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	var wm watermark
	return ctx, db, clk, func() int64 {
		clk.Advance(watermarkInterval)
		wm.sample(ctx, o, clk.Now())
		return wm.load()
	}
}

// The watermark must never pass the id of an event whose transaction is
// still open, even when later ids have committed; once it ends, the
// watermark moves past it.
func TestWatermarkWaitsForOpenTransactions(t *testing.T) {
	ctx, db, clk, sample := newWatermarkProbe(t)
	// The watermark also waits for other sessions' transactions in the
	// database, so it is awaited, within a generous bound.
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

// The same when the open transaction is the newest one of the server: no
// transaction that began after it has completed, so it lies above every
// snapshot's xmax, where a snapshot's xmin does not see it.
func TestWatermarkWaitsForTheNewestTransaction(t *testing.T) {
	ctx, db, clk, sample := newWatermarkProbe(t)
	for round := range 5 {
		open, release := make(chan int64), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			done <- db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
				id := fmt.Sprintf("late-%d", round)
				if err := Enqueue(ctx, tx, clk.Now(), Event{ID: id, Target: "t", Topic: "t", Key: id}); err != nil {
					return err
				}
				var n int64
				if err := tx.QueryRow(ctx, "SELECT id FROM msgx_outbox WHERE event_id = $1", id).Scan(&n); err != nil {
					return err
				}
				open <- n
				<-release
				return nil
			})
		}()
		lateID := <-open
		for range 10 {
			if w := sample(); w >= lateID {
				close(release)
				<-done
				t.Fatalf("round %d: watermark %d reached the open transaction's event %d", round, w, lateID)
			}
		}
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(45 * time.Second); sample() < lateID; {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: watermark never reached %d after its transaction ended", round, lateID)
			}
		}
	}
}

func TestFloorAdvance(t *testing.T) {
	var f floor
	start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	if got, _ := f.start(start); got != 0 {
		t.Fatalf("first claim starts at %d, want a full claim", got)
	}
	f.advance(100, 40, true) // a full batch up to 40, watermark 100
	if got, _ := f.start(start); got != 40 {
		t.Fatalf("floor %d, want 40", got)
	}
	f.advance(100, 60, false) // a short batch saw everything up to the watermark
	if got, _ := f.start(start); got != 100 {
		t.Fatalf("floor %d, want 100", got)
	}
	f.advance(50, 0, false) // never goes back
	if got, pass := f.start(start.Add(rescanInterval)); got != 0 || !pass {
		t.Fatalf("after the rescan interval the claim starts at %d (pass %v), want a pass from the start", got, pass)
	}
	// The pass goes on from where its claims end while they come back full.
	f.passed(30, true)
	if got, pass := f.start(start.Add(rescanInterval)); got != 30 || !pass {
		t.Fatalf("pass goes on at %d (%v), want 30", got, pass)
	}
	f.passed(45, false)
	if got, pass := f.start(start.Add(rescanInterval)); got != 100 || pass {
		t.Fatalf("after the pass the claim starts at %d (%v), want the floor 100", got, pass)
	}
}

func TestFloorPassAtADueRetry(t *testing.T) {
	var f floor
	start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	f.start(start)
	f.advance(100, 0, false)
	f.retryAt(start.Add(200*time.Millisecond), 70)
	f.retryAt(start.Add(205*time.Millisecond), 20)
	f.retryAt(start.Add(500*time.Millisecond), 90)
	if got, pass := f.start(start.Add(199 * time.Millisecond)); got != 100 || pass {
		t.Fatalf("before the retries are due: %d (%v)", got, pass)
	}
	// Both retries of the first 10 ms are due: the pass starts at the lower id.
	if got, pass := f.start(start.Add(210 * time.Millisecond)); got != 19 || !pass {
		t.Fatalf("at the due retries: %d (%v), want a pass from 19", got, pass)
	}
	f.passed(0, false)
	if got, pass := f.start(start.Add(300 * time.Millisecond)); got != 100 || pass {
		t.Fatalf("between: %d (%v)", got, pass)
	}
	if got, pass := f.start(start.Add(500 * time.Millisecond)); got != 89 || !pass {
		t.Fatalf("at the last retry: %d (%v), want a pass from 89", got, pass)
	}
}

// A watermark sample takes no transaction id (it used to take one per
// sample, 50 a second per relay, bringing wraparound closer).
func TestWatermarkSampleAssignsNoTransactionID(t *testing.T) {
	db := storetest.NewPostgres(t, store.WithMigrate(Schema()), store.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q, err := queriesFor(store.Postgres)
	if err != nil {
		t.Fatal(err)
	}
	err = db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		var last int64
		var running []int64
		if err := tx.QueryRow(ctx, q.Get("WatermarkLast")).Scan(&last); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, q.Get("WatermarkRunning")).Scan(&running); err != nil {
			return err
		}
		var assigned *string
		if err := tx.QueryRow(ctx, "SELECT pg_current_xact_id_if_assigned()::text").Scan(&assigned); err != nil {
			return err
		}
		if assigned != nil {
			return fmt.Errorf("a sample assigned transaction id %s", *assigned)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
