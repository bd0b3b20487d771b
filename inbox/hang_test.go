package inbox_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// stepAsync runs one pump step on its own goroutine.
func (f *fixture) stepAsync(e *inbox.Engine) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, _, err := e.Step(context.Background())
		done <- err
	}()
	return done
}

// waitStep waits, boundedly, for a step started with stepAsync.
func (f *fixture) waitStep(done <-chan error, what string) {
	f.t.Helper()
	select {
	case err := <-done:
		if err != nil {
			f.t.Fatalf("%s: step: %v", what, err)
		}
	case <-time.After(15 * time.Second):
		f.t.Fatalf("%s: the step never ended", what)
	}
}

func TestHungProcessorAttemptTimesOutAsInfraFailure(t *testing.T) {
	storetest.Each(t, []store.Line{inbox.Schema(), outbox.Schema()}, func(t *testing.T, db *store.DB) {
		reg := prometheus.NewRegistry()
		f := newFixture(t, db, inbox.WithGroupSize(10), inbox.WithAttemptTimeout(time.Minute), inbox.WithRegisterer(reg))
		f.lead(f.eng)
		f.proc.set(2, "block", "ok")
		f.enqueue(f.stream, map[int64]string{1: "a;K", 2: "b;K", 3: "c;K"})
		done := f.stepAsync(f.eng)
		<-f.proc.blocked
		// The pump is stuck in message 2 (the head is 1 until the batch
		// commits): the head's age grows on the dashboard meanwhile.
		f.clk.Advance(40 * time.Second)
		if age := testkit.MetricValue(t, reg, "msgx_inbox_head_age_seconds"); age != 40 {
			t.Fatalf("head age while the pump hangs = %v, want 40", age)
		}
		f.clk.Advance(20 * time.Second) // the attempt's minute is up
		f.waitStep(done, "hung attempt")
		r := f.row(f.stream, 2)
		if r.Status != inbox.Failed || r.ErrorClass != inbox.Infra || !strings.Contains(r.Reason, "timed out") || r.NextAttemptAt == nil {
			t.Fatalf("hung message = %+v, want FAILED INFRA with a retry", r)
		}
		f.wantStatus(map[int64]inbox.Status{1: inbox.Succeeded, 3: inbox.Pending})
		if len(f.bizIDs(f.stream)) != 1 {
			t.Fatalf("business rows %v: the hung attempt's writes must roll back", f.bizIDs(f.stream))
		}
		// Message 2 is the head now; its retry succeeds.
		f.clk.Advance(time.Second)
		f.drain(f.eng)
		f.wantStatus(map[int64]inbox.Status{2: inbox.Succeeded, 3: inbox.Succeeded})
		if age := testkit.MetricValue(t, reg, "msgx_inbox_head_age_seconds"); age != 0 {
			t.Fatalf("head age with nothing unfinished = %v", age)
		}
	})
}

func TestPumpStatementWaitingOnALockTimesOut(t *testing.T) {
	db := storetest.NewPostgres(t, store.WithMigrate(inbox.Schema(), outbox.Schema()))
	f := newFixture(t, db, inbox.WithStatementTimeouts(time.Minute, 200*time.Millisecond))
	f.lead(f.eng)
	f.enqueue(f.stream, map[int64]string{1: "a;K"})
	// Another transaction holds the business row the processor writes.
	hold, release := make(chan struct{}), make(chan struct{})
	holder := make(chan error, 1)
	go func() {
		holder <- db.InTx(context.Background(), func(ctx context.Context, tx store.Tx) error {
			if _, err := tx.Exec(ctx, "INSERT INTO biz (stream, msg_id) VALUES ('s1', 1)"); err != nil {
				return err
			}
			close(hold)
			<-release
			return context.Canceled // roll back
		})
	}()
	<-hold
	done := f.stepAsync(f.eng)
	f.waitStep(done, "step behind a lock")
	close(release)
	<-holder
	r := f.row(f.stream, 1)
	if r.Status != inbox.Failed || r.ErrorClass != inbox.Infra || !strings.Contains(r.Reason, "lock timeout") {
		t.Fatalf("message 1 = %+v, want FAILED INFRA by the lock timeout", r)
	}
}

func TestLeaseRenewalNeverWaitsForThePump(t *testing.T) {
	db := storetest.NewPostgres(t, store.WithMigrate(inbox.Schema(), outbox.Schema()))
	const ttl = 30 * time.Second
	f := newFixture(t, db, inbox.WithLease(ttl), inbox.WithAttemptTimeout(time.Hour))
	f.proc.set(1, "block")
	f.enqueue(f.stream, map[int64]string{1: "a;K"})
	start(t, f.eng)
	<-f.proc.blocked // the pump's transaction is open and stays so
	before := f.leaseExpiry()
	// The renewer wakes every ttl/3; the pump's fence must not hold it up.
	f.waitWaiters(2) // the renewer and the attempt's deadline
	f.clk.Advance(ttl / 3)
	testkit.Eventually(t, "renewal while the pump hangs", patience, func() bool { return f.leaseExpiry().After(before) })
	if !f.eng.IsLeader() {
		t.Fatal("lost the lease while renewing")
	}
	// A takeover, unlike the renewal, waits for the running batch.
	taken := make(chan error, 1)
	go func() {
		_, err := db.Exec(context.Background(),
			"INSERT INTO msgx_lease (name, owner, expires_at) VALUES ($1, 'thief', now()) ON CONFLICT (name) DO UPDATE SET owner = 'thief', epoch = msgx_lease.epoch + 1",
			"inbox:"+f.stream)
		taken <- err
	}()
	select {
	case err := <-taken:
		t.Fatalf("a takeover did not wait for the running batch: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
}

func TestLeaseExpiryIsTheDatabasesTime(t *testing.T) {
	db := storetest.NewPostgres(t, store.WithMigrate(inbox.Schema(), outbox.Schema()))
	ctx := context.Background()
	setupTables(t, db)
	// This host's clock runs an hour ahead of the database's.
	clk := clock.NewFake(time.Now().Add(time.Hour))
	eng, err := inbox.New(db, "s1", newProc(), inbox.WithClock(clk), inbox.WithDatabaseClock(false), inbox.WithOwner("skewed"), inbox.WithLogger(testkit.Quiet()),
		inbox.WithLease(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, "INSERT INTO msgx_lease (name, owner, expires_at, epoch) VALUES ('inbox:s1', 'other', now() + interval '30 seconds', 1)"); err != nil {
		t.Fatal(err)
	}
	if ok, err := eng.AcquireLease(ctx); err != nil || ok {
		t.Fatalf("acquire = %v, %v: a host whose clock runs ahead took a live lease", ok, err)
	}
	if _, err := db.Exec(ctx, "UPDATE msgx_lease SET expires_at = now() - interval '1 second'"); err != nil {
		t.Fatal(err)
	}
	if ok, err := eng.AcquireLease(ctx); err != nil || !ok {
		t.Fatalf("acquire of an expired lease = %v, %v", ok, err)
	}
	var ttl float64
	if err := db.QueryRow(ctx, "SELECT EXTRACT(EPOCH FROM expires_at - now()) FROM msgx_lease").Scan(&ttl); err != nil {
		t.Fatal(err)
	}
	if ttl < 25 || ttl > 31 {
		t.Fatalf("the lease runs %v s from the database's now, want 30", ttl)
	}
	// Live by the database's clock, the lease lets the pump step although this
	// host's clock says it expired; expired by it, it fences the pump.
	if _, _, err := eng.Step(ctx); err != nil {
		t.Fatalf("step on a live lease = %v", err)
	}
	if _, err := db.Exec(ctx, "UPDATE msgx_lease SET expires_at = now() - interval '1 second'"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := eng.Step(ctx); err != inbox.ErrLeaseLost {
		t.Fatalf("step on a lease expired by the database's clock = %v", err)
	}
}
