package inbox_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// running is an engine started with Run.
type running struct {
	eng    *inbox.Engine
	cancel context.CancelFunc
	done   chan error
}

func start(t *testing.T, e *inbox.Engine) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{eng: e, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- e.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop cancels the engine and waits, boundedly, for Run to return.
func (r *running) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case err, ok := <-r.done:
		if ok && err != nil {
			t.Errorf("Run returned %v", err)
		}
		if ok {
			close(r.done)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

// advanceUntil moves the fake clock in steps until cond holds. Stepping
// (rather than one jump) also covers a timer armed just after an advance.
func (f *fixture) advanceUntil(what string, step time.Duration, cond func() bool) {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			f.t.Fatalf("timed out waiting for %s", what)
		}
		f.clk.Advance(step)
		time.Sleep(time.Millisecond)
	}
}

// waitWaiters waits until n timers are pending on the fake clock.
func (f *fixture) waitWaiters(n int) {
	f.t.Helper()
	done := make(chan struct{})
	timer := time.AfterFunc(10*time.Second, func() { close(done) })
	defer timer.Stop()
	if !f.clk.WaitForWaiters(done, n) {
		f.t.Fatalf("timed out waiting for %d clock waiters (have %d)", n, f.clk.Waiters())
	}
}

func (f *fixture) leaseExpiry() time.Time {
	f.t.Helper()
	var exp time.Time
	if err := f.db.QueryRow(context.Background(), ph(f.db, "SELECT expires_at FROM msgx_lease WHERE name = $1"), "inbox:"+f.stream).Scan(&exp); err != nil {
		f.t.Fatal(err)
	}
	return exp
}

func (f *fixture) allSettled(stream string, ids ...int64) func() bool {
	return func() bool {
		for _, id := range ids {
			r, err := inbox.Get(context.Background(), f.db, stream, id)
			if err != nil || !r.Status.Terminal() {
				return false
			}
		}
		return true
	}
}

func TestMaintenanceNeverStarvesThePump(t *testing.T) {
	storetest.Each(t, []store.Line{inbox.Schema(), outbox.Schema()}, func(t *testing.T, db *store.DB) {
		block := make(chan struct{})
		defer close(block)
		bf := &fakeBackfiller{block: block}
		jobStarted := make(chan struct{}, 1)
		job := inbox.Job{Name: "stuck", Every: time.Second, Run: func(ctx context.Context) (bool, error) {
			select {
			case jobStarted <- struct{}{}:
			default:
			}
			<-ctx.Done() // a job that never finishes by itself
			return false, ctx.Err()
		}}
		f := newFixture(t, db, inbox.WithBackfill(bf), inbox.WithJob(job), inbox.WithLease(30*time.Second))
		f.proc.set(2, "fail:INFRA", "ok")
		r := start(t, f.eng)
		<-jobStarted // the maintenance goroutine is now stuck in the job
		if _, err := f.eng.Enqueue(context.Background(), inbox.Incoming{ID: 1, Payload: []byte("a;K")}); err != nil {
			t.Fatal(err)
		}
		// Without moving the clock: the pump was woken by the enqueue.
		testkit.Eventually(t, "message 1", patience, f.allSettled(f.stream, 1))
		if _, err := f.eng.Enqueue(context.Background(), inbox.Incoming{ID: 2, Payload: []byte("b;K")}, inbox.Incoming{ID: 3, Payload: []byte("c;K")}); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, "message 2 failing", patience, func() bool { return f.status(2) == inbox.Failed })
		// The head's backoff ends while the maintenance goroutine is blocked:
		// the pump still processes it and what follows.
		f.advanceUntil("messages 2 and 3", 100*time.Millisecond, f.allSettled(f.stream, 2, 3))
		f.wantStatus(map[int64]inbox.Status{1: inbox.Succeeded, 2: inbox.Succeeded, 3: inbox.Succeeded})
		r.stop(t)
	})
}

func TestBackfillIsTriedRightAfterCommit(t *testing.T) {
	storetest.Each(t, []store.Line{inbox.Schema(), outbox.Schema()}, func(t *testing.T, db *store.DB) {
		bf := &fakeBackfiller{}
		f := newFixture(t, db, inbox.WithBackfill(bf), inbox.WithLease(30*time.Second))
		start(t, f.eng)
		if _, err := f.eng.Enqueue(context.Background(), inbox.Incoming{ID: 1, Payload: []byte("a;K")}, inbox.Incoming{ID: 2, Payload: []byte("garbage")}); err != nil {
			t.Fatal(err)
		}
		// The clock does not move: only the try after the commit can do it.
		testkit.Eventually(t, "backfill", patience, func() bool {
			r1, r2 := f.row(f.stream, 1), f.row(f.stream, 2)
			return r1.BackfilledAt != nil && r2.BackfilledAt != nil
		})
		if r := f.row(f.stream, 2); r.Status != inbox.Dead {
			t.Fatalf("2 = %+v; a dead message is backfilled too", r)
		}
	})
}

func TestSecondInstanceStandsByAndTakesOver(t *testing.T) {
	storetest.Each(t, []store.Line{inbox.Schema(), outbox.Schema()}, func(t *testing.T, db *store.DB) {
		f := newFixture(t, db)
		const ttl = 30 * time.Second
		procA, procB := newProc(), newProc()
		procA.name, procB.name = "A", "B"
		a := f.engine(f.stream, procA, inbox.WithOwner("A"), inbox.WithLease(ttl))
		b := f.engine(f.stream, procB, inbox.WithOwner("B"), inbox.WithLease(ttl))
		ra := start(t, a)
		testkit.Eventually(t, "A leads", patience, a.IsLeader)
		start(t, b)
		f.enqueue(f.stream, map[int64]string{1: "a;K", 2: "b;K"})
		a.Wake()
		testkit.Eventually(t, "A processes", patience, f.allSettled(f.stream, 1, 2))
		// B stays a standby through several lease periods: A renews. Each
		// period starts once A's renewal, A's idle pump and B's standby are
		// all parked on the clock, so the clock never runs ahead of A.
		for range 6 {
			f.waitWaiters(3)
			f.clk.Advance(ttl / 3)
			now := f.clk.Now()
			testkit.Eventually(t, "A's renewal", patience, func() bool { return f.leaseExpiry().Equal(now.Add(ttl)) })
			if b.IsLeader() {
				t.Fatal("the standby took a live lease")
			}
		}
		// A stops and gives the lease up: B takes over at its next try.
		ra.stop(t)
		f.advanceUntil("B leads", ttl/6, b.IsLeader)
		f.enqueue(f.stream, map[int64]string{3: "c;K"})
		b.Wake()
		// The clock keeps moving: while the test moved it to the takeover,
		// B's fresh lease may have lapsed before its first step (a slow
		// round trip on a loaded machine), and B then waits on this clock.
		f.advanceUntil("B processes", time.Second, f.allSettled(f.stream, 3))
		workers := map[int64]string{}
		rows, err := db.Query(context.Background(), "SELECT msg_id, worker FROM biz ORDER BY msg_id")
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id int64
			var w string
			if err := rows.Scan(&id, &w); err != nil {
				t.Fatal(err)
			}
			workers[id] = w
		}
		rows.Close()
		if workers[1] != "A" || workers[2] != "A" || workers[3] != "B" || len(workers) != 3 {
			t.Fatalf("processed by %v", workers)
		}
	})
}

func TestCrashedOwnersLeaseIsTakenOverAfterExpiry(t *testing.T) {
	storetest.Each(t, []store.Line{inbox.Schema(), outbox.Schema()}, func(t *testing.T, db *store.DB) {
		f := newFixture(t, db)
		const ttl = 30 * time.Second
		// A crashed process left its lease behind.
		if _, err := db.Exec(context.Background(), ph(db, "INSERT INTO msgx_lease (name, owner, expires_at) VALUES ($1, 'crashed', $2)"),
			"inbox:"+f.stream, f.clk.Now().Add(ttl)); err != nil {
			t.Fatal(err)
		}
		c := f.engine(f.stream, f.proc, inbox.WithOwner("C"), inbox.WithLease(ttl))
		f.enqueue(f.stream, map[int64]string{1: "a;K"})
		start(t, c)
		f.clk.Advance(ttl - time.Second)
		time.Sleep(10 * time.Millisecond)
		if c.IsLeader() || f.status(1) != inbox.Pending {
			t.Fatal("took an unexpired lease")
		}
		f.advanceUntil("takeover", ttl/6, c.IsLeader)
		c.Wake()
		// The clock keeps moving: on a starved machine the takeover's first
		// step may fail or the fresh lease lapse, and what follows (a retry
		// backoff, a standby poll) waits on this clock.
		f.advanceUntil("processing after takeover", time.Second, f.allSettled(f.stream, 1))
	})
}

func TestLeaderThatLostItsLeaseStopsAtOnce(t *testing.T) {
	storetest.Each(t, []store.Line{inbox.Schema(), outbox.Schema()}, func(t *testing.T, db *store.DB) {
		f := newFixture(t, db, inbox.WithLease(30*time.Second))
		ctx := context.Background()
		start(t, f.eng)
		testkit.Eventually(t, "leadership", patience, f.eng.IsLeader)
		// Another process takes the lease over (e.g. ours looked expired to it).
		if _, err := db.Exec(ctx, ph(db, "UPDATE msgx_lease SET owner = 'thief', expires_at = $1 WHERE name = $2"),
			f.clk.Now().Add(time.Hour), "inbox:"+f.stream); err != nil {
			t.Fatal(err)
		}
		f.enqueue(f.stream, map[int64]string{1: "a;K"})
		f.eng.Wake()
		testkit.Eventually(t, "stepping down", patience, func() bool { return !f.eng.IsLeader() })
		if s := f.status(1); s != inbox.Pending {
			t.Fatalf("a fenced pump processed message 1: %s", s)
		}
		// The thief goes away; the engine takes the stream back.
		if _, err := db.Exec(ctx, "DELETE FROM msgx_lease"); err != nil {
			t.Fatal(err)
		}
		f.advanceUntil("processing", 5*time.Second, f.allSettled(f.stream, 1))
	})
}

func TestFencedStepCommitsNothing(t *testing.T) {
	storetest.Each(t, []store.Line{inbox.Schema(), outbox.Schema()}, func(t *testing.T, db *store.DB) {
		f := newFixture(t, db)
		f.enqueue(f.stream, map[int64]string{1: "a;K"})
		if _, _, err := f.eng.Step(context.Background()); err != inbox.ErrLeaseLost {
			t.Fatalf("step without the lease = %v, want ErrLeaseLost", err)
		}
		f.lead(f.eng)
		f.clk.Advance(1001 * time.Hour) // past the fixture's lease
		if _, _, err := f.eng.Step(context.Background()); err != inbox.ErrLeaseLost {
			t.Fatalf("step with an expired lease = %v, want ErrLeaseLost", err)
		}
		if f.status(1) != inbox.Pending || len(f.bizIDs(f.stream)) != 0 {
			t.Fatal("a fenced step changed something")
		}
	})
}

// blockingSource is a source that only waits for the end of its context.
type blockingSource struct{ started chan struct{} }

func (s blockingSource) Run(ctx context.Context, _ func()) error {
	close(s.started)
	<-ctx.Done()
	return nil
}

func TestStopInterruptsAndEveryWorkerExits(t *testing.T) {
	storetest.Each(t, []store.Line{inbox.Schema(), outbox.Schema()}, func(t *testing.T, db *store.DB) {
		base := runtime.NumGoroutine()
		block := make(chan struct{})
		defer close(block)
		src := blockingSource{started: make(chan struct{})}
		bf := &fakeBackfiller{block: block}
		f := newFixture(t, db, inbox.WithBackfill(bf), inbox.WithSource(src), inbox.WithLease(30*time.Second))
		f.proc.set(2, "block")
		f.enqueue(f.stream, map[int64]string{1: "a;K", 2: "b;K", 3: "c;K"})
		r := start(t, f.eng)
		<-src.started
		<-f.proc.blocked // message 2 is in the processor
		r.stop(t)
		if f.eng.IsLeader() {
			t.Fatal("still leader after Run returned")
		}
		// Nothing of the interrupted message was recorded; the lease was released.
		r2 := f.row(f.stream, 2)
		if r2.Status != inbox.Pending || r2.Attempts != 0 {
			t.Fatalf("interrupted message: %+v", r2)
		}
		if n := f.count("SELECT COUNT(*) FROM msgx_lease"); n != 0 {
			t.Fatalf("%d leases left after a clean stop", n)
		}
		testkit.Eventually(t, "goroutines to exit", patience, func() bool { return runtime.NumGoroutine() <= base+2 })
	})
}
