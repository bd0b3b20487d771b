package outbox_test

import (
	"testing"

	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/internal/clock"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

func TestLanesDeliverEverything(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
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
		if st.Published != 224 || st.Covered != 76 {
			t.Fatalf("stats %+v", st)
		}
		for _, m := range pk.messages() {
			if m.msg.Header(broker.HeaderEventID) == "" || m.topic != "topic.p" {
				t.Fatalf("message without event id or on the wrong topic: %+v", m)
			}
		}
		if n := countStatus(t, db, outbox.StatusPending); n != 0 {
			t.Fatalf("%d pending rows left", n)
		}
	})
}
