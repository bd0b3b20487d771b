package inbox_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// A process restarted under its instance id takes the lease its killed run
// left behind at once, not when it expires; a lease of another instance id
// (even one that starts with ours) is waited out as before.
func TestRestartedInstanceTakesItsLeaseBackAtOnce(t *testing.T) {
	storetest.Each(t, []store.Line{inbox.Schema(), outbox.Schema()}, func(t *testing.T, db *store.DB) {
		f := newFixture(t, db)
		const ttl = 30 * time.Second
		ctx := context.Background()
		leave := func(stream, owner string) {
			t.Helper()
			if _, err := db.Exec(ctx, ph(db, "INSERT INTO msgx_lease (name, owner, expires_at) VALUES ($1, $2, $3)"),
				"inbox:"+stream, owner, f.clk.Now().Add(ttl)); err != nil {
				t.Fatal(err)
			}
		}
		// Another instance's live lease, and one of an instance whose id
		// extends ours: neither is ours to take.
		leave("s2", "node-10/0badcafe")
		leave("s3", "node-1x/0badcafe")
		for _, s := range []string{"s2", "s3"} {
			e := f.engine(s, f.proc, inbox.WithOwner(inbox.OwnerFor("node-1")), inbox.WithLease(ttl))
			if ok, err := e.AcquireLease(ctx); err != nil || ok {
				t.Fatalf("took %s's lease of another instance: %v %v", s, ok, err)
			}
		}
		// The killed run of this instance left its lease with 30 s to go.
		leave(f.stream, "node-1/deadbeef")
		e := f.engine(f.stream, f.proc, inbox.WithOwner(inbox.OwnerFor("node-1")), inbox.WithLease(ttl))
		f.enqueue(f.stream, map[int64]string{1: "a;K"})
		start(t, e)
		// The clock stands still: no expiry helps.
		testkit.Eventually(t, "the restarted instance leads", patience, e.IsLeader)
		testkit.Eventually(t, "processing", patience, f.allSettled(f.stream, 1))
		if h, ok, err := inbox.HolderOf(ctx, db, f.stream); err != nil || !ok || h.Instance != "node-1" || h.Owner == "node-1/deadbeef" {
			t.Fatalf("holder %+v %v %v", h, ok, err)
		}
	})
}

// Two live processes with one instance id: the later one takes the lease at
// once (it cannot tell a twin from its own dead run); the earlier one finds
// its token replaced at its next pump transaction, reports the twin loudly
// (Superseded, the metric) and never takes the stream back, so the two do not
// take it from each other at every renewal.
func TestTwinInstanceIsSupersededAndStaysOut(t *testing.T) {
	storetest.Each(t, []store.Line{inbox.Schema(), outbox.Schema()}, func(t *testing.T, db *store.DB) {
		f := newFixture(t, db)
		const ttl = 30 * time.Second
		procA, procB := newProc(), newProc()
		procA.name, procB.name = "A", "B"
		regA := prometheus.NewRegistry()
		a := f.engine(f.stream, procA, inbox.WithOwner(inbox.OwnerFor("node-1")), inbox.WithLease(ttl), inbox.WithRegisterer(regA))
		b := f.engine(f.stream, procB, inbox.WithOwner(inbox.OwnerFor("node-1")), inbox.WithLease(ttl))
		start(t, a)
		testkit.Eventually(t, "A leads", patience, a.IsLeader)
		f.enqueue(f.stream, map[int64]string{1: "a;K"})
		a.Wake()
		testkit.Eventually(t, "A processes", patience, f.allSettled(f.stream, 1))
		if a.Superseded() != nil {
			t.Fatal("superseded before any twin")
		}

		start(t, b)
		testkit.Eventually(t, "B takes the lease at once", patience, b.IsLeader)
		f.enqueue(f.stream, map[int64]string{2: "b;K"})
		a.Wake()
		b.Wake()
		testkit.Eventually(t, "B processes", patience, f.allSettled(f.stream, 2))
		// A's next pump transaction (woken above) or renewal finds the lease
		// gone to its twin.
		f.advanceUntil("A superseded", ttl/6, func() bool { return a.Superseded() != nil })
		if err := a.Superseded(); !errors.Is(err, inbox.ErrSuperseded) {
			t.Fatalf("Superseded() = %v", err)
		}
		if a.IsLeader() {
			t.Fatal("the superseded process still leads")
		}
		if v := gaugeValue(t, regA, "msgx_inbox_lease_superseded"); v != 1 {
			t.Fatalf("msgx_inbox_lease_superseded = %v", v)
		}
		// Lease periods pass: B renews each third of one and keeps the
		// stream; A stays out.
		ctx := context.Background()
		hB, ok, err := inbox.HolderOf(ctx, db, f.stream)
		if err != nil || !ok {
			t.Fatalf("holder: %v %v", ok, err)
		}
		expires := hB.Expires
		for range 6 {
			// Small steps: B's renewal timer may not be set again yet when
			// the clock moves; it fires at a later step.
			f.advanceUntil("B renews the lease", ttl/30, func() bool {
				h, ok, err := inbox.HolderOf(ctx, db, f.stream)
				if err != nil || !ok || h.Owner != hB.Owner {
					t.Fatalf("holder %+v (%v %v), want B's %s: the twins traded the lease", h, ok, err, hB.Owner)
				}
				if h.Expires.After(expires) {
					expires = h.Expires
					return true
				}
				return false
			})
			if a.IsLeader() {
				t.Fatal("A leads again: the twins traded the lease")
			}
		}
		f.enqueue(f.stream, map[int64]string{3: "c;K"})
		b.Wake()
		f.advanceUntil("B processes on", time.Second, f.allSettled(f.stream, 3))
		var worker string
		if err := db.QueryRow(context.Background(), ph(db, "SELECT worker FROM biz WHERE msg_id = $1"), 3).Scan(&worker); err != nil || worker != "B" {
			t.Fatalf("message 3 processed by %q (%v)", worker, err)
		}
	})
}

// gaugeValue is the value of the named gauge in reg (one series).
func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
