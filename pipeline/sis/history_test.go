package sis_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/pipeline/sis"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

func count(t *testing.T, db *store.DB, q string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(context.Background(), q).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// TestHistorySweep: flights past retention (by operation day or quiet,
// DELETED included) move to flight_schd_hst and leave the flight and detail
// tables, their versions (flight_version) with them; those purged without FDEL get a schd tombstone in the same
// transaction; a recent flight stays until it is quiet; the snapshot log
// keeps 90 days; the daily run fires at 03:30 airport time.
func TestHistorySweep(t *testing.T) {
	storetest.Each(t, []store.Line{sis.Schema()}, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		h := loaded(t, db)                                                   // 15, 16 (2021-01-23), 121112312, 7610151 (2003-12-15)
		if out := h.ok(fixture(t, "FLOP_FDEL_1.xml")); out != inbox.Done() { // deletes 15
			t.Fatalf("FDEL: %+v", out)
		}
		if out := h.ok(adftOn(9001, "01MAR26", 0, 3)); out != inbox.Done() { // F00000..2 on 2026-03-01, today
			t.Fatalf("ADFT: %+v", out)
		}
		details := count(t, db, "SELECT count(*) FROM flight_route WHERE flid IN ('15','16')")
		if details == 0 || count(t, db, "SELECT count(*) FROM sis_snap_log") != 1 {
			t.Fatalf("setup: %d route rows, snapshot log %d", details, count(t, db, "SELECT count(*) FROM sis_snap_log"))
		}
		before := len(h.events())

		clk := clock.NewFake(t0.Add(24 * time.Hour))
		hist, err := sis.NewHistory(db, sis.WithHistoryClock(clk), sis.WithHistoryBatch(2), sis.WithHistoryLogger(testkit.Quiet()))
		if err != nil {
			t.Fatal(err)
		}
		res, err := hist.Sweep(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if res.Moved != 4 || res.Tombstoned != 3 || res.SnapLogPurged != 0 {
			t.Fatalf("sweep %+v", res)
		}
		if n := count(t, db, "SELECT count(*) FROM flight_schd"); n != 3 {
			t.Fatalf("%d flights left, want the 3 of today", n)
		}
		if n := count(t, db, "SELECT count(*) FROM flight_route WHERE flid IN ('15','16')"); n != 0 {
			t.Fatalf("%d detail rows left", n)
		}
		if n := count(t, db, "SELECT count(*) FROM flight_version WHERE flid IN ('15','16')"); n != 0 {
			t.Fatalf("%d versions of moved flights left", n)
		}
		if n := count(t, db, "SELECT count(*) FROM flight_version WHERE flid LIKE 'F0000%'"); n != 3 {
			t.Fatalf("%d versions of today's flights, want 3", n)
		}
		if n := count(t, db, "SELECT count(*) FROM flight_schd_hst WHERE flid = '15' AND status = 'DELETED' AND tombstoned = false"); n != 1 {
			t.Fatalf("the deleted flight in history: %d", n)
		}
		hst := count(t, db, "SELECT count(*) FROM flight_schd_hst WHERE tombstoned = true")
		if hst != 3 {
			t.Fatalf("tombstoned in history: %d", hst)
		}
		var state string
		if err := db.QueryRow(ctx, "SELECT state FROM flight_schd_hst WHERE flid = '16'").Scan(&state); err != nil || !strings.Contains(state, `"ROUT"`) {
			t.Fatalf("history state of 16 (%v): %.200s", err, state)
		}
		var tombs []string
		for _, e := range h.events()[before:] {
			if e.Type != string(outbox.Tombstone) || e.Target != sis.TargetSchd || len(e.Payload) != 0 {
				t.Fatalf("sweep event %+v", e)
			}
			tombs = append(tombs, e.Key)
		}
		if strings.Join(tombs, ",") != "121112312,16,7610151" {
			t.Fatalf("tombstones %v", tombs)
		}

		// A second sweep has nothing to do; later, today's flights are quiet
		// and past their day too.
		if res, err := hist.Sweep(ctx); err != nil || res.Moved != 0 {
			t.Fatalf("second sweep %+v %v", res, err)
		}
		clk.Advance(20 * 24 * time.Hour)
		if res, err := hist.Sweep(ctx); err != nil || res.Moved != 3 || res.Tombstoned != 3 {
			t.Fatalf("later sweep %+v %v", res, err)
		}
		// The flight is gone: a FLOP for it is no-match, a schedule brings it back.
		if out := h.ok(withSeq(fixture(t, "FLOP_GTDT_1.xml"), 777)); out.Status != inbox.Skipped {
			t.Fatalf("FLOP on a swept flight: %+v", out)
		}

		// The snapshot log after 90 days, through the daily run at 03:30.
		clk.Set(t0.Add(91 * 24 * time.Hour))
		next := hist.Next(clk.Now())
		if l := next.In(time.FixedZone("CST", 8*3600)); l.Hour() != 3 || l.Minute() != 30 || !next.After(clk.Now()) || next.Sub(clk.Now()) > 24*time.Hour {
			t.Fatalf("next sweep %v after %v", next, clk.Now())
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- hist.Run(rctx) }()
		if !clk.WaitForWaiters(ctx.Done(), 1) {
			t.Fatal("Run does not wait")
		}
		if n := count(t, db, "SELECT count(*) FROM sis_snap_log"); n != 1 {
			t.Fatalf("the log was purged before the sweep time: %d", n)
		}
		clk.Set(next)
		deadline := time.Now().Add(30 * time.Second)
		for count(t, db, "SELECT count(*) FROM sis_snap_log") != 0 {
			if time.Now().After(deadline) {
				t.Fatal("the daily sweep did not purge the snapshot log")
			}
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}
