package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// runParked starts r and waits until its lane (one worker) and its
// maintenance wait on the clock; the poll interval is an hour, so only a
// wake-up makes the lane look again.
func runParked(t *testing.T, r *outbox.Relay, clk *clock.Fake) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-stopped
	})
	if !clk.WaitForWaiters(ctx.Done(), 2) {
		t.Fatal("relay not parked")
	}
}

// TestWakeOnCommit: a commit through Enqueue wakes the relays of the same
// DB handle at once, on both dialects, without the poll.
func TestWakeOnCommit(t *testing.T) {
	storetest.Each(t, []store.Line{outbox.Schema()}, func(t *testing.T, db *store.DB) {
		clk := clock.NewFake(t0)
		s := &sink{}
		r := newRelay(t, db, clk, outbox.WithPollInterval(time.Hour), outbox.WithLagInterval(time.Hour),
			outbox.WithCleanupInterval(time.Hour), outbox.Target("u", s, outbox.Unordered, outbox.Workers(1)))
		runParked(t, r, clk)
		enqueue(t, db, t0, ev("u", "k", 1))
		testkit.Eventually(t, "the event, woken by its commit", 10*time.Second, func() bool { return s.count() == 1 })
	})
}

// TestWakeAcrossProcesses: a relay over one connection pool is woken by a
// commit through another (as in another process), by a PostgreSQL
// notification sent after the commit.
func TestWakeAcrossProcesses(t *testing.T) {
	_, dsn := storetest.NewSchema(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	open := func() *store.DB {
		db, err := store.Open(ctx, dsn, store.WithMigrate(outbox.Schema()), store.WithLogger(testkit.Quiet()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(db.Close)
		return db
	}
	relayDB, producerDB := open(), open()
	clk := clock.NewFake(t0)
	s := &sink{}
	r := newRelay(t, relayDB, clk, outbox.WithPollInterval(time.Hour), outbox.WithLagInterval(time.Hour),
		outbox.WithCleanupInterval(time.Hour), outbox.Target("p", s, outbox.PerKey, outbox.Workers(1)))
	runParked(t, r, clk)
	for i := 1; i <= 3; i++ {
		enqueue(t, producerDB, t0, ev("p", "k", i))
		testkit.Eventually(t, "the event, woken by a notification", 10*time.Second, func() bool { return s.count() == i })
	}
}

// TestNoWakeOnCommitWaitsForThePoll: with WithWakeOnCommit(false) a commit
// does not wake the lanes (for a bounded quiet period nothing is sent); the
// poll then finds the event.
func TestNoWakeOnCommitWaitsForThePoll(t *testing.T) {
	storetest.Each(t, []store.Line{outbox.Schema()}, func(t *testing.T, db *store.DB) {
		clk := clock.NewFake(t0)
		s := &sink{}
		r := newRelay(t, db, clk, outbox.WithWakeOnCommit(false), outbox.WithPollInterval(time.Hour), outbox.WithLagInterval(time.Hour),
			outbox.WithCleanupInterval(time.Hour), outbox.Target("u", s, outbox.Unordered, outbox.Workers(1)))
		runParked(t, r, clk)
		enqueue(t, db, t0, ev("u", "k", 1))
		quiet := time.After(500 * time.Millisecond)
		for wait := true; wait; {
			select {
			case <-quiet:
				wait = false
			case <-time.After(10 * time.Millisecond):
				if s.count() != 0 {
					t.Fatal("the commit woke a relay built WithWakeOnCommit(false)")
				}
			}
		}
		clk.Advance(time.Hour)
		testkit.Eventually(t, "the event, found by the poll", 10*time.Second, func() bool { return s.count() == 1 })
	})
}
