package outbox_test

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// TestSendErrorClasses: the class of a send's error decides what it costs
// the event. Unknown is charged an attempt and retried; Rejected, alone in
// its send, is DEAD at once; Unavailable is charged nothing, holds the
// events where they are (due, in order) and pauses the target until a send
// is confirmed again.
func TestSendErrorClasses(t *testing.T) {
	storetest.Each(t, []store.Line{outbox.Schema()}, func(t *testing.T, db *store.DB) {
		clk := clock.NewFake(t0)
		reg := prometheus.NewRegistry()
		var class atomic.Int32 // -1: the broker takes the send
		class.Store(-1)
		s := &sink{fail: func(string, []*broker.Message) (bool, error) {
			c := class.Load()
			if c < 0 {
				return true, nil
			}
			return false, driver.Classify(driver.ErrorCode(c), errors.New(driver.ErrorCode(c).String()+" send"))
		}}
		r := newRelay(t, db, clk, outbox.WithRetry(outbox.DefaultRetry()), outbox.WithRegisterer(reg),
			outbox.Target("p", s, outbox.PerKey))

		// Unknown: charged, retried after the backoff.
		class.Store(int32(driver.Unknown))
		enqueue(t, db, t0, ev("p", "A", 1))
		if st := flush(t, r); st.Retried != 1 || st.Dead != 0 || st.Held != 0 {
			t.Fatalf("unknown: %+v", st)
		}
		if rec := get(t, db, "p-A-1"); rec.Attempts != 1 || !rec.NextAttemptAt.After(t0) || rec.LastError != "unknown send" {
			t.Fatalf("unknown: %+v", rec)
		}
		if ts := r.Targets()[0]; ts.Paused || ts.LastError != "unknown send" {
			t.Fatalf("unknown: target %+v", ts)
		}

		// Rejected, alone in its send: DEAD at its first attempt.
		class.Store(int32(driver.Rejected))
		enqueue(t, db, t0, ev("p", "B", 1))
		if st := flush(t, r); st.Dead != 1 || st.Retried != 0 {
			t.Fatalf("rejected: %+v", st)
		}
		if rec := get(t, db, "p-B-1"); rec.Status != outbox.StatusDead || rec.Attempts != 1 || rec.LastError != "rejected send" {
			t.Fatalf("rejected: %+v", rec)
		}

		// Unavailable: nothing charged, the events stay due, the target pauses.
		class.Store(int32(driver.Unavailable))
		enqueue(t, db, t0, ev("p", "C", 1), ev("p", "C", 2), ev("p", "D", 1))
		clk.Advance(time.Hour) // A's retry is due too
		st := flush(t, r)
		if st.Held != 3 || st.Retried != 0 || st.Dead != 0 {
			t.Fatalf("unavailable: %+v", st)
		}
		for id, attempts := range map[string]int{"p-A-1": 1, "p-C-1": 0, "p-D-1": 0} {
			rec := get(t, db, id)
			if rec.Status != outbox.StatusPending || rec.Attempts != attempts || rec.LastError != "unavailable send" || rec.NextAttemptAt.After(clk.Now()) {
				t.Fatalf("unavailable: %s: %+v, want pending, due, attempts %d", id, rec, attempts)
			}
		}
		ts := r.Targets()[0]
		if !ts.Paused || !ts.PausedSince.Equal(clk.Now()) || ts.LastError != "unavailable send" || ts.Target != "p" {
			t.Fatalf("unavailable: target %+v", ts)
		}
		if v := testkit.MetricValue(t, reg, "msgx_outbox_target_up", "target", "p"); v != 0 {
			t.Fatalf("target_up %v while unavailable", v)
		}
		if v := testkit.MetricValue(t, reg, "msgx_outbox_held_total", "target", "p"); v != 3 {
			t.Fatalf("held_total %v, want 3", v)
		}
		// A broker still down: charged nothing however often it is tried.
		for range 10 {
			flush(t, r)
		}
		if rec := get(t, db, "p-C-1"); rec.Attempts != 0 {
			t.Fatalf("attempts charged while unavailable: %+v", rec)
		}

		// Back: everything goes, each key in order, each charged one attempt.
		class.Store(-1)
		if st := flush(t, r); st.Published != 4 || st.Dead != 0 {
			t.Fatalf("back: %+v", st)
		}
		if got := byKey(s.messages()); strings.Join(got["C"], ",") != "p-C-1,p-C-2" || len(got["A"]) != 1 || len(got["D"]) != 1 {
			t.Fatalf("back: sink got %v", got)
		}
		if ts := r.Targets()[0]; ts.Paused {
			t.Fatalf("back: target still paused: %+v", ts)
		}
		if v := testkit.MetricValue(t, reg, "msgx_outbox_target_up", "target", "p"); v != 1 {
			t.Fatalf("target_up %v after the broker came back", v)
		}
		if n := countStatus(t, db, outbox.StatusDead); n != 1 {
			t.Fatalf("%d dead, want only the rejected one", n)
		}
	})
}

// A first send the broker rejects as a whole because of one event is split
// at once: the rejected event is DEAD at its first attempt, the others that
// shared its send go out in the same cycle, charged nothing for it.
func TestRejectedBatchChargesOnlyTheRejectedEvent(t *testing.T) {
	storetest.Each(t, []store.Line{outbox.Schema()}, func(t *testing.T, db *store.DB) {
		clk := clock.NewFake(t0)
		s := &sink{fail: func(_ string, msgs []*broker.Message) (bool, error) {
			for _, m := range msgs {
				if m.Header(broker.HeaderEventID) == "p-B-1" {
					return false, driver.Classify(driver.Rejected, errors.New("too large"))
				}
			}
			return true, nil
		}}
		r := newRelay(t, db, clk, outbox.WithRetry(outbox.DefaultRetry()), outbox.Target("p", s, outbox.PerKey))
		enqueue(t, db, t0, ev("p", "A", 1), ev("p", "B", 1), ev("p", "C", 1))
		if st := flush(t, r); st.Published != 2 || st.Dead != 1 || st.Retried != 0 {
			t.Fatalf("flush: %+v", st)
		}
		if rec := get(t, db, "p-B-1"); rec.Status != outbox.StatusDead || rec.Attempts != 1 {
			t.Fatalf("rejected event: %+v", rec)
		}
		for _, id := range []string{"p-A-1", "p-C-1"} {
			if rec := get(t, db, id); rec.Attempts > 1 {
				t.Errorf("%s charged %d attempts for another event's rejection", id, rec.Attempts)
			}
		}
	})
}
