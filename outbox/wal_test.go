package outbox_test

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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

// runner is a relay of either mode: Relay or WALRelay.
type runner interface {
	Run(ctx context.Context) error
}

// start runs r until the returned stop is called (or the test ends).
func start(t *testing.T, r runner) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := r.Run(ctx); err != nil {
			t.Errorf("relay: %v", err)
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

// A slot dropped under a running relay is made again, and the relay says at
// ERROR that what was committed in between is not streamed.
func TestWALRelaySaysWhenItsSlotWasDropped(t *testing.T) {
	e := newWALEnv(t)
	logs := &testkit.Buffer{}
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
