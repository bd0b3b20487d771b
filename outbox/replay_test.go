package outbox_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// TestReplayNeverGoesBackInTime: a compacted key's newest event goes DEAD,
// a newer state of the key is sent afterwards, and then the dead one is
// replayed. Sending it would put the key back to an older state; it is
// recorded as COVERED by the newer one instead. A dead event with no newer
// state sent is replayed and sent. Each replay leaves an audit row.
func TestReplayNeverGoesBackInTime(t *testing.T) {
	storetest.Each(t, []store.Line{outbox.Schema()}, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		clk := clock.NewFake(t0)
		var down atomic.Bool
		down.Store(true)
		s := &sink{fail: func(string, []*broker.Message) (bool, error) {
			if down.Load() {
				return false, errors.New("down")
			}
			return true, nil
		}}
		r := newRelay(t, db, clk, outbox.WithRetry(noJitter), outbox.Target("c", s, outbox.Compacted))
		enqueue(t, db, t0, ev("c", "A", 1), ev("c", "B", 1))
		for range noJitter.MaxAttempts {
			flush(t, r)
			clk.Advance(noJitter.Max)
		}
		if rec := get(t, db, "c-A-1"); rec.Status != outbox.StatusDead {
			t.Fatalf("A:1 %+v, want DEAD", rec)
		}
		down.Store(false)
		enqueue(t, db, clk.Now(), ev("c", "A", 2))
		if st := flush(t, r); st.Published != 1 {
			t.Fatalf("A:2 not sent: %+v", st)
		}

		res, err := outbox.Replay(ctx, db, clk.Now(), outbox.ReplayRequest{
			EventIDs: []string{"c-A-1", "c-B-1"}, Actor: "ops@example", Reason: "broker fixed"})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(res.Covered, []string{"c-A-1"}) || !slices.Equal(res.Replayed, []string{"c-B-1"}) {
			t.Fatalf("replay: %+v", res)
		}
		flush(t, r)
		if got := s.ids(); !slices.Equal(got, []string{"c-A-2", "c-B-1"}) {
			t.Fatalf("sent %v, want A's newer state only, then B's", got)
		}
		a2 := get(t, db, "c-A-2")
		if rec := get(t, db, "c-A-1"); rec.Status != outbox.StatusCovered || rec.CoveredBy == nil || *rec.CoveredBy != a2.Seq {
			t.Fatalf("A:1 after the replay: %+v, want COVERED by %d", rec, a2.Seq)
		}

		var actor, reason, selector, replayed, covered string
		if err := db.QueryRow(ctx, "SELECT actor, reason, selector, replayed, covered FROM msgx_outbox_replay").Scan(
			&actor, &reason, &selector, &replayed, &covered); err != nil {
			t.Fatal(err)
		}
		if actor != "ops@example" || reason != "broker fixed" || selector != "ids" || replayed != `["c-B-1"]` || covered != `["c-A-1"]` {
			t.Fatalf("audit: %q %q %q %q %q", actor, reason, selector, replayed, covered)
		}
		if _, err := outbox.Replay(ctx, db, clk.Now(), outbox.ReplayRequest{Target: "c"}); err == nil {
			t.Fatal("a replay without an actor was accepted")
		}
	})
}
