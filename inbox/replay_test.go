package inbox_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

func TestReplay(t *testing.T) {
	storetest.Each(t, []store.Line{inbox.Schema(), outbox.Schema()}, func(t *testing.T, db *store.DB) {
		bf := &fakeBackfiller{}
		f := newFixture(t, db, inbox.WithGroupSize(1), inbox.WithMaxAttempts(2), inbox.WithBackfill(bf))
		f.lead(f.eng)
		ctx := context.Background()
		f.proc.set(1, "fail:INFRA")
		f.proc.set(3, "fail:UNSUPPORTED")
		f.enqueue(f.stream, map[int64]string{1: "A;K", 2: "garbage", 3: "C;K", 4: "D;K", 5: "E;K"})
		for range 10 {
			f.clk.Advance(time.Minute)
			f.drain(f.eng)
		}
		// 1 exhausted its two attempts, 2 is malformed, 3 unsupported (DEAD at
		// once), 4 and 5 succeeded.
		f.wantStatus(map[int64]inbox.Status{1: inbox.Dead, 2: inbox.Dead, 3: inbox.Dead, 4: inbox.Succeeded, 5: inbox.Succeeded})
		if _, err := f.eng.SweepBackfill(ctx); err != nil {
			t.Fatal(err)
		}
		errorsBefore := f.count("SELECT COUNT(*) FROM msgx_inbox_error WHERE stream = $1 AND msg_id = 1", f.stream)

		// Refused requests.
		for _, req := range []inbox.ReplayRequest{
			{Class: inbox.Malformed, Actor: "ops", Reason: "x"},
			{Class: inbox.Protocol, Actor: "ops", Reason: "x"},
			{Class: inbox.Exhausted, Reason: "no actor"},
			{Class: inbox.Exhausted, IDs: []int64{1}, Actor: "ops", Reason: "both"},
		} {
			if _, err := f.eng.Replay(ctx, req); err == nil {
				t.Fatalf("replay %+v accepted", req)
			}
		}

		// By id: only replayable FAILED/DEAD messages are taken.
		f.clk.Advance(time.Minute)
		res, err := f.eng.Replay(ctx, inbox.ReplayRequest{IDs: []int64{2, 3, 4, 99}, Actor: "alice", Reason: "UNSUPPORTED fixed"})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(res.Replayed, []int64{3}) || len(res.Refused) != 3 ||
			res.Refused[2] != "class MALFORMED is not replayable" || res.Refused[4] != "status SUCCEEDED" || res.Refused[99] != "not found" {
			t.Fatalf("replay by id = %+v", res)
		}
		r := f.row(f.stream, 3)
		if r.Status != inbox.Pending || r.Attempts != 0 || r.NextAttemptAt != nil || r.ProcessingStartedAt != nil ||
			r.FinishedAt != nil || r.BackfillNextAt != nil || r.BackfilledAt != nil || r.Identity != "C" || r.ErrorClass != inbox.Unsupported {
			t.Fatalf("replayed row = %+v", r)
		}
		// By class.
		res, err = f.eng.Replay(ctx, inbox.ReplayRequest{Class: inbox.Exhausted, Actor: "bob", Reason: "infra back"})
		if err != nil || !slices.Equal(res.Replayed, []int64{1}) {
			t.Fatalf("replay by class = %+v, %v", res, err)
		}
		if n := f.count("SELECT COUNT(*) FROM msgx_inbox_error WHERE stream = $1 AND msg_id = 1", f.stream); n != errorsBefore {
			t.Fatalf("error history %d → %d: replay must keep it", errorsBefore, n)
		}
		// The audit has who, when, why and which ids.
		rows, err := db.Query(ctx, ph(db, "SELECT actor, reason, selector, msg_ids, count, at FROM msgx_inbox_replay WHERE stream = $1 ORDER BY id"), f.stream)
		if err != nil {
			t.Fatal(err)
		}
		type audit struct {
			actor, reason, selector, ids string
			count                        int
			at                           time.Time
		}
		var got []audit
		for rows.Next() {
			var a audit
			if err := rows.Scan(&a.actor, &a.reason, &a.selector, &a.ids, &a.count, &a.at); err != nil {
				t.Fatal(err)
			}
			got = append(got, a)
		}
		rows.Close()
		now := f.clk.Now()
		want := []audit{
			{"alice", "UNSUPPORTED fixed", "ids", "[3]", 1, now},
			{"bob", "infra back", "class:EXHAUSTED", "[1]", 1, now},
		}
		if len(got) != 2 || got[0].actor != want[0].actor || got[0].ids != want[0].ids || got[0].selector != want[0].selector ||
			got[1].actor != want[1].actor || got[1].ids != want[1].ids || got[1].selector != want[1].selector ||
			!got[0].at.Equal(now) || got[1].count != 1 || got[0].reason != want[0].reason {
			t.Fatalf("audit = %+v, want %+v", got, want)
		}
		// The replayed messages are the head again (older ids first), and the
		// identity they kept is theirs: no duplicate-of themselves.
		f.proc.set(1, "ok")
		f.proc.set(3, "ok")
		f.drain(f.eng)
		f.wantStatus(map[int64]inbox.Status{1: inbox.Succeeded, 3: inbox.Succeeded})
		if got := f.proc.ran(); !slices.Equal(got[len(got)-2:], []int64{1, 3}) {
			t.Fatalf("processing order %v", got)
		}
		if r := f.row(f.stream, 1); r.BackfillNextAt == nil {
			t.Fatal("the new terminal status registers a new backfill intent")
		}
	})
}
