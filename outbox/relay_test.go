package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgx/msgx/backoff"
	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/broker/mem"
	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/internal/tcpproxy"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// noJitter makes due times exact so tests can step the clock to them.
var noJitter = backoff.Policy{MaxAttempts: 3, Initial: time.Second, Max: 4 * time.Second}

func TestLanesDeliverEverything(t *testing.T) {
	storetest.Each(t, []store.Line{outbox.Schema()}, func(t *testing.T, db *store.DB) {
		clk := clock.NewFake(t0)
		un, pk, co := &sink{}, &sink{}, &sink{}
		r := newRelay(t, db, clk,
			outbox.Target("u", un, outbox.Unordered, outbox.Batch(7)),
			outbox.Target("p", pk, outbox.PerKey, outbox.Batch(3)),
			outbox.Target("c", co, outbox.Compacted, outbox.FlushLimit(2)))
		var evs []outbox.Event
		for i := range 20 {
			for _, k := range []string{"a", "b", "c", "d", ""} {
				for _, tg := range []string{"u", "p", "c"} {
					evs = append(evs, ev(tg, k, i))
				}
			}
		}
		enqueue(t, db, t0, evs...)
		st := flush(t, r)
		if un.count() != 100 || pk.count() != 100 {
			t.Fatalf("unordered got %d, per-key %d, want 100 each", un.count(), pk.count())
		}
		// Compacted: one per key (4 keys) plus the 20 keyless events.
		if co.count() != 24 {
			t.Fatalf("compacted sent %d, want 24", co.count())
		}
		if st.Published != 224 || st.Covered != 76 || st.Claimed != 224 {
			t.Fatalf("stats %+v", st)
		}
		for _, m := range pk.messages() {
			if m.msg.Header(broker.HeaderEventID) == "" || m.topic != "topic.p" || m.msg.Header(broker.HeaderType) != "UPSERT" {
				t.Fatalf("message without event id or type, or on the wrong topic: %+v", m)
			}
		}
		if n := countStatus(t, db, outbox.StatusPending); n != 0 {
			t.Fatalf("%d pending rows left", n)
		}
		if n := countStatus(t, db, outbox.StatusSent); n != 224 {
			t.Fatalf("%d sent records, want 224", n)
		}
		rec := get(t, db, "u-a-3")
		if rec.Status != outbox.StatusSent || rec.Attempts != 1 || rec.DoneAt == nil || !rec.DoneAt.Equal(t0) {
			t.Fatalf("record of a sent event: %+v", rec)
		}
	})
}

func TestEnqueueKeepsCallOrderAndHeaders(t *testing.T) {
	storetest.Each(t, []store.Line{outbox.Schema()}, func(t *testing.T, db *store.DB) {
		var evs []outbox.Event
		for i := range 300 {
			e := ev("p", fmt.Sprintf("k%d", i%7), i)
			if i%50 == 0 {
				e.Headers = map[string]string{"tenant-id": "t1", broker.HeaderType: "FLOP"}
			}
			evs = append(evs, e)
		}
		enqueue(t, db, t0, evs...)
		var last int64
		for _, e := range evs {
			rec := get(t, db, e.ID)
			if rec.Seq <= last {
				t.Fatalf("event %s has id %d after %d: the call order is not kept", e.ID, rec.Seq, last)
			}
			last = rec.Seq
		}
		s := &sink{}
		flush(t, newRelay(t, db, clock.NewFake(t0), outbox.Target("p", s, outbox.Unordered)))
		for _, m := range s.messages() {
			id := m.msg.Header(broker.HeaderEventID)
			if strings.HasSuffix(id, "-0") || strings.HasSuffix(id, "-50") {
				if m.msg.Header("tenant-id") != "t1" || m.msg.Header(broker.HeaderType) != "FLOP" {
					t.Fatalf("headers of %s: %v", id, m.msg.Headers)
				}
			}
		}
		err := db.InTx(context.Background(), func(ctx context.Context, tx store.Tx) error {
			return outbox.Enqueue(ctx, tx, t0, outbox.Event{Target: "p", Topic: "x", Type: "DELETE"})
		})
		if err == nil {
			t.Fatal("an unknown event type was accepted")
		}
	})
}

func TestPerKeyHeadOfLineBlocksOnlyItsKey(t *testing.T) {
	storetest.Each(t, []store.Line{outbox.Schema()}, func(t *testing.T, db *store.DB) {
		clk := clock.NewFake(t0)
		var failA atomic.Bool
		failA.Store(true)
		s := &sink{fail: func(_ string, msgs []*broker.Message) (bool, error) {
			for _, m := range msgs {
				if m.Key == "A" && failA.Load() {
					return false, errors.New("broker said no")
				}
			}
			return true, nil
		}}
		r := newRelay(t, db, clk, outbox.WithRetry(noJitter),
			outbox.Target("p", s, outbox.PerKey, outbox.Batch(2)))
		var evs []outbox.Event
		for i := range 5 {
			for _, k := range []string{"A", "B", "C"} {
				evs = append(evs, ev("p", k, i))
			}
		}
		enqueue(t, db, t0, evs...)

		// The first attempts of A's and B's heads share one send (the walk
		// takes two keys at a time), so B's head fails with A's once; C runs.
		st := flush(t, r)
		got := byKey(s.messages())
		if len(got["A"]) != 0 || len(got["B"]) != 0 || len(got["C"]) != 5 || st.Retried != 2 {
			t.Fatalf("after the first flush: %v (stats %+v)", got, st)
		}
		// A's head waits for its backoff; the other events of A wait behind it.
		head := get(t, db, "p-A-0")
		if head.Attempts != 1 || !head.NextAttemptAt.Equal(t0.Add(time.Second)) || head.LastError != "broker said no" {
			t.Fatalf("A's head: %+v", head)
		}
		if flush(t, r).Claimed != 0 {
			t.Fatal("a key in backoff was claimed before it was due")
		}
		// Retries go in one send; when it fails, they are tried one by one:
		// B gets through, A fails on its own.
		clk.Advance(time.Second)
		st = flush(t, r)
		got = byKey(s.messages())
		if len(got["A"]) != 0 || len(got["B"]) != 5 || st.Retried != 1 {
			t.Fatalf("after the retry: %v (stats %+v)", got, st)
		}
		if n := countStatus(t, db, outbox.StatusPending); n != 5 {
			t.Fatalf("%d pending, want A's 5", n)
		}
		failA.Store(false)
		clk.Advance(2 * time.Second)
		flush(t, r)
		got = byKey(s.messages())
		want := []string{"p-A-0", "p-A-1", "p-A-2", "p-A-3", "p-A-4"}
		if !slices.Equal(got["A"], want) {
			t.Fatalf("A arrived as %v, want %v", got["A"], want)
		}
		for _, k := range []string{"B", "C"} {
			if !slices.IsSorted(got[k]) {
				t.Fatalf("%s out of order: %v", k, got[k])
			}
		}
		if rec := get(t, db, "p-A-0"); rec.Status != outbox.StatusSent || rec.Attempts != 3 || rec.LastError != "broker said no" {
			t.Fatalf("A's head after its retry: %+v", rec)
		}
	})
}

func TestRetriesThenDeadThenReplay(t *testing.T) {
	storetest.Each(t, []store.Line{outbox.Schema()}, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		clk := clock.NewFake(t0)
		reg := prometheus.NewRegistry()
		var broken atomic.Bool
		broken.Store(true)
		s := &sink{fail: func(string, []*broker.Message) (bool, error) {
			if broken.Load() {
				return false, errors.New("connection refused")
			}
			return true, nil
		}}
		jitter := backoff.Policy{MaxAttempts: 3, Initial: time.Second, Max: 4 * time.Second, Jitter: 0.5}
		r := newRelay(t, db, clk, outbox.WithRetry(jitter), outbox.WithRegisterer(reg),
			outbox.Target("u", s, outbox.Unordered))
		enqueue(t, db, t0, ev("u", "k", 1), ev("u", "k", 2))

		for attempt, delay := range []time.Duration{time.Second, 2 * time.Second} {
			now := clk.Now()
			st := flush(t, r)
			if st.Retried != 2 || st.Dead != 0 {
				t.Fatalf("attempt %d: %+v", attempt+1, st)
			}
			rec := get(t, db, "u-k-1")
			wait := rec.NextAttemptAt.Sub(now)
			if rec.Attempts != attempt+1 || wait < delay/2 || wait > delay {
				t.Fatalf("attempt %d: attempts %d, next attempt in %v, want within [%v, %v]", attempt+1, rec.Attempts, wait, delay/2, delay)
			}
			if flush(t, r).Claimed != 0 {
				t.Fatal("claimed before the backoff ended")
			}
			clk.Advance(delay)
		}
		st := flush(t, r)
		if st.Dead != 2 {
			t.Fatalf("third failure: %+v, want both dead", st)
		}
		rec := get(t, db, "u-k-2")
		if rec.Status != outbox.StatusDead || rec.Attempts != 3 || rec.LastError != "connection refused" || rec.DoneAt == nil {
			t.Fatalf("dead record: %+v", rec)
		}
		clk.Advance(time.Hour)
		if flush(t, r).Claimed != 0 {
			t.Fatal("a dead event was claimed")
		}
		dead, err := outbox.ListDead(ctx, db, "u", 0, 10)
		if err != nil || len(dead) != 2 || dead[0].EventID != "u-k-1" || dead[1].LastError != "connection refused" {
			t.Fatalf("ListDead: %v %+v", err, dead)
		}
		if page, _ := outbox.ListDead(ctx, db, "u", dead[0].Seq, 10); len(page) != 1 || page[0].EventID != "u-k-2" {
			t.Fatalf("second page: %+v", page)
		}
		if v := testkit.MetricValue(t, reg, "msgx_outbox_retried_total", "target", "u"); v != 4 {
			t.Fatalf("retried metric %v, want 4", v)
		}
		if v := testkit.MetricValue(t, reg, "msgx_outbox_dead_total", "target", "u"); v != 2 {
			t.Fatalf("dead metric %v, want 2", v)
		}

		broken.Store(false)
		if res, err := outbox.Replay(ctx, db, clk.Now(), outbox.ReplayRequest{EventIDs: []string{"u-k-1", "no-such-event"}, Actor: "test"}); err != nil || len(res.Replayed) != 1 {
			t.Fatalf("Replay: %+v, %v", res, err)
		}
		rec = get(t, db, "u-k-1")
		if rec.Status != outbox.StatusPending || rec.Attempts != 0 || rec.LastError != "connection refused" {
			t.Fatalf("replayed record: %+v", rec)
		}
		if st := flush(t, r); st.Published != 1 {
			t.Fatalf("after replay by id: %+v", st)
		}
		if res, err := outbox.Replay(ctx, db, clk.Now(), outbox.ReplayRequest{Target: "u", Actor: "test"}); err != nil || len(res.Replayed) != 1 {
			t.Fatalf("Replay of the target: %+v, %v", res, err)
		}
		flush(t, r)
		if got := s.ids(); !slices.Equal(got, []string{"u-k-1", "u-k-2"}) {
			t.Fatalf("sink got %v", got)
		}
		if v := testkit.MetricValue(t, reg, "msgx_outbox_published_total", "target", "u"); v != 2 {
			t.Fatalf("published metric %v, want 2", v)
		}
	})
}

func TestPoisonEventFailsOnlyItself(t *testing.T) {
	storetest.Each(t, []store.Line{outbox.Schema()}, func(t *testing.T, db *store.DB) {
		clk := clock.NewFake(t0)
		var calls atomic.Int32
		s := &sink{fail: func(_ string, msgs []*broker.Message) (bool, error) {
			calls.Add(1)
			for _, m := range msgs {
				if string(m.Payload) == "k:3" {
					return false, driver.Classify(driver.Rejected, errors.New("message too large"))
				}
			}
			return true, nil
		}}
		r := newRelay(t, db, clk, outbox.WithRetry(noJitter), outbox.Target("u", s, outbox.Unordered))
		var evs []outbox.Event
		for i := range 10 {
			evs = append(evs, ev("u", "k", i))
		}
		enqueue(t, db, t0, evs...)
		// First attempt: one send of ten is rejected as a whole; it is split
		// at once, one event per send: nine arrive, the poison one is dead
		// at its first attempt, and no other event is charged for it.
		if st := flush(t, r); st.Published != 9 || st.Dead != 1 || st.Retried != 0 || calls.Load() != 11 || s.count() != 9 {
			t.Fatalf("first attempt: %+v, %d sends, sink %d", st, calls.Load(), s.count())
		}
		if rec := get(t, db, "u-k-3"); rec.Status != outbox.StatusDead || rec.Attempts != 1 || !strings.Contains(rec.LastError, "too large") {
			t.Fatalf("poison record: %+v", rec)
		}
	})
}

func TestConfirmLostAfterTheBrokerStoredIt(t *testing.T) {
	storetest.Each(t, []store.Line{outbox.Schema()}, func(t *testing.T, db *store.DB) {
		clk := clock.NewFake(t0)
		var lost atomic.Bool
		lost.Store(true)
		s := &sink{fail: func(string, []*broker.Message) (bool, error) {
			if lost.Swap(false) {
				return true, context.DeadlineExceeded // stored, but the confirm never came
			}
			return true, nil
		}}
		r := newRelay(t, db, clk, outbox.WithRetry(noJitter), outbox.Target("u", s, outbox.Unordered))
		enqueue(t, db, t0, ev("u", "k", 1))
		flush(t, r)
		clk.Advance(time.Second)
		flush(t, r)
		msgs := s.messages()
		if len(msgs) != 2 || msgs[0].msg.Header(broker.HeaderEventID) != "u-k-1" || msgs[1].msg.Header(broker.HeaderEventID) != "u-k-1" {
			t.Fatalf("want the event twice with the same event id, got %+v", msgs)
		}
		// A confirm that never came is the broker's failure (Unavailable:
		// its deadline passed), not the event's: the second send is its
		// first charged attempt.
		if rec := get(t, db, "u-k-1"); rec.Status != outbox.StatusSent || rec.Attempts != 1 {
			t.Fatalf("record: %+v", rec)
		}
	})
}

func TestLeaseTakeover(t *testing.T) {
	storetest.Each(t, []store.Line{outbox.Schema()}, func(t *testing.T, db *store.DB) {
		clk := clock.NewFake(t0)
		stuck := &sink{block: make(chan struct{}), entered: make(chan int, 1)}
		fresh := &sink{}
		lease := time.Minute
		a := newRelay(t, db, clk, outbox.WithLease(lease), outbox.WithPublishTimeout(30*time.Second), outbox.WithDBTimeout(time.Second),
			outbox.Target("p", stuck, outbox.PerKey))
		b := newRelay(t, db, clk, outbox.WithLease(lease), outbox.Target("p", fresh, outbox.PerKey))
		enqueue(t, db, t0, ev("p", "A", 1), ev("p", "A", 2), ev("p", "B", 1))

		done := make(chan outbox.Stats, 1)
		go func() {
			st, _ := a.Flush(context.Background())
			done <- st
		}()
		if n := <-stuck.entered; n != 2 {
			t.Fatalf("relay A sends %d events, want the heads of A and B", n)
		}
		// A holds both heads: B finds nothing, not even A's second event.
		if st := flush(t, b); st.Claimed != 0 {
			t.Fatalf("relay B claimed %+v while A held the lease", st)
		}
		clk.Advance(lease)
		st := flush(t, b)
		if st.Published != 3 {
			t.Fatalf("relay B after the lease: %+v", st)
		}
		if got := byKey(fresh.messages()); !slices.Equal(got["A"], []string{"p-A-1", "p-A-2"}) {
			t.Fatalf("B sent A's events as %v", got["A"])
		}
		// A's broker call returns now; its lease is gone, so it changes nothing.
		close(stuck.block)
		if ast := <-done; ast.Published != 2 {
			t.Fatalf("relay A: %+v", ast)
		}
		rec := get(t, db, "p-A-1")
		if rec.Status != outbox.StatusSent || rec.Attempts != 2 {
			t.Fatalf("record after the takeover: %+v", rec)
		}
		if n := countStatus(t, db, outbox.StatusSent); n != 3 {
			t.Fatalf("%d sent records, want 3", n)
		}
	})
}

func TestCompaction(t *testing.T) {
	storetest.Each(t, []store.Line{outbox.Schema()}, func(t *testing.T, db *store.DB) {
		clk := clock.NewFake(t0)
		s := &sink{}
		r := newRelay(t, db, clk, outbox.WithRetry(noJitter), outbox.Target("c", s, outbox.Compacted))
		up := func(key string, v int) outbox.Event { return ev("c", key, v) }
		tomb := func(key string, v int) outbox.Event {
			e := ev("c", key, v)
			e.Type = outbox.Tombstone
			return e
		}
		keyless := ev("c", "", 1)
		enqueue(t, db, t0, up("A", 1), up("B", 1), tomb("C", 1), up("A", 2), tomb("B", 2), up("C", 2), up("A", 3), up("D", 1), keyless)
		st := flush(t, r)
		if st.Published != 5 || st.Covered != 4 {
			t.Fatalf("stats %+v, want 5 sent (A, B, C, D and the keyless one) and 4 covered", st)
		}
		got := map[string]broker.Message{}
		for _, m := range s.messages() {
			got[m.msg.Header(broker.HeaderEventID)] = m.msg
		}
		if m, ok := got["c-A-3"]; !ok || string(m.Payload) != "A:3" || m.Key != "A" {
			t.Fatalf("A: want its newest state A:3, got %v", got)
		}
		if m, ok := got["c-B-2"]; !ok || m.Payload != nil || m.Header(broker.HeaderType) != "TOMBSTONE" {
			t.Fatalf("B: want a tombstone with an empty value, got %+v", m)
		}
		if m, ok := got["c-C-2"]; !ok || string(m.Payload) != "C:2" {
			t.Fatalf("C: a tombstone followed by an upsert is the upsert, got %v", got)
		}
		if _, ok := got["c-D-1"]; !ok {
			t.Fatal("D missing")
		}
		if _, ok := got["c--1"]; !ok {
			t.Fatal("the keyless event missing")
		}
		a3 := get(t, db, "c-A-3")
		for _, id := range []string{"c-A-1", "c-A-2"} {
			rec := get(t, db, id)
			if rec.Status != outbox.StatusCovered || rec.CoveredBy == nil || *rec.CoveredBy != a3.Seq {
				t.Fatalf("%s: %+v, want COVERED by %d", id, rec, a3.Seq)
			}
		}
		if rec := get(t, db, "c-B-1"); rec.Status != outbox.StatusCovered {
			t.Fatalf("B:1 %+v", rec)
		}

		// Later changes: only the newest is sent again.
		enqueue(t, db, t0, up("A", 4), up("A", 5))
		st = flush(t, r)
		if st.Published != 1 || st.Covered != 1 || s.ids()[s.count()-1] != "c-A-5" {
			t.Fatalf("second flush %+v, last sent %v", st, s.ids())
		}

		// A failed newest event is covered by a newer one that arrives meanwhile.
		var fail atomic.Bool
		fail.Store(true)
		s.fail = func(string, []*broker.Message) (bool, error) {
			if fail.Load() {
				return false, errors.New("down")
			}
			return true, nil
		}
		enqueue(t, db, t0, up("E", 1), up("E", 2))
		if st := flush(t, r); st.Retried != 1 {
			t.Fatalf("failing flush %+v", st)
		}
		enqueue(t, db, t0, up("E", 3))
		fail.Store(false)
		st = flush(t, r)
		if st.Published != 1 || st.Covered != 2 || s.ids()[s.count()-1] != "c-E-3" {
			t.Fatalf("after the failure %+v, sent %v", st, s.ids())
		}
		if rec := get(t, db, "c-E-2"); rec.Status != outbox.StatusCovered || rec.Attempts != 1 || rec.LastError != "down" {
			t.Fatalf("the failed one: %+v", rec)
		}

		// A newest event that goes dead stands for the older ones it covers.
		fail.Store(true)
		enqueue(t, db, t0, up("F", 1), up("F", 2))
		for range noJitter.MaxAttempts {
			flush(t, r)
			clk.Advance(noJitter.Max)
		}
		if rec := get(t, db, "c-F-2"); rec.Status != outbox.StatusDead {
			t.Fatalf("F:2 %+v, want DEAD", rec)
		}
		if rec := get(t, db, "c-F-1"); rec.Status != outbox.StatusCovered {
			t.Fatalf("F:1 %+v, want COVERED by the dead F:2", rec)
		}
		if n := countStatus(t, db, outbox.StatusPending); n != 0 {
			t.Fatalf("%d pending", n)
		}
	})
}

func TestCompactedLaneFlushPeriod(t *testing.T) {
	storetest.Each(t, []store.Line{outbox.Schema()}, func(t *testing.T, db *store.DB) {
		clk := clock.NewFake(t0)
		s := &sink{}
		r := newRelay(t, db, clk, outbox.WithCleanupInterval(time.Hour), outbox.WithLagInterval(time.Hour),
			outbox.Target("c", s, outbox.Compacted, outbox.FlushPeriod(3*time.Second)))
		enqueue(t, db, t0, ev("c", "A", 1), ev("c", "A", 2))
		ctx, cancel := context.WithCancel(context.Background())
		stopped := make(chan error, 1)
		go func() { stopped <- r.Run(ctx) }()
		defer func() {
			cancel()
			<-stopped
		}()
		testkit.Eventually(t, "the first flush", 10*time.Second, func() bool { return s.count() == 1 })
		// Parked: the lane on its flush period, maintenance on its interval.
		if !clk.WaitForWaiters(ctx.Done(), 2) {
			t.Fatal("relay not parked")
		}
		enqueue(t, db, clk.Now(), ev("c", "A", 3), ev("c", "A", 4))
		clk.Advance(3*time.Second - time.Millisecond)
		if clk.Waiters() != 2 {
			t.Fatal("the lane woke up before its flush period")
		}
		clk.Advance(time.Millisecond)
		testkit.Eventually(t, "the second flush", 10*time.Second, func() bool { return s.count() == 2 })
		if got := s.ids(); got[1] != "c-A-4" {
			t.Fatalf("second flush sent %v", got)
		}
	})
}

func TestCleanupDeletesOldRecordsOnly(t *testing.T) {
	storetest.Each(t, []store.Line{outbox.Schema()}, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		clk := clock.NewFake(t0)
		fail := false
		s := &sink{fail: func(string, []*broker.Message) (bool, error) {
			if fail {
				return false, errors.New("down")
			}
			return true, nil
		}}
		r := newRelay(t, db, clk, outbox.WithRetention(24*time.Hour), outbox.WithRetry(backoff.Policy{MaxAttempts: 1}),
			outbox.Target("c", s, outbox.Compacted))
		enqueue(t, db, t0, ev("c", "A", 1), ev("c", "A", 2), ev("c", "B", 1))
		flush(t, r) // A:2 and B:1 sent, A:1 covered
		clk.Advance(12 * time.Hour)
		enqueue(t, db, clk.Now(), ev("c", "C", 1))
		flush(t, r)
		fail = true
		enqueue(t, db, clk.Now(), ev("c", "D", 1))
		flush(t, r) // D dead
		enqueue(t, db, clk.Now(), ev("c", "E", 1))
		if n, err := r.Cleanup(ctx); err != nil || n != 0 {
			t.Fatalf("cleanup before the retention: %d, %v", n, err)
		}
		clk.Advance(12*time.Hour + time.Second)
		n, err := r.Cleanup(ctx)
		if err != nil || n != 3 {
			t.Fatalf("cleanup: deleted %d, %v; want the 3 records of the first flush", n, err)
		}
		for id, want := range map[string]outbox.Status{"c-C-1": outbox.StatusSent, "c-D-1": outbox.StatusDead, "c-E-1": outbox.StatusPending} {
			if rec := get(t, db, id); rec.Status != want {
				t.Fatalf("%s: %s, want %s", id, rec.Status, want)
			}
		}
		if _, err := outbox.Get(ctx, db, "c-A-1"); !errors.Is(err, outbox.ErrNotFound) {
			t.Fatalf("Get of a cleaned record: %v", err)
		}
	})
}

func TestRunRelaysAndStopsCleanly(t *testing.T) {
	storetest.Each(t, []store.Line{outbox.Schema()}, func(t *testing.T, db *store.DB) {
		clk := clock.NewFake(t0)
		reg := prometheus.NewRegistry()
		s := &sink{}
		r := newRelay(t, db, clk, outbox.WithRegisterer(reg),
			outbox.Target("u", s, outbox.Unordered, outbox.Batch(10), outbox.Workers(3)),
			outbox.Target("slow", &sink{}, outbox.PerKey))
		var evs []outbox.Event
		for i := range 95 {
			evs = append(evs, ev("u", fmt.Sprint(i%4), i))
		}
		enqueue(t, db, t0, evs...)
		enqueue(t, db, t0.Add(-5*time.Minute), ev("parked", "k", 1))
		ctx, cancel := context.WithCancel(context.Background())
		stopped := make(chan error, 1)
		go func() { stopped <- r.Run(ctx) }()
		testkit.Eventually(t, "95 events", 10*time.Second, func() bool { return s.count() == 95 })
		if err := r.Run(ctx); err == nil {
			t.Fatal("a second Run of the same relay started")
		}
		cancel()
		if err := <-stopped; err != nil {
			t.Fatalf("Run: %v", err)
		}
		if got := s.ids(); len(got) != 95 {
			t.Fatalf("sink got %d", len(got))
		}
		// The lag of a target with nothing pending is 0.
		lag, err := r.Lag(context.Background())
		if err != nil || lag["u"] != 0 {
			t.Fatalf("lag %v, %v", lag, err)
		}
	})
}

func TestStopGivesClaimsBack(t *testing.T) {
	storetest.Each(t, []store.Line{outbox.Schema()}, func(t *testing.T, db *store.DB) {
		clk := clock.NewFake(t0)
		s := &sink{block: make(chan struct{}), entered: make(chan int, 1)}
		r := newRelay(t, db, clk, outbox.Target("u", s, outbox.Unordered, outbox.Workers(1)))
		enqueue(t, db, t0, ev("u", "k", 1))
		ctx, cancel := context.WithCancel(context.Background())
		stopped := make(chan error, 1)
		go func() { stopped <- r.Run(ctx) }()
		<-s.entered
		cancel()
		if err := <-stopped; err != nil {
			t.Fatal(err)
		}
		rec := get(t, db, "u-k-1")
		if rec.Status != outbox.StatusPending || rec.Attempts != 0 {
			t.Fatalf("a claim cut short by Stop: %+v, want pending with no attempt counted", rec)
		}
		// No lease is left: another relay takes it at once.
		other := &sink{}
		flush(t, newRelay(t, db, clk, outbox.Target("u", other, outbox.Unordered)))
		if other.count() != 1 {
			t.Fatal("the given-back event was not claimable at once")
		}
	})
}

// TestStopDuringAClaimGivesItBack: the relay stops while its claim is on
// the server, waiting for a table lock, and the server does not hear of the
// stop (the proxy in front of it refuses the cancel request's connection). A
// claim its client gave up on still runs once the lock goes, and commits:
// rows leased by a relay that never read them, charged an attempt, out of
// every other relay's reach for a whole lease. The relay waits for its claim
// instead and gives back what it took, unsent.
func TestStopDuringAClaimGivesItBack(t *testing.T) {
	_, dsn := storetest.NewSchema(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := store.Open(ctx, dsn, store.WithMigrate(outbox.Schema()), store.WithLogger(testkit.Quiet()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := tcpproxy.New(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	u.Host = proxy.Addr()
	behind, err := store.Open(ctx, u.String(), store.WithLogger(testkit.Quiet()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(behind.Close)
	s := &sink{}
	r := newRelay(t, behind, clock.Real{}, outbox.WithPollInterval(10*time.Millisecond), outbox.WithLagInterval(time.Hour),
		outbox.WithCleanupInterval(time.Hour), outbox.Target("p", s, outbox.PerKey, outbox.Workers(1)))
	// Every connection of the relay's pool is open before the proxy refuses
	// new ones (giving back needs none), and has the claim prepared: its
	// execution is then one round trip, which waits for the lock on the
	// server after the relay has sent all of it.
	pool, claim := outbox.RelayPool(r), outbox.RelayStatements(t)["ClaimHeads"]
	var conns []*pgxpool.Conn
	for range pool.Config().MaxConns {
		c, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Conn().Prepare(ctx, claim, claim); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}
	enqueue(t, db, t0, ev("p", "A", 1), ev("p", "B", 1))
	lock, err := db.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock.Rollback(ctx) }()
	// Plain reads pass; the claim's update waits.
	if _, err := lock.Exec(ctx, "LOCK TABLE msgx_outbox IN EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	waiting := func() int {
		var n int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = 'msgx-outbox-relay' AND wait_event_type = 'Lock' AND datname = current_database()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- r.Run(runCtx) }()
	testkit.Eventually(t, "the claim waiting for the lock", 30*time.Second, func() bool { return waiting() == 1 })
	proxy.Refuse(true)
	stop()
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the relay did not stop")
	}
	// Whatever the claim did on the server is done.
	testkit.Eventually(t, "no statement waiting for the lock", 30*time.Second, func() bool { return waiting() == 0 })
	var leased int
	if err := db.QueryRow(ctx, "SELECT count(*) FROM msgx_outbox WHERE locked_until IS NOT NULL OR attempts > 0").Scan(&leased); err != nil {
		t.Fatal(err)
	}
	if leased != 0 {
		t.Fatalf("%d events leased or charged by a relay that stopped", leased)
	}
	if n := s.count(); n != 0 {
		t.Fatalf("a stopping relay sent %d events", n)
	}
}

func TestLagMetric(t *testing.T) {
	storetest.Each(t, []store.Line{outbox.Schema()}, func(t *testing.T, db *store.DB) {
		clk := clock.NewFake(t0)
		reg := prometheus.NewRegistry()
		r := newRelay(t, db, clk, outbox.WithRegisterer(reg), outbox.Target("u", &sink{}, outbox.Unordered))
		enqueue(t, db, t0.Add(-90*time.Second), ev("u", "k", 1))
		enqueue(t, db, t0, ev("u", "k", 2))
		lag, err := r.Lag(context.Background())
		if err != nil || lag["u"] != 90*time.Second {
			t.Fatalf("lag %v, %v", lag, err)
		}
		if v := testkit.MetricValue(t, reg, "msgx_outbox_lag_seconds", "target", "u"); v != 90 {
			t.Fatalf("lag gauge %v", v)
		}
	})
}

func TestRelayConfiguration(t *testing.T) {
	db := storetest.NewSQLite(t, store.WithMigrate(outbox.Schema()))
	for name, opts := range map[string][]outbox.Option{
		"no target":        nil,
		"twice":            {outbox.Target("a", &sink{}, outbox.Unordered), outbox.Target("a", &sink{}, outbox.PerKey)},
		"no publisher":     {outbox.Target("a", nil, outbox.Unordered)},
		"bad lane":         {outbox.Target("a", &sink{}, 0)},
		"zero batch":       {outbox.Target("a", &sink{}, outbox.Unordered, outbox.Batch(0))},
		"short lease":      {outbox.Target("a", &sink{}, outbox.Unordered), outbox.WithLease(10 * time.Second)},
		"no attempts":      {outbox.Target("a", &sink{}, outbox.Unordered), outbox.WithRetry(backoff.Policy{})},
		"zero poll":        {outbox.Target("a", &sink{}, outbox.Unordered), outbox.WithPollInterval(0)},
		"nil clock":        {outbox.Target("a", &sink{}, outbox.Unordered), outbox.WithClock(nil)},
		"zero flush limit": {outbox.Target("a", &sink{}, outbox.Compacted, outbox.FlushLimit(0))},
	} {
		if _, err := outbox.NewRelay(db, opts...); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := outbox.ParseLaneKind("sideways"); err == nil {
		t.Error("unknown lane name accepted")
	}
	for _, k := range []outbox.LaneKind{outbox.Unordered, outbox.PerKey, outbox.Compacted} {
		if got, err := outbox.ParseLaneKind(k.String()); err != nil || got != k {
			t.Errorf("ParseLaneKind(%q) = %v, %v", k.String(), got, err)
		}
	}
}

// TestThroughTheBrokerPort relays into the in-process broker through the port
// and consumes the events back.
func TestThroughTheBrokerPort(t *testing.T) {
	db := storetest.NewPostgres(t, store.WithMigrate(outbox.Schema()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := broker.New("mem", mem.New(mem.NewServer()), broker.WithLogger(testkit.Quiet()))
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Stop(context.Background()) }()
	var mu sync.Mutex
	var got []broker.Message
	l, err := b.Listen(ctx, broker.Subscription{Topic: "topic.p", Group: "g"}, func(_ context.Context, d *broker.Delivery) error {
		mu.Lock()
		got = append(got, d.Message)
		mu.Unlock()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Stop(context.Background()) }()
	r := newRelay(t, db, clock.NewFake(t0), outbox.Target("p", b, outbox.PerKey))
	enqueue(t, db, t0, ev("p", "A", 1), ev("p", "A", 2))
	flush(t, r)
	testkit.Eventually(t, "two deliveries", 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 2
	})
	mu.Lock()
	defer mu.Unlock()
	if got[0].Header(broker.HeaderEventID) != "p-A-1" || got[1].Header(broker.HeaderEventID) != "p-A-2" ||
		got[0].Key != "A" || got[0].Header(broker.HeaderPartitionKey) != "A" {
		t.Fatalf("deliveries %+v", got)
	}
}

// TestCleanupSkipsRowsAnotherCleanerHolds: a cleaner skips the records
// another one is deleting instead of waiting for its transaction.
func TestCleanupSkipsRowsAnotherCleanerHolds(t *testing.T) {
	db := storetest.NewPostgres(t, store.WithMigrate(outbox.Schema()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	clk := clock.NewFake(t0)
	r := newRelay(t, db, clk, outbox.WithRetention(time.Hour), outbox.WithDBTimeout(2*time.Second),
		outbox.WithLease(time.Minute), outbox.WithPublishTimeout(time.Second),
		outbox.Target("u", &sink{}, outbox.Unordered))
	var evs []outbox.Event
	for i := range 10 {
		evs = append(evs, ev("u", "k", i))
	}
	enqueue(t, db, t0, evs...)
	flush(t, r)
	clk.Advance(2 * time.Hour)
	other, err := db.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Rollback(ctx) }()
	if _, err := other.Exec(ctx, "DELETE FROM msgx_outbox_sent WHERE event_id IN ('u-k-0', 'u-k-1')"); err != nil {
		t.Fatal(err)
	}
	type result struct {
		n   int64
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := r.Cleanup(ctx)
		done <- result{n, err}
	}()
	select {
	case res := <-done:
		if res.err != nil || res.n != 8 {
			t.Fatalf("cleanup beside another cleaner: deleted %d, %v; want the 8 records it does not hold", res.n, res.err)
		}
	case <-time.After(10 * time.Second):
		_ = other.Rollback(ctx)
		<-done
		t.Fatal("cleanup waited for the rows another cleaner holds")
	}
}
