package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// walEnv is a database in the WAL mode with a slot and a publication of its
// own (dropped at cleanup, after the relays stopped).
type walEnv struct {
	db   *store.DB
	dsn  string
	slot string
	pub  string
}

func newWALEnv(t *testing.T) *walEnv {
	t.Helper()
	_, dsn := storetest.NewSchema(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := store.Open(ctx, dsn, store.WithMigrate(outbox.Schema()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	var level string
	if err := db.QueryRow(ctx, "SELECT current_setting('wal_level')").Scan(&level); err != nil {
		t.Fatal(err)
	}
	if level != "logical" {
		t.Fatalf("the test server has wal_level=%s; the WAL mode needs logical (.ci/run sets it; or point MSGX_TEST_POSTGRES at a logical server)", level)
	}
	if err := outbox.SetMode(db, outbox.ModeWAL); err != nil {
		t.Fatal(err)
	}
	e := &walEnv{db: db, dsn: dsn, slot: storetest.UniqueName("msgx_t_"), pub: storetest.UniqueName("msgx_t_")}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, storetest.PostgresURL())
		if err != nil {
			t.Logf("drop slot %s: %v", e.slot, err)
			return
		}
		defer conn.Close(ctx)
		// The holder's walsender may take a moment to end after its
		// connection closed.
		for {
			_, err := conn.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", e.slot)
			if err == nil || ctx.Err() != nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		_, _ = conn.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{e.pub}.Sanitize())
	})
	return e
}

func (e *walEnv) relay(t *testing.T, opts ...outbox.Option) *outbox.WALRelay {
	t.Helper()
	base := []outbox.Option{outbox.WithClock(clock.Real{}), outbox.WithLogger(testkit.Quiet()), outbox.WALSlot(e.slot),
		outbox.WALPublication(e.pub), outbox.WALStandbyPoll(20 * time.Millisecond), outbox.WithPollInterval(10 * time.Millisecond),
		outbox.WithLagInterval(50 * time.Millisecond)}
	r, err := outbox.NewWALRelay(e.db, e.dsn, append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	if err := r.Prepare(context.Background()); err != nil {
		t.Fatal(err)
	}
	return r
}

// start runs r until the returned stop is called (or the test ends).
func start(t *testing.T, r *outbox.WALRelay) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := r.Run(ctx); err != nil {
			t.Errorf("wal relay: %v", err)
		}
	}()
	var once atomic.Bool
	stop = func() {
		if once.CompareAndSwap(false, true) {
			cancel()
			<-done
		}
	}
	t.Cleanup(stop)
	return stop
}

func TestWALEnvelopeRoundTrip(t *testing.T) {
	evs := []outbox.Event{
		{ID: "a", Target: "t", Topic: "x", Key: "k", Payload: []byte("hello"), Headers: map[string]string{"b": "2", "a": "1"}},
		{ID: "b", Target: "t", Topic: "x", Key: "", Type: outbox.Tombstone},
		{ID: "c", Target: "t", Topic: "x", Payload: []byte{}},
	}
	got, err := outbox.WALRoundTrip(t0, evs)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].ID != "a" || string(got[0].Payload) != "hello" || got[0].Headers["a"] != "1" || got[0].Headers["b"] != "2" ||
		!got[0].CreatedAt.Equal(t0) || got[0].Type != outbox.Upsert {
		t.Fatalf("event 0 came back as %+v", got[0])
	}
	if got[1].Type != outbox.Tombstone || got[1].Payload != nil || got[1].Key != "" {
		t.Fatalf("event 1 came back as %+v", got[1])
	}
	if got[2].Payload == nil || len(got[2].Payload) != 0 {
		t.Fatalf("an empty payload came back as %v", got[2].Payload)
	}
	if _, err := outbox.WALDecode([]byte{9, 0}); err == nil {
		t.Fatal("an unknown envelope version was read")
	}
	if _, err := outbox.WALDecode([]byte{1, 5, 1}); err == nil {
		t.Fatal("a truncated envelope was read")
	}
}

func TestWALModeNeedsPostgres(t *testing.T) {
	db := storetest.NewSQLite(t)
	if err := outbox.SetMode(db, outbox.ModeWAL); err == nil {
		t.Fatal("the wal mode was set on SQLite")
	}
}

// TestWALRelayLanes: events enqueued in the WAL mode write no row, reach the
// broker in commit order per key, compacted keys end at their newest state,
// and a rolled-back transaction's events are never sent.
func TestWALRelayLanes(t *testing.T) {
	e := newWALEnv(t)
	ordered, unordered, compacted := &sink{}, &sink{}, &sink{}
	r := e.relay(t, outbox.Target("o", ordered, outbox.PerKey), outbox.Target("u", unordered, outbox.Unordered),
		outbox.Target("c", compacted, outbox.Compacted))
	start(t, r)
	const keys, per = 5, 20
	for s := 1; s <= per; s++ {
		var evs []outbox.Event
		for k := range keys {
			key := fmt.Sprintf("k%d", k)
			evs = append(evs, ev("o", key, s), ev("u", key, s), ev("c", key, s))
		}
		enqueue(t, e.db, t0, evs...)
	}
	rolled := errors.New("rolled back")
	err := e.db.InTx(context.Background(), func(ctx context.Context, tx store.Tx) error {
		if err := outbox.Enqueue(ctx, tx, t0, ev("o", "k0", 999), ev("u", "k0", 999)); err != nil {
			return err
		}
		return rolled
	})
	if !errors.Is(err, rolled) {
		t.Fatal(err)
	}
	enqueue(t, e.db, t0, ev("c", "k0", per+1)) // a last state after the rollback
	tomb := ev("c", "k1", per+1)
	tomb.Type = outbox.Tombstone
	enqueue(t, e.db, t0, tomb)
	testkit.Eventually(t, "every event", 20*time.Second, func() bool {
		return ordered.count() >= keys*per && unordered.count() >= keys*per && lastOf(compacted, "k0") == "c-k0-21" &&
			lastOf(compacted, "k1") == "c-k1-21"
	})
	for _, m := range compacted.messages() {
		if m.msg.Header(broker.HeaderEventID) == "c-k1-21" && (m.msg.Payload != nil || m.msg.Header(broker.HeaderType) != string(outbox.Tombstone)) {
			t.Errorf("the tombstone went out with payload %q, type %q", m.msg.Payload, m.msg.Header(broker.HeaderType))
		}
	}
	for k, ids := range byKey(ordered.messages()) {
		want := make([]string, per)
		for s := range per {
			want[s] = fmt.Sprintf("o-%s-%d", k, s+1)
		}
		if !slices.Equal(ids, want) {
			t.Errorf("per-key lane, key %s: got %v", k, ids)
		}
	}
	if slices.Contains(ordered.ids(), "o-k0-999") || slices.Contains(unordered.ids(), "u-k0-999") {
		t.Error("an event of a rolled-back transaction was sent")
	}
	for k := 2; k < keys; k++ {
		if got := lastOf(compacted, fmt.Sprintf("k%d", k)); got != fmt.Sprintf("c-k%d-%d", k, per) {
			t.Errorf("compacted key k%d ends at %s", k, got)
		}
	}
	if n := compacted.count(); n > keys*per {
		t.Errorf("the compacted lane sent %d events, more than were enqueued", n)
	}
	var rows int
	if err := e.db.QueryRow(context.Background(), "SELECT count(*) FROM msgx_outbox").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Errorf("the wal mode wrote %d outbox rows", rows)
	}
}

func lastOf(s *sink, key string) string {
	ids := byKey(s.messages())[key]
	if len(ids) == 0 {
		return ""
	}
	return ids[len(ids)-1]
}

// TestWALRelayRejectedDeadHoldsKey: an event the broker refuses for itself
// is DEAD in msgx_outbox; the later events of its key wait behind it in the
// table, other keys flow; a replay sends it and then the held ones, in order.
func TestWALRelayRejectedDeadHoldsKey(t *testing.T) {
	e := newWALEnv(t)
	var refuse atomic.Bool
	refuse.Store(true)
	s := &sink{fail: func(_ string, msgs []*broker.Message) (bool, error) {
		for _, m := range msgs {
			if m.Header(broker.HeaderEventID) == "o-A-2" && refuse.Load() {
				return false, driver.Classify(driver.Rejected, errors.New("too large"))
			}
		}
		return true, nil
	}}
	r := e.relay(t, outbox.Target("o", s, outbox.PerKey))
	start(t, r)
	for i := 1; i <= 4; i++ {
		enqueue(t, e.db, t0, ev("o", "A", i), ev("o", "B", i))
	}
	testkit.Eventually(t, "key B and the head of A", 20*time.Second, func() bool {
		return len(byKey(s.messages())["B"]) == 4 && countStatus(t, e.db, outbox.StatusDead) == 1 &&
			countStatus(t, e.db, outbox.StatusPending) == 2
	})
	if got := byKey(s.messages())["A"]; !slices.Equal(got, []string{"o-A-1"}) {
		t.Fatalf("key A sent %v while its second event is dead, want only o-A-1", got)
	}
	if rec := get(t, e.db, "o-A-2"); rec.Status != outbox.StatusDead {
		t.Fatalf("o-A-2 is %s, want DEAD", rec.Status)
	}
	if n := countStatus(t, e.db, outbox.StatusPending); n != 2 {
		t.Fatalf("%d events wait in the table, want A's 3 and 4", n)
	}
	refuse.Store(false)
	if _, err := outbox.Replay(context.Background(), e.db, time.Now(), outbox.ReplayRequest{EventIDs: []string{"o-A-2"}, Actor: "test", Reason: "the broker takes it now"}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "key A after the replay", 20*time.Second, func() bool { return len(byKey(s.messages())["A"]) == 4 })
	if got := byKey(s.messages())["A"]; !slices.Equal(got, []string{"o-A-1", "o-A-2", "o-A-3", "o-A-4"}) {
		t.Fatalf("key A sent %v", got)
	}
}

// TestWALRelayOutagePauses: while the broker is unavailable nothing is
// charged and nothing goes to the table; the stream resumes after it.
func TestWALRelayOutagePauses(t *testing.T) {
	e := newWALEnv(t)
	var down atomic.Bool
	down.Store(true)
	var tries atomic.Int32
	s := &sink{fail: func(string, []*broker.Message) (bool, error) {
		if down.Load() {
			tries.Add(1)
			return false, driver.Classify(driver.Unavailable, errors.New("connection refused"))
		}
		return true, nil
	}}
	r := e.relay(t, outbox.Target("o", s, outbox.PerKey), outbox.Target("u", s, outbox.Unordered))
	start(t, r)
	enqueue(t, e.db, t0, ev("o", "A", 1), ev("u", "A", 1), ev("o", "A", 2))
	testkit.Eventually(t, "the pause", 20*time.Second, func() bool { return r.Status().Paused && tries.Load() >= 2 })
	var rows int
	if err := e.db.QueryRow(context.Background(), "SELECT count(*) FROM msgx_outbox").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Fatalf("%d events went to the table during an outage", rows)
	}
	down.Store(false)
	testkit.Eventually(t, "the events after the outage", 20*time.Second, func() bool { return s.count() == 3 })
	// The per-key target's events in order; the other target's in any
	// place (targets are relayed side by side).
	got := byKey(s.messages())["A"]
	perKey := slices.DeleteFunc(slices.Clone(got), func(id string) bool { return !strings.HasPrefix(id, "o-") })
	if !slices.Equal(perKey, []string{"o-A-1", "o-A-2"}) || !slices.Contains(got, "u-A-1") {
		t.Fatalf("sent %v", got)
	}
	testkit.Eventually(t, "the resume", 5*time.Second, func() bool { return !r.Status().Paused })
}

// TestWALSlotTakeover: one relay holds the slot, another stands by and
// takes it over when the first stops; the confirmed events are not sent
// again, the rest are.
func TestWALSlotTakeover(t *testing.T) {
	e := newWALEnv(t)
	s1, s2 := &sink{}, &sink{}
	r1 := e.relay(t, outbox.Target("u", s1, outbox.Unordered))
	stop1 := start(t, r1)
	testkit.Eventually(t, "the first relay to hold the slot", 10*time.Second, func() bool { return r1.Status().Holder })
	r2 := e.relay(t, outbox.Target("u", s2, outbox.Unordered))
	start(t, r2)
	// The event and a position inside its transaction: once the slot has
	// confirmed past it, the first relay has confirmed the event.
	var inside string
	if err := e.db.InTx(context.Background(), func(ctx context.Context, tx store.Tx) error {
		if err := outbox.Enqueue(ctx, tx, t0, ev("u", "A", 1)); err != nil {
			return err
		}
		return tx.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&inside)
	}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the first event", 10*time.Second, func() bool { return s1.count() == 1 })
	testkit.Eventually(t, "the slot to confirm it", 10*time.Second, func() bool {
		var past bool
		if err := e.db.QueryRow(context.Background(), "SELECT confirmed_flush_lsn >= $1::pg_lsn FROM pg_replication_slots WHERE slot_name = $2",
			inside, e.slot).Scan(&past); err != nil {
			t.Fatal(err)
		}
		return past
	})
	testkit.Eventually(t, "the standby to see the holder", 10*time.Second, func() bool {
		st := r2.Status()
		return !st.Holder && st.Active && st.ActivePID != 0
	})
	stop1()
	began := time.Now()
	testkit.Eventually(t, "the takeover", 10*time.Second, func() bool { return r2.Status().Holder })
	t.Logf("takeover after %v", time.Since(began))
	enqueue(t, e.db, t0, ev("u", "A", 2))
	testkit.Eventually(t, "the event after the takeover", 10*time.Second, func() bool { return slices.Contains(s2.ids(), "u-A-2") })
	if slices.Contains(s2.ids(), "u-A-1") {
		t.Errorf("the event the first relay confirmed was sent again: %v", s2.ids())
	}
}

// The store's DSN may carry the pool's own parameters: the replication
// connection does not send them to the server as settings.
func TestWALRelayDSNWithPoolParameters(t *testing.T) {
	e := newWALEnv(t)
	e.dsn += "&pool_max_conns=4"
	s := &sink{}
	r := e.relay(t, outbox.Target("u", s, outbox.Unordered))
	start(t, r)
	enqueue(t, e.db, t0, ev("u", "A", 1))
	testkit.Eventually(t, "the event", 10*time.Second, func() bool { return s.count() == 1 })
}

// syncBuffer is a log destination the relay's goroutines may share.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A slot dropped under a running relay is made again, and the relay says at
// ERROR that what was committed in between is not streamed.
func TestWALRelaySaysWhenItsSlotWasDropped(t *testing.T) {
	e := newWALEnv(t)
	logs := &syncBuffer{}
	s := &sink{}
	r := e.relay(t, outbox.Target("u", s, outbox.Unordered), outbox.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	start(t, r)
	testkit.Eventually(t, "the relay to hold the slot", 10*time.Second, func() bool { return r.Status().Holder })
	ctx := context.Background()
	testkit.Eventually(t, "the slot's drop", 10*time.Second, func() bool {
		_, _ = e.db.Exec(ctx, "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active", e.slot)
		_, err := e.db.Exec(ctx, "SELECT pg_drop_replication_slot($1)", e.slot)
		return err == nil
	})
	testkit.Eventually(t, "the relay to say so", 20*time.Second, func() bool {
		return strings.Contains(logs.String(), "level=ERROR") && strings.Contains(logs.String(), "SLOT DISAPPEARED")
	})
	testkit.Eventually(t, "the relay on its new slot", 20*time.Second, func() bool { return r.Status().Holder })
	enqueue(t, e.db, t0, ev("u", "A", 1))
	testkit.Eventually(t, "an event on the new slot", 10*time.Second, func() bool { return s.count() == 1 })
}
