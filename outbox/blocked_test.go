package outbox_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// rejecting is a sink whose broker rejects the events listed in reject
// (while they are listed) and takes the rest.
func rejecting(reject *atomic.Value) *sink {
	return &sink{fail: func(_ string, msgs []*broker.Message) (bool, error) {
		bad, _ := reject.Load().(map[string]bool)
		for _, m := range msgs {
			if bad[m.Header(broker.HeaderEventID)] {
				return false, driver.Classify(driver.Rejected, errors.New("rejected "+m.Header(broker.HeaderEventID)))
			}
		}
		return true, nil
	}}
}

// TestDeadEventHoldsItsKey: on a per-key target the broker rejects one
// event of key A. A's later events wait behind the DEAD one while key B
// flows; the wait is reported (BlockedKeys). The operator's replay sends
// the dead event first, then A's waiting events, in order on the wire.
func TestDeadEventHoldsItsKey(t *testing.T) {
	storetest.Each(t, []store.Line{outbox.Schema()}, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		clk := clock.NewFake(t0)
		var reject atomic.Value
		reject.Store(map[string]bool{"p-A-2": true})
		s := rejecting(&reject)
		var logs testkit.Buffer
		r := newRelay(t, db, clk, outbox.WithRetry(noJitter), outbox.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))),
			outbox.Target("p", s, outbox.PerKey))

		enqueue(t, db, t0, ev("p", "A", 1), ev("p", "A", 2), ev("p", "A", 3), ev("p", "B", 1))
		for range 5 {
			flush(t, r)
		}
		enqueue(t, db, t0, ev("p", "A", 4), ev("p", "B", 2))
		for range 5 {
			flush(t, r)
		}
		if rec := get(t, db, "p-A-2"); rec.Status != outbox.StatusDead {
			t.Fatalf("A:2 %+v, want DEAD", rec)
		}
		got := byKey(s.messages())
		if !slices.Equal(got["A"], []string{"p-A-1"}) {
			t.Fatalf("key A on the wire: %v, want only A:1 (A:3 and A:4 wait behind the dead A:2)", got["A"])
		}
		if !slices.Equal(got["B"], []string{"p-B-1", "p-B-2"}) {
			t.Fatalf("key B on the wire: %v, want B:1, B:2 (other keys flow)", got["B"])
		}
		for _, id := range []string{"p-A-3", "p-A-4"} {
			if rec := get(t, db, id); rec.Status != outbox.StatusPending || rec.Attempts != 0 {
				t.Fatalf("%s: %+v, want PENDING and never tried", id, rec)
			}
		}
		if line := "outbox event dead; it holds its key until it is replayed or skipped"; !strings.Contains(logs.String(), line) ||
			!strings.Contains(logs.String(), "event_id=p-A-2") {
			t.Fatalf("no %q line for p-A-2:\n%s", line, logs.String())
		}
		blocked, err := outbox.BlockedKeys(ctx, db, "p", 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(blocked) != 1 || blocked[0].Key != "A" || blocked[0].EventID != "p-A-2" || blocked[0].Waiting != 2 {
			t.Fatalf("blocked keys %+v, want A blocked by p-A-2 with 2 waiting", blocked)
		}

		// The broker takes A:2 now; the operator replays it.
		reject.Store(map[string]bool{})
		if _, err := outbox.Replay(ctx, db, clk.Now(), outbox.ReplayRequest{
			EventIDs: []string{"p-A-2"}, Actor: "ops", Reason: "fixed"}); err != nil {
			t.Fatal(err)
		}
		for range 5 {
			flush(t, r)
		}
		got = byKey(s.messages())
		if want := []string{"p-A-1", "p-A-2", "p-A-3", "p-A-4"}; !slices.Equal(got["A"], want) {
			t.Fatalf("key A on the wire after the replay: %v, want %v", got["A"], want)
		}
		if blocked, err := outbox.BlockedKeys(ctx, db, "p", 10); err != nil || len(blocked) != 0 {
			t.Fatalf("blocked keys after the replay: %+v %v", blocked, err)
		}
	})
}

// TestSkipLetsTheWaitingEventsGo: the operator skips the dead event
// instead; the key's waiting events go in order, the skipped one stays DEAD
// (marked skipped) and the skip is audited.
func TestSkipLetsTheWaitingEventsGo(t *testing.T) {
	storetest.Each(t, []store.Line{outbox.Schema()}, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		clk := clock.NewFake(t0)
		var reject atomic.Value
		reject.Store(map[string]bool{"p-A-1": true})
		s := rejecting(&reject)
		r := newRelay(t, db, clk, outbox.WithRetry(noJitter), outbox.Target("p", s, outbox.PerKey))
		enqueue(t, db, t0, ev("p", "A", 1), ev("p", "A", 2), ev("p", "A", 3))
		for range 3 {
			flush(t, r)
		}
		if n := s.count(); n != 0 {
			t.Fatalf("%d sent while A:1 is dead, want none", n)
		}
		res, err := outbox.Skip(ctx, db, clk.Now(), outbox.SkipRequest{EventIDs: []string{"p-A-1", "p-A-2"}, Actor: "ops", Reason: "bad payload"})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(res.Skipped, []string{"p-A-1"}) {
			t.Fatalf("skip: %+v, want only the dead A:1 skipped", res)
		}
		for range 3 {
			flush(t, r)
		}
		if got := s.ids(); !slices.Equal(got, []string{"p-A-2", "p-A-3"}) {
			t.Fatalf("sent %v after the skip, want A:2, A:3", got)
		}
		rec := get(t, db, "p-A-1")
		if rec.Status != outbox.StatusDead || rec.SkippedAt == nil || !rec.SkippedAt.Equal(clk.Now()) {
			t.Fatalf("A:1 after the skip: %+v, want DEAD and skipped", rec)
		}
		var actor, reason, selector, skipped string
		if err := db.QueryRow(ctx, "SELECT actor, reason, selector, replayed FROM msgx_outbox_replay WHERE action = 'skip'").Scan(
			&actor, &reason, &selector, &skipped); err != nil {
			t.Fatal(err)
		}
		if actor != "ops" || reason != "bad payload" || !strings.Contains(skipped, "p-A-1") {
			t.Fatalf("skip audit: %q %q %q %q", actor, reason, selector, skipped)
		}

		// A skipped event can still be replayed: the mark is cleared and it
		// goes after the newer events of its key (delivery, not history).
		reject.Store(map[string]bool{})
		if _, err := outbox.Replay(ctx, db, clk.Now(), outbox.ReplayRequest{EventIDs: []string{"p-A-1"}, Actor: "ops", Reason: "fixed after all"}); err != nil {
			t.Fatal(err)
		}
		if rec := get(t, db, "p-A-1"); rec.Status != outbox.StatusPending || rec.SkippedAt != nil {
			t.Fatalf("A:1 replayed after its skip: %+v, want PENDING and no longer skipped", rec)
		}
		flush(t, r)
		if got := s.ids(); !slices.Equal(got, []string{"p-A-2", "p-A-3", "p-A-1"}) {
			t.Fatalf("sent %v after the replay of the skipped A:1", got)
		}
	})
}

// TestDeadEventBetweenHoldsTheSuccessor: a DEAD event between a key's head
// and its next event (left by the target's earlier, unordered, lane) holds
// the key too once the head is sent: the claim of the sent head's successor
// (SentAdvance on PostgreSQL) does not pass it.
func TestDeadEventBetweenHoldsTheSuccessor(t *testing.T) {
	storetest.Each(t, []store.Line{outbox.Schema()}, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		clk := clock.NewFake(t0)
		s := &sink{}
		r := newRelay(t, db, clk, outbox.Target("p", s, outbox.PerKey))
		enqueue(t, db, t0, ev("p", "A", 1), ev("p", "A", 2), ev("p", "A", 3), ev("p", "A", 4))
		if _, err := db.Exec(ctx, "UPDATE msgx_outbox SET status = 'DEAD', dead_at = created_at WHERE event_id = "+param(db, 1), "p-A-3"); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			flush(t, r)
		}
		if got := s.ids(); !slices.Equal(got, []string{"p-A-1", "p-A-2"}) {
			t.Fatalf("sent %v, want A:1, A:2 and A:4 held behind the dead A:3", got)
		}
	})
}
