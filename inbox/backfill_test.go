package inbox_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/msgx/msgx/backoff"
	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

func TestBackfillRetriesWithBackoffAndOverdueLimit(t *testing.T) {
	storetest.Each(t, []store.Line{inbox.Schema(), outbox.Schema()}, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		bf := &fakeBackfiller{fail: true}
		f := newFixture(t, db, inbox.WithGroupSize(1), inbox.WithBackfill(bf),
			inbox.WithBackfillSweep(30*time.Second, backoff.Policy{Initial: 30 * time.Second, Max: 15 * time.Minute, Multiplier: 2}, 10*time.Minute, 100))
		f.lead(f.eng)
		f.proc.set(2, "fail:INFRA", "ok")
		f.enqueue(f.stream, map[int64]string{1: "a;K", 2: "b;K"})
		f.step(f.eng)
		f.step(f.eng)
		if r := f.row(f.stream, 1); r.BackfillNextAt == nil || !r.BackfillNextAt.Equal(t0) {
			t.Fatalf("terminal row without backfill intent: %+v", r)
		}
		if r := f.row(f.stream, 2); r.Status != inbox.Failed || r.BackfillNextAt != nil {
			t.Fatalf("FAILED row with a backfill intent: %+v", r)
		}
		// The try right after the commit fails: retried 30 s later, then with a
		// doubling delay.
		if err := f.eng.BackfillIDs(ctx, []int64{1}); err == nil {
			t.Fatal("failed backfill reported no error")
		}
		sweep := func() {
			t.Helper()
			if _, err := f.eng.SweepBackfill(ctx); err != nil && !bf.failing() {
				t.Fatal(err)
			}
		}
		expectNext := func(attempts int, next time.Time) {
			t.Helper()
			r := f.row(f.stream, 1)
			if r.BackfillAttempts != attempts || r.BackfillNextAt == nil || !r.BackfillNextAt.Equal(next) || r.BackfillError == "" {
				t.Fatalf("backfill state %d %v %q, want %d attempts, next %v", r.BackfillAttempts, r.BackfillNextAt, r.BackfillError, attempts, next)
			}
		}
		expectNext(1, t0.Add(30*time.Second))
		calls := bf.callCount()
		f.clk.Advance(29 * time.Second)
		sweep()
		if bf.callCount() != calls {
			t.Fatal("swept before the backoff was over")
		}
		f.clk.Advance(time.Second) // t0+30s
		sweep()
		expectNext(2, t0.Add(90*time.Second))
		f.clk.Set(t0.Add(90 * time.Second))
		sweep()
		expectNext(3, t0.Add(210*time.Second))
		f.clk.Set(t0.Add(210 * time.Second))
		sweep()
		expectNext(4, t0.Add(450*time.Second))
		f.clk.Set(t0.Add(450 * time.Second))
		sweep()
		expectNext(5, t0.Add(930*time.Second)) // 8 min later: past the overdue limit
		// At the overdue limit (received + 10 min) the mark is forced even
		// though its backoff runs until 15.5 min.
		calls = bf.callCount()
		f.clk.Set(t0.Add(10*time.Minute - time.Second))
		sweep()
		if bf.callCount() != calls {
			t.Fatal("swept before the overdue limit")
		}
		f.clk.Set(t0.Add(10 * time.Minute))
		bf.setFail(false)
		sweep()
		r := f.row(f.stream, 1)
		if r.BackfilledAt == nil || !r.BackfilledAt.Equal(t0.Add(10*time.Minute)) || r.BackfillNextAt != nil || r.BackfillError != "" {
			t.Fatalf("after the forced backfill: %+v", r)
		}
		// Retrying the mark never ran the business processing again.
		if got := f.proc.ran(); !slices.Equal(got, []int64{1, 2}) {
			t.Fatalf("processed %v during backfill retries", got)
		}
		// Message 2 was never backfilled while FAILED.
		for _, c := range bf.allCalls() {
			if slices.Contains(c, 2) {
				t.Fatalf("backfill of a FAILED message: %v", c)
			}
		}
		// Capped at 15 min.
		bf.setFail(true)
		f.drain(f.eng) // 2 succeeds now
		for range 8 {
			f.clk.Advance(15 * time.Minute)
			sweep()
		}
		if r := f.row(f.stream, 2); r.BackfillNextAt == nil || r.BackfillNextAt.Sub(f.clk.Now()) != 15*time.Minute {
			t.Fatalf("delay not capped at 15 min: %+v", r)
		}
	})
}

func TestShadowModeNeverBackfills(t *testing.T) {
	storetest.Each(t, []store.Line{inbox.Schema(), outbox.Schema()}, func(t *testing.T, db *store.DB) {
		bf := &fakeBackfiller{}
		f := newFixture(t, db, inbox.WithBackfill(bf), inbox.WithShadow(true))
		f.lead(f.eng)
		f.enqueue(f.stream, map[int64]string{1: "a;K", 2: "garbage"})
		f.drain(f.eng)
		f.clk.Advance(24 * time.Hour)
		if _, err := f.eng.SweepBackfill(context.Background()); err != nil {
			t.Fatal(err)
		}
		if n := bf.callCount(); n != 0 {
			t.Fatalf("%d backfill calls in shadow mode", n)
		}
		if r := f.row(f.stream, 1); r.BackfillNextAt != nil {
			t.Fatalf("shadow mode registered a backfill intent: %+v", r)
		}
	})
}
