package outbox_test

// The outbox's behaviour suite, written once and run on both modes of
// PostgreSQL (forEachMode): the table mode (events are rows of msgx_outbox, a
// Relay claims and sends them) and the WAL mode (Enqueue emits a logical
// decoding message, a WALRelay streams it from a slot). Every test runs its
// relays with Run on the real clock and waits for conditions with bounded
// timeouts; where the modes differ by design, the test says which guarantee
// each mode gives in a commented switch on h.mode().

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/msgx/msgx/backoff"
	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// Bounds of the suite's waits: patience for what must happen (generous: the
// machine may be loaded and the tests run with -race), quiet for the period
// in which what must not happen does not.
const (
	patience = 30 * time.Second
	quiet    = 500 * time.Millisecond
)

// harness is one outbox mode over a fresh PostgreSQL schema.
type harness interface {
	mode() outbox.Mode
	db() *store.DB
	// relay builds a relay of the mode over the harness's database (in the
	// WAL mode on the harness's slot, so that every relay of a test shares
	// it), with the given targets and options. It does not run it.
	relay(t *testing.T, opts ...outbox.Option) *modeRelay
	// enqueue commits evs in one transaction and returns a condition that
	// holds once a relay has finished with them for good: no restart or
	// takeover sends them again.
	enqueue(t *testing.T, evs ...outbox.Event) (finished func() bool)
}

// forEachMode runs fn as a subtest per mode, each on a database of its own.
func forEachMode(t *testing.T, fn func(t *testing.T, h harness)) {
	t.Run("table", func(t *testing.T) {
		fn(t, &tableHarness{d: storetest.NewPostgres(t, store.WithMigrate(outbox.Schema()))})
	})
	t.Run("wal", func(t *testing.T) { fn(t, &walHarness{e: newWALEnv(t)}) })
}

// modeRelay is a relay of a harness's mode.
type modeRelay struct {
	// table is the table mode's relay; in the WAL mode the WAL relay's own
	// table relay, which sends what the stream hands to msgx_outbox.
	table *outbox.Relay
	wal   *outbox.WALRelay // nil in the table mode
}

// start runs the relay until stop is called (or the test ends).
func (r *modeRelay) start(t *testing.T) (stop func()) {
	t.Helper()
	if r.wal != nil {
		return start(t, r.wal)
	}
	return start(t, r.table)
}

// paused reports whether the relay waits for an unavailable broker: a
// paused target of the table relay, the paused stream of the WAL relay.
func (r *modeRelay) paused() bool {
	if r.wal != nil {
		return r.wal.Status().Paused
	}
	for _, ts := range r.table.Targets() {
		if ts.Paused {
			return true
		}
	}
	return false
}

type tableHarness struct{ d *store.DB }

func (h *tableHarness) mode() outbox.Mode { return outbox.ModeTable }
func (h *tableHarness) db() *store.DB     { return h.d }

func (h *tableHarness) relay(t *testing.T, opts ...outbox.Option) *modeRelay {
	t.Helper()
	base := []outbox.Option{outbox.WithPollInterval(10 * time.Millisecond), outbox.WithLagInterval(50 * time.Millisecond)}
	return &modeRelay{table: newRelay(t, h.d, clock.Real{}, append(base, opts...)...)}
}

// enqueue's events are finished once none is PENDING: sent, covered or dead.
func (h *tableHarness) enqueue(t *testing.T, evs ...outbox.Event) func() bool {
	t.Helper()
	enqueue(t, h.d, t0, evs...)
	return func() bool {
		for _, e := range evs {
			if get(t, h.d, e.ID).Status == outbox.StatusPending {
				return false
			}
		}
		return true
	}
}

type walHarness struct{ e *walEnv }

func (h *walHarness) mode() outbox.Mode { return outbox.ModeWAL }
func (h *walHarness) db() *store.DB     { return h.e.db }

func (h *walHarness) relay(t *testing.T, opts ...outbox.Option) *modeRelay {
	t.Helper()
	w := h.e.relay(t, opts...)
	return &modeRelay{table: w.Table(), wal: w}
}

// enqueue's events are finished once the slot's confirmed position is past
// a position inside their transaction: the relay confirms only the ends of
// transactions it has handled, in commit order.
func (h *walHarness) enqueue(t *testing.T, evs ...outbox.Event) func() bool {
	t.Helper()
	var inside string
	if err := h.e.db.InTx(context.Background(), func(ctx context.Context, tx store.Tx) error {
		if err := outbox.Enqueue(ctx, tx, t0, evs...); err != nil {
			return err
		}
		return tx.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&inside)
	}); err != nil {
		t.Fatal(err)
	}
	return func() bool {
		var past bool
		if err := h.e.db.QueryRow(context.Background(),
			"SELECT coalesce(confirmed_flush_lsn >= $1::pg_lsn, false) FROM pg_replication_slots WHERE slot_name = $2",
			inside, h.e.slot).Scan(&past); err != nil {
			t.Fatal(err)
		}
		return past
	}
}

// charged is how many attempts the outbox charged an event without
// delivering it: its record's attempts, less the send that delivered it. In
// the WAL mode an event the stream never handed to the table has no record:
// nothing was charged. Ask it while no relay holds the event.
func charged(t *testing.T, h harness, id string) int {
	t.Helper()
	rec, err := outbox.Get(context.Background(), h.db(), id)
	if errors.Is(err, outbox.ErrNotFound) && h.mode() == outbox.ModeWAL {
		return 0
	}
	if err != nil {
		t.Fatalf("record of %s: %v", id, err)
	}
	if rec.Status == outbox.StatusSent {
		return rec.Attempts - 1
	}
	return rec.Attempts
}

// outboxRows counts the rows of msgx_outbox, whatever their status.
func outboxRows(t *testing.T, db *store.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRow(context.Background(), "SELECT count(*) FROM msgx_outbox").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// eventIDs are the ids of evs.
func eventIDs(evs []outbox.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.ID
	}
	return out
}

// hasAll reports whether the sink got every id.
func hasAll(s *sink, ids []string) bool {
	got := s.ids()
	for _, id := range ids {
		if !slices.Contains(got, id) {
			return false
		}
	}
	return true
}

// seqOf is the sequence number of an id made by ev ("target-key-seq").
func seqOf(t *testing.T, id string) int {
	t.Helper()
	n, err := strconv.Atoi(id[strings.LastIndexByte(id, '-')+1:])
	if err != nil {
		t.Fatalf("event id %q: %v", id, err)
	}
	return n
}

// wantOnce fails unless the sink got every id of want exactly once and
// nothing else.
func wantOnce(t *testing.T, what string, s *sink, want []string) {
	t.Helper()
	got := slices.Sorted(slices.Values(s.ids()))
	if w := slices.Sorted(slices.Values(want)); !slices.Equal(got, w) {
		t.Errorf("%s: got %d sends %v, want each of %d events once: %v", what, len(got), got, len(w), w)
	}
}

// TestModesLanes: events committed while the relay runs reach the broker,
// every one on the unordered and per-key lanes (a per-key target's keys in
// commit order); a compacted key ends at its newest state, tombstone
// included, never going back to an older one; events without a key are each
// sent on every lane; a rolled-back transaction's events are never sent.
func TestModesLanes(t *testing.T) {
	forEachMode(t, func(t *testing.T, h harness) {
		ordered, unordered, compacted := &sink{}, &sink{}, &sink{}
		r := h.relay(t, outbox.Target("o", ordered, outbox.PerKey, outbox.Batch(3)),
			outbox.Target("u", unordered, outbox.Unordered, outbox.Batch(7)),
			outbox.Target("c", compacted, outbox.Compacted, outbox.FlushLimit(2), outbox.FlushPeriod(20*time.Millisecond)))
		r.start(t)
		const keys, per = 5, 20
		var wantO, wantU, wantKeyless []string
		for s := 1; s <= per; s++ {
			var evs []outbox.Event
			for k := range keys {
				key := fmt.Sprintf("k%d", k)
				evs = append(evs, ev("o", key, s), ev("u", key, s), ev("c", key, s))
			}
			evs = append(evs, ev("o", "", s), ev("u", "", s), ev("c", "", s))
			for _, e := range evs {
				switch e.Target {
				case "o":
					wantO = append(wantO, e.ID)
				case "u":
					wantU = append(wantU, e.ID)
				case "c":
					if e.Key == "" {
						wantKeyless = append(wantKeyless, e.ID)
					}
				}
			}
			h.enqueue(t, evs...)
		}
		rolled := errors.New("rolled back")
		err := h.db().InTx(context.Background(), func(ctx context.Context, tx store.Tx) error {
			if err := outbox.Enqueue(ctx, tx, t0, ev("o", "k0", 999), ev("u", "k0", 999), ev("c", "rolled", 999)); err != nil {
				return err
			}
			return rolled
		})
		if !errors.Is(err, rolled) {
			t.Fatal(err)
		}
		h.enqueue(t, ev("c", "k0", per+1)) // a last state after the rollback
		tomb := ev("c", "k1", per+1)
		tomb.Type = outbox.Tombstone
		h.enqueue(t, tomb)
		last := map[string]string{"k0": "c-k0-21", "k1": "c-k1-21"}
		for k := 2; k < keys; k++ {
			last[fmt.Sprintf("k%d", k)] = fmt.Sprintf("c-k%d-%d", k, per)
		}
		testkit.Eventually(t, "every event", patience, func() bool {
			for k, id := range last {
				if lastOf(compacted, k) != id {
					return false
				}
			}
			return hasAll(ordered, wantO) && hasAll(unordered, wantU) && hasAll(compacted, wantKeyless)
		})
		wantOnce(t, "per-key lane", ordered, wantO)
		wantOnce(t, "unordered lane", unordered, wantU)
		for k, ids := range byKey(ordered.messages()) {
			if k == "" {
				continue // no order without a key
			}
			want := make([]string, per)
			for s := range per {
				want[s] = fmt.Sprintf("o-%s-%d", k, s+1)
			}
			if !slices.Equal(ids, want) {
				t.Errorf("per-key lane, key %s: got %v", k, ids)
			}
		}
		for k, ids := range byKey(compacted.messages()) {
			if k == "" {
				if got := slices.Sorted(slices.Values(ids)); !slices.Equal(got, slices.Sorted(slices.Values(wantKeyless))) {
					t.Errorf("compacted lane, events without a key: got %v, want each once", got)
				}
				continue
			}
			for i := 1; i < len(ids); i++ {
				if seqOf(t, ids[i]) <= seqOf(t, ids[i-1]) {
					t.Errorf("compacted key %s went back in time: %v", k, ids)
				}
			}
		}
		for _, m := range compacted.messages() {
			if m.msg.Header(broker.HeaderEventID) == "c-k1-21" && (m.msg.Payload != nil || m.msg.Header(broker.HeaderType) != string(outbox.Tombstone)) {
				t.Errorf("the tombstone went out with payload %q, type %q", m.msg.Payload, m.msg.Header(broker.HeaderType))
			}
		}
		if n := compacted.count(); n > (keys+1)*per+2 {
			t.Errorf("the compacted lane sent %d events, more than were enqueued", n)
		}
		for _, s := range []*sink{ordered, unordered, compacted} {
			if slices.ContainsFunc(s.ids(), func(id string) bool { return strings.HasSuffix(id, "-999") }) {
				t.Errorf("an event of a rolled-back transaction was sent: %v", s.ids())
			}
		}
		switch h.mode() {
		case outbox.ModeTable:
			// The events were rows; each sent or covered one leaves the table.
			testkit.Eventually(t, "every row done", patience, func() bool { return outboxRows(t, h.db()) == 0 })
		case outbox.ModeWAL:
			// The events were never rows.
			if n := outboxRows(t, h.db()); n != 0 {
				t.Errorf("the wal mode wrote %d outbox rows", n)
			}
		}
	})
}

// TestModesDeadEventHoldsItsKey: on a per-key target the broker rejects one
// event of key A, which goes DEAD at once. A's later events, those committed
// with it and after it, wait behind it (BlockedKeys reports them) while key
// B flows; the replay of the dead event sends it and then A's waiting
// events, in order.
func TestModesDeadEventHoldsItsKey(t *testing.T) {
	forEachMode(t, func(t *testing.T, h harness) {
		ctx := context.Background()
		var reject atomic.Value
		reject.Store(map[string]bool{"p-A-2": true})
		s := rejecting(&reject)
		r := h.relay(t, outbox.Target("p", s, outbox.PerKey))
		r.start(t)
		for i := 1; i <= 4; i++ {
			h.enqueue(t, ev("p", "A", i), ev("p", "B", i))
		}
		testkit.Eventually(t, "key B, the head of A and its dead second event", patience, func() bool {
			return len(byKey(s.messages())["B"]) == 4 && countStatus(t, h.db(), outbox.StatusDead) == 1 &&
				countStatus(t, h.db(), outbox.StatusPending) == 2
		})
		h.enqueue(t, ev("p", "A", 5), ev("p", "B", 5))
		testkit.Eventually(t, "key B's next event, A's waiting", patience, func() bool {
			return len(byKey(s.messages())["B"]) == 5 && countStatus(t, h.db(), outbox.StatusPending) == 3
		})
		testkit.Consistently(t, "key A held behind its dead event", quiet, func() bool {
			return slices.Equal(byKey(s.messages())["A"], []string{"p-A-1"})
		})
		if rec := get(t, h.db(), "p-A-2"); rec.Status != outbox.StatusDead || rec.Attempts != 1 || !strings.Contains(rec.LastError, "rejected p-A-2") {
			t.Fatalf("A:2 %+v, want DEAD at its first attempt", rec)
		}
		for _, id := range []string{"p-A-3", "p-A-4", "p-A-5"} {
			if rec := get(t, h.db(), id); rec.Status != outbox.StatusPending || rec.Attempts != 0 {
				t.Fatalf("%s: %+v, want PENDING and never tried", id, rec)
			}
		}
		blocked, err := outbox.BlockedKeys(ctx, h.db(), "p", 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(blocked) != 1 || blocked[0].Key != "A" || blocked[0].EventID != "p-A-2" || blocked[0].Waiting != 3 {
			t.Fatalf("blocked keys %+v, want A blocked by p-A-2 with 3 waiting", blocked)
		}

		reject.Store(map[string]bool{})
		if _, err := outbox.Replay(ctx, h.db(), time.Now(), outbox.ReplayRequest{EventIDs: []string{"p-A-2"}, Actor: "ops", Reason: "fixed"}); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, "key A after the replay", patience, func() bool { return len(byKey(s.messages())["A"]) == 5 })
		got := byKey(s.messages())
		if want := []string{"p-A-1", "p-A-2", "p-A-3", "p-A-4", "p-A-5"}; !slices.Equal(got["A"], want) {
			t.Fatalf("key A on the wire: %v, want %v", got["A"], want)
		}
		if want := []string{"p-B-1", "p-B-2", "p-B-3", "p-B-4", "p-B-5"}; !slices.Equal(got["B"], want) {
			t.Fatalf("key B on the wire: %v, want %v", got["B"], want)
		}
		if blocked, err := outbox.BlockedKeys(ctx, h.db(), "p", 10); err != nil || len(blocked) != 0 {
			t.Fatalf("blocked keys after the replay: %+v %v", blocked, err)
		}
	})
}

// TestModesCompaction: a compacted key delivers its newest state (a
// tombstone as an empty value) and never goes back in time: a failed newest
// state is covered by a newer one, and the replay of a dead state after a
// newer one was sent is recorded as covered, not sent. A dead state with
// nothing newer is sent by its replay.
func TestModesCompaction(t *testing.T) {
	forEachMode(t, func(t *testing.T, h harness) {
		ctx := context.Background()
		var fail atomic.Value // event id -> the broker's error for it
		fail.Store(map[string]error{})
		s := &sink{fail: func(_ string, msgs []*broker.Message) (bool, error) {
			errs := fail.Load().(map[string]error)
			for _, m := range msgs {
				if err := errs[m.Header(broker.HeaderEventID)]; err != nil {
					return false, err
				}
			}
			return true, nil
		}}
		up := func(key string, v int) outbox.Event { return ev("c", key, v) }
		tomb := func(key string, v int) outbox.Event {
			e := ev("c", key, v)
			e.Type = outbox.Tombstone
			return e
		}
		// Retries are never due within the test: a failed state waits until a
		// newer one covers it.
		opts := []outbox.Option{outbox.WithRetry(backoff.Policy{MaxAttempts: 5, Initial: time.Hour, Max: time.Hour}),
			outbox.Target("c", s, outbox.Compacted, outbox.FlushPeriod(20*time.Millisecond))}

		// A backlog committed before the relay starts (in the WAL mode after
		// its slot exists: relay prepares it), a transaction per event.
		r := h.relay(t, opts...)
		for _, e := range []outbox.Event{up("A", 1), up("B", 1), tomb("C", 1), up("A", 2), tomb("B", 2), up("C", 2), up("A", 3),
			up("D", 1), up("", 1), up("", 2)} {
			h.enqueue(t, e)
		}
		r.start(t)
		newest := map[string]string{"A": "c-A-3", "B": "c-B-2", "C": "c-C-2", "D": "c-D-1"}
		testkit.Eventually(t, "the newest states", patience, func() bool {
			for k, id := range newest {
				if lastOf(s, k) != id {
					return false
				}
			}
			return hasAll(s, []string{"c--1", "c--2"})
		})
		got := map[string]broker.Message{}
		for _, m := range s.messages() {
			got[m.msg.Header(broker.HeaderEventID)] = m.msg
		}
		if m := got["c-A-3"]; string(m.Payload) != "A:3" || m.Key != "A" {
			t.Fatalf("A: want its newest state A:3, got %+v", m)
		}
		if m := got["c-B-2"]; m.Payload != nil || m.Header(broker.HeaderType) != string(outbox.Tombstone) {
			t.Fatalf("B: want a tombstone with an empty value, got %+v", m)
		}
		if m := got["c-C-2"]; string(m.Payload) != "C:2" || m.Header(broker.HeaderType) != string(outbox.Upsert) {
			t.Fatalf("C: a tombstone followed by an upsert is the upsert, got %+v", m)
		}
		switch h.mode() {
		case outbox.ModeTable:
			// The table mode compacts its whole backlog: one state per key
			// (and every event without a key), the older ones covered.
			wantOnce(t, "the backlog", s, []string{"c-A-3", "c-B-2", "c-C-2", "c-D-1", "c--1", "c--2"})
			a3 := get(t, h.db(), "c-A-3")
			// Covered by the statement that records A:3's send, which may
			// come a moment after the broker has it.
			testkit.Eventually(t, "A:3's send recorded", patience, func() bool { return get(t, h.db(), "c-A-3").Status == outbox.StatusSent })
			for _, id := range []string{"c-A-1", "c-A-2"} {
				if rec := get(t, h.db(), id); rec.Status != outbox.StatusCovered || rec.CoveredBy == nil || *rec.CoveredBy != a3.Seq {
					t.Fatalf("%s: %+v, want COVERED by %d", id, rec, a3.Seq)
				}
			}
		case outbox.ModeWAL:
			// The WAL mode compacts each batch it streams, not the backlog as a
			// whole: older states may go out too, always before newer ones
			// (checked below for the whole test).
		}

		// A failed newest state waits for its retry; a newer state arriving
		// meanwhile is sent and covers it.
		fail.Store(map[string]error{"c-G-2": errors.New("down")})
		h.enqueue(t, up("G", 1), up("G", 2))
		testkit.Eventually(t, "G:2 to fail once", patience, func() bool {
			rec, err := outbox.Get(ctx, h.db(), "c-G-2")
			return err == nil && rec.Attempts == 1 && rec.LastError == "down" && rec.Status == outbox.StatusPending
		})
		h.enqueue(t, up("G", 3))
		testkit.Eventually(t, "G:3", patience, func() bool { return lastOf(s, "G") == "c-G-3" })
		g3 := get(t, h.db(), "c-G-3")
		testkit.Eventually(t, "G:2 covered", patience, func() bool { return get(t, h.db(), "c-G-2").Status == outbox.StatusCovered })
		if rec := get(t, h.db(), "c-G-2"); rec.Attempts != 1 || rec.LastError != "down" || rec.CoveredBy == nil || *rec.CoveredBy != g3.Seq {
			t.Fatalf("the failed G:2: %+v, want COVERED by %d with its failed attempt", rec, g3.Seq)
		}
		if got := byKey(s.messages())["G"]; !slices.Equal(got, []string{"c-G-3"}) {
			t.Fatalf("key G on the wire: %v, want only its newest state", got)
		}

		// The broker rejects E:1 and F:1: DEAD at once. E gets a newer state,
		// which is sent; F does not.
		fail.Store(map[string]error{
			"c-E-1": driver.Classify(driver.Rejected, errors.New("too large")),
			"c-F-1": driver.Classify(driver.Rejected, errors.New("too large")),
		})
		h.enqueue(t, up("E", 1))
		h.enqueue(t, up("F", 1))
		testkit.Eventually(t, "E:1 and F:1 dead", patience, func() bool { return countStatus(t, h.db(), outbox.StatusDead) == 2 })
		fail.Store(map[string]error{})
		h.enqueue(t, up("E", 2))
		// Sent, and recorded as the key's newest sent state (in the WAL mode
		// by the table relay: the dead E:1 holds the key in the table).
		testkit.Eventually(t, "E:2 sent", patience, func() bool {
			rec, err := outbox.Get(ctx, h.db(), "c-E-2")
			return err == nil && rec.Status == outbox.StatusSent
		})
		// The replay of E:1 would put E back to an older state: covered.
		res, err := outbox.Replay(ctx, h.db(), time.Now(), outbox.ReplayRequest{
			EventIDs: []string{"c-E-1", "c-F-1"}, Actor: "ops@example", Reason: "broker fixed"})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(res.Covered, []string{"c-E-1"}) || !slices.Equal(res.Replayed, []string{"c-F-1"}) {
			t.Fatalf("replay: %+v, want E:1 covered and F:1 replayed", res)
		}
		testkit.Eventually(t, "F:1 after its replay", patience, func() bool { return lastOf(s, "F") == "c-F-1" })
		if rec, e2 := get(t, h.db(), "c-E-1"), get(t, h.db(), "c-E-2"); rec.Status != outbox.StatusCovered || rec.CoveredBy == nil || *rec.CoveredBy != e2.Seq {
			t.Fatalf("E:1 after the replay: %+v, want COVERED by %d", rec, e2.Seq)
		}
		testkit.Consistently(t, "E at its newest state", quiet, func() bool { return slices.Equal(byKey(s.messages())["E"], []string{"c-E-2"}) })

		for k, ids := range byKey(s.messages()) {
			if k == "" {
				continue
			}
			for i := 1; i < len(ids); i++ {
				if seqOf(t, ids[i]) <= seqOf(t, ids[i-1]) {
					t.Errorf("key %s went back in time: %v", k, ids)
				}
			}
		}
	})
}

// TestModesReplaySendsTheSameEvent: an event the broker refused is DEAD;
// its replay (by id, or every dead event of the target) sends it again as
// the same message: the same event id, key, type, headers and payload.
func TestModesReplaySendsTheSameEvent(t *testing.T) {
	forEachMode(t, func(t *testing.T, h harness) {
		ctx := context.Background()
		var refuse atomic.Bool
		refuse.Store(true)
		// The wire records every send, refused or taken.
		wire := &sink{fail: func(string, []*broker.Message) (bool, error) {
			if refuse.Load() {
				return true, driver.Classify(driver.Rejected, errors.New("refused"))
			}
			return true, nil
		}}
		h.relay(t, outbox.Target("u", wire, outbox.Unordered)).start(t)
		evs := []outbox.Event{ev("u", "k", 1), ev("u", "k", 2)}
		for i := range evs {
			evs[i].Headers = map[string]string{"tenant-id": "t" + strconv.Itoa(i)}
		}
		h.enqueue(t, evs...)
		testkit.Eventually(t, "both events dead", patience, func() bool { return countStatus(t, h.db(), outbox.StatusDead) == 2 })
		dead, err := outbox.ListDead(ctx, h.db(), "u", 0, 10)
		if err != nil || len(dead) != 2 {
			t.Fatalf("ListDead: %+v %v", dead, err)
		}
		sends := func(id string) []broker.Message {
			var out []broker.Message
			for _, m := range wire.messages() {
				if m.msg.Header(broker.HeaderEventID) == id {
					out = append(out, m.msg)
				}
			}
			return out
		}
		before := map[string]int{"u-k-1": len(sends("u-k-1")), "u-k-2": len(sends("u-k-2"))}
		refuse.Store(false)
		for _, req := range []outbox.ReplayRequest{
			{EventIDs: []string{"u-k-1"}, Actor: "ops", Reason: "by id"},
			{Target: "u", Actor: "ops", Reason: "the target"},
		} {
			res, err := outbox.Replay(ctx, h.db(), time.Now(), req)
			if err != nil || len(res.Replayed) != 1 {
				t.Fatalf("replay %+v: %+v %v", req, res, err)
			}
			id := res.Replayed[0]
			testkit.Eventually(t, id+" sent again", patience, func() bool { return len(sends(id)) == before[id]+1 })
			all := sends(id)
			first, again := all[0], all[len(all)-1]
			if again.Key != first.Key || string(again.Payload) != string(first.Payload) || !maps.Equal(again.Headers, first.Headers) {
				t.Fatalf("%s: first sent as %+v, replayed as %+v", id, first, again)
			}
			testkit.Eventually(t, id+" recorded as sent", patience, func() bool { return get(t, h.db(), id).Status == outbox.StatusSent })
		}
		for i, e := range evs {
			m := sends(e.ID)[0]
			if m.Header("tenant-id") != "t"+strconv.Itoa(i) || m.Header(broker.HeaderType) != string(outbox.Upsert) || string(m.Payload) != "k:"+strconv.Itoa(i+1) {
				t.Fatalf("%s went out as %+v", e.ID, m)
			}
		}
		if dead, err := outbox.ListDead(ctx, h.db(), "u", 0, 10); err != nil || len(dead) != 0 {
			t.Fatalf("dead after the replays: %+v %v", dead, err)
		}
	})
}

// TestModesStopIsNotAnAttempt: a relay stopped while its sends are in
// flight (the broker stored them, the confirmation never came) charges no
// attempt; a new relay then delivers everything, the events sent a second
// time with their own event ids, each key's events first arriving in order.
func TestModesStopIsNotAnAttempt(t *testing.T) {
	forEachMode(t, func(t *testing.T, h harness) {
		s := &sink{}
		entered := make(chan struct{}, 1)
		unconfirmed := publisherFunc(func(ctx context.Context, topic string, msgs ...*broker.Message) error {
			_ = s.SendConfirmed(ctx, topic, msgs...)
			select {
			case entered <- struct{}{}:
			default:
			}
			<-ctx.Done()
			return ctx.Err()
		})
		stop := h.relay(t, outbox.Target("p", unconfirmed, outbox.PerKey), outbox.Target("u", unconfirmed, outbox.Unordered)).start(t)
		var evs []outbox.Event
		for i := 1; i <= 5; i++ {
			for _, k := range []string{"A", "B"} {
				evs = append(evs, ev("p", k, i), ev("u", k, i))
			}
		}
		h.enqueue(t, evs...)
		select {
		case <-entered:
		case <-time.After(patience):
			t.Fatal("no send began")
		}
		stop()
		for _, e := range evs {
			if n := charged(t, h, e.ID); n != 0 {
				t.Fatalf("%s was charged %d attempts by a relay that stopped", e.ID, n)
			}
		}
		switch h.mode() {
		case outbox.ModeTable:
			// The stopping relay gave its claims back: pending, no lease left.
			if n := countStatus(t, h.db(), outbox.StatusPending); n != len(evs) {
				t.Fatalf("%d events pending after the stop, want %d", n, len(evs))
			}
		case outbox.ModeWAL:
			// Nothing was handed to the table, nothing confirmed: the slot
			// streams the events again.
			if n := outboxRows(t, h.db()); n != 0 {
				t.Fatalf("%d events went to the table", n)
			}
		}
		stored := s.count()
		// Well within the table mode's lease (a minute): the claims were
		// given back, not left to expire.
		h.relay(t, outbox.Target("p", s, outbox.PerKey), outbox.Target("u", s, outbox.Unordered)).start(t)
		testkit.Eventually(t, "every event", patience, func() bool { return hasAll(s, eventIDs(evs)) })
		payloads := map[string]string{}
		for _, e := range evs {
			payloads[e.ID] = string(e.Payload)
		}
		firsts := map[string][]string{}
		seen := map[string]bool{}
		for _, m := range s.messages() {
			id := m.msg.Header(broker.HeaderEventID)
			if p, ok := payloads[id]; !ok || p != string(m.msg.Payload) {
				t.Fatalf("sent %s with payload %q: not an event of the outbox", id, m.msg.Payload)
			}
			if !seen[id] && m.topic == "topic.p" {
				firsts[m.msg.Key] = append(firsts[m.msg.Key], id)
			}
			seen[id] = true
		}
		for _, k := range []string{"A", "B"} {
			want := []string{"p-" + k + "-1", "p-" + k + "-2", "p-" + k + "-3", "p-" + k + "-4", "p-" + k + "-5"}
			if !slices.Equal(firsts[k], want) {
				t.Errorf("key %s first arrived as %v", k, firsts[k])
			}
		}
		t.Logf("%d sends for %d events; %d were in flight at the stop", s.count(), len(evs), stored)
		if dups := s.count() - len(evs); dups > stored {
			t.Errorf("%d events sent twice, more than the %d in flight at the stop", dups, stored)
		}
		// The second relay's sends are recorded (in the table mode the rows
		// leave msgx_outbox); none was charged.
		testkit.Eventually(t, "every send recorded", patience, func() bool { return outboxRows(t, h.db()) == 0 })
		for _, e := range evs {
			if n := charged(t, h, e.ID); n != 0 {
				t.Errorf("%s was charged %d attempts", e.ID, n)
			}
		}
	})
}

// TestModesTakeover: two relays over one database. The first sends; then
// its broker stops answering with events in flight. The second leaves those
// events (and their keys) alone while the first holds them; when the first
// stops, the second delivers the rest, and what the first had finished is not
// sent again.
func TestModesTakeover(t *testing.T) {
	forEachMode(t, func(t *testing.T, h harness) {
		s1, s2, inFlight := &sink{}, &sink{}, &sink{}
		var hang atomic.Bool
		entered := make(chan struct{}, 1)
		first := publisherFunc(func(ctx context.Context, topic string, msgs ...*broker.Message) error {
			if !hang.Load() {
				return s1.SendConfirmed(ctx, topic, msgs...)
			}
			_ = inFlight.SendConfirmed(ctx, topic, msgs...)
			select {
			case entered <- struct{}{}:
			default:
			}
			<-ctx.Done()
			return ctx.Err()
		})
		r1 := h.relay(t, outbox.Target("p", first, outbox.PerKey))
		stop1 := r1.start(t)
		if h.mode() == outbox.ModeWAL {
			// The first relay holds the slot before the second is started.
			testkit.Eventually(t, "the first relay to hold the slot", patience, func() bool { return r1.wal.Status().Holder })
		}
		done := h.enqueue(t, ev("p", "A", 1), ev("p", "B", 1))
		testkit.Eventually(t, "the first events finished", patience, func() bool { return s1.count() == 2 && done() })
		hang.Store(true)
		rest := []outbox.Event{ev("p", "A", 2), ev("p", "A", 3), ev("p", "B", 2), ev("p", "B", 3), ev("p", "C", 1)}
		h.enqueue(t, rest...)
		select {
		case <-entered:
		case <-time.After(patience):
			t.Fatal("the first relay began no send")
		}
		r2 := h.relay(t, outbox.Target("p", s2, outbox.PerKey))
		r2.start(t)
		heldKeys := func() map[string]bool {
			keys := map[string]bool{}
			for _, m := range inFlight.messages() {
				keys[m.msg.Key] = true
			}
			return keys
		}
		var standby func() bool
		switch h.mode() {
		case outbox.ModeTable:
			// No holder: the second relay claims what no lease holds. The
			// first's leases keep it off the events in flight and the keys
			// behind them.
			standby = func() bool {
				held := heldKeys()
				for _, m := range s2.messages() {
					if held[m.msg.Key] {
						return false
					}
				}
				return true
			}
		case outbox.ModeWAL:
			// One holder: the second relay stands by, seeing the slot held by
			// the first, and sends nothing.
			testkit.Eventually(t, "the second relay to stand by", patience, func() bool {
				st := r2.wal.Status()
				return !st.Holder && st.Active && st.ActivePID != 0
			})
			standby = func() bool { return s2.count() == 0 }
		}
		testkit.Consistently(t, "the second relay leaving the first's events alone", quiet, standby)
		stop1()
		began := time.Now()
		testkit.Eventually(t, "the rest, by the second relay", patience, func() bool { return hasAll(s2, eventIDs(rest)) })
		t.Logf("the second relay delivered the rest %v after the first stopped", time.Since(began))
		if h.mode() == outbox.ModeWAL {
			if !r2.wal.Status().Holder {
				t.Fatal("the second relay delivered without holding the slot")
			}
		}
		after := ev("p", "A", 4)
		h.enqueue(t, after)
		testkit.Eventually(t, "an event after the takeover", patience, func() bool { return hasAll(s2, []string{after.ID}) })
		wantOnce(t, "the second relay", s2, append(eventIDs(rest), after.ID))
		got := byKey(s2.messages())
		if !slices.Equal(got["A"], []string{"p-A-2", "p-A-3", "p-A-4"}) || !slices.Equal(got["B"], []string{"p-B-2", "p-B-3"}) {
			t.Fatalf("the second relay sent %v", got)
		}
		testkit.Eventually(t, "every send recorded", patience, func() bool { return outboxRows(t, h.db()) == 0 })
		for _, e := range append(rest, after) {
			if n := charged(t, h, e.ID); n != 0 {
				t.Errorf("%s was charged %d attempts", e.ID, n)
			}
		}
	})
}

// TestModesRecovery: a relay restarted after events were committed while
// none ran delivers all of them (the WAL mode from the slot's confirmed
// position), and none of those the relay before it had finished.
func TestModesRecovery(t *testing.T) {
	forEachMode(t, func(t *testing.T, h harness) {
		s := &sink{}
		targets := []outbox.Option{outbox.Target("p", s, outbox.PerKey), outbox.Target("u", s, outbox.Unordered)}
		stop := h.relay(t, targets...).start(t)
		early := []outbox.Event{ev("p", "A", 1), ev("p", "B", 1), ev("u", "A", 1)}
		done := h.enqueue(t, early...)
		testkit.Eventually(t, "the first events finished", patience, func() bool { return s.count() == len(early) && done() })
		stop()
		var later []outbox.Event
		var finished []func() bool
		for i := 2; i <= 6; i++ {
			evs := []outbox.Event{ev("p", "A", i), ev("p", "B", i), ev("u", "A", i)}
			later = append(later, evs...)
			finished = append(finished, h.enqueue(t, evs...))
		}
		h.relay(t, targets...).start(t)
		testkit.Eventually(t, "the events committed while no relay ran", patience, func() bool {
			for _, f := range finished {
				if !f() {
					return false
				}
			}
			return hasAll(s, eventIDs(later))
		})
		wantOnce(t, "both relays", s, append(eventIDs(early), eventIDs(later)...))
		got := byKey(s.messages())
		for _, k := range []string{"A", "B"} {
			var perKey []string
			for _, id := range got[k] {
				if strings.HasPrefix(id, "p-") {
					perKey = append(perKey, id)
				}
			}
			want := []string{"p-" + k + "-1", "p-" + k + "-2", "p-" + k + "-3", "p-" + k + "-4", "p-" + k + "-5", "p-" + k + "-6"}
			if !slices.Equal(perKey, want) {
				t.Errorf("key %s arrived as %v", k, perKey)
			}
		}
	})
}

// TestModesOutage: while the broker is unavailable the relay pauses, charges
// nothing and hands nothing over; when it answers again everything is sent,
// each key in order, and the relay resumes.
func TestModesOutage(t *testing.T) {
	forEachMode(t, func(t *testing.T, h harness) {
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
		// Probes a few milliseconds apart, so that the outage is tried
		// several times.
		r := h.relay(t, outbox.WithRetry(backoff.Policy{MaxAttempts: 2, Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond}),
			outbox.Target("p", s, outbox.PerKey), outbox.Target("u", s, outbox.Unordered))
		r.start(t)
		evs := []outbox.Event{ev("p", "A", 1), ev("u", "A", 1), ev("p", "A", 2), ev("p", "B", 1)}
		h.enqueue(t, evs...)
		testkit.Eventually(t, "the pause, and the broker tried again", patience, func() bool { return r.paused() && tries.Load() >= 3 })
		switch h.mode() {
		case outbox.ModeTable:
			// The events wait in the table, due, in order.
			if n := countStatus(t, h.db(), outbox.StatusPending); n != len(evs) {
				t.Fatalf("%d events pending during the outage, want %d", n, len(evs))
			}
		case outbox.ModeWAL:
			// The stream waits: nothing goes to the table, the slot keeps the WAL.
			if n := outboxRows(t, h.db()); n != 0 {
				t.Fatalf("%d events went to the table during the outage", n)
			}
		}
		down.Store(false)
		testkit.Eventually(t, "the events after the outage", patience, func() bool { return hasAll(s, eventIDs(evs)) })
		wantOnce(t, "after the outage", s, eventIDs(evs))
		got := byKey(s.messages())
		perKey := slices.DeleteFunc(slices.Clone(got["A"]), func(id string) bool { return !strings.HasPrefix(id, "p-") })
		if !slices.Equal(perKey, []string{"p-A-1", "p-A-2"}) {
			t.Fatalf("key A of the per-key target arrived as %v", perKey)
		}
		testkit.Eventually(t, "the resume", patience, func() bool { return !r.paused() })
		testkit.Eventually(t, "every send recorded", patience, func() bool { return outboxRows(t, h.db()) == 0 })
		for _, e := range evs {
			if n := charged(t, h, e.ID); n != 0 {
				t.Errorf("%s was charged %d attempts for an outage", e.ID, n)
			}
		}
		if n := countStatus(t, h.db(), outbox.StatusDead); n != 0 {
			t.Fatalf("%d events dead after an outage", n)
		}
	})
}
