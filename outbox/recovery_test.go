package outbox_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/msgx/msgx/backoff"
	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// TestRecoveryBelowTheFloor runs the unordered lane as Run does (claims from
// the floor, not Flush's claims from the start): the broker refuses every
// event once, the floor moves past them all, and then the broker comes back.
// The retries lie below the floor; they must all be sent as soon as they are
// due, batch after batch, without the clock moving on (a claim from the start
// used to reach one batch a second). The retry delay is far longer than the
// clock can move while the test waits for the floor (each step is 25 ms, the
// wait at most 30 s of real time), so no retry comes due, and fails again,
// before the broker is back.
func TestRecoveryBelowTheFloor(t *testing.T) {
	db := storetest.NewPostgres(t, store.WithMigrate(outbox.Schema()))
	clk := clock.NewFake(t0)
	var down atomic.Bool
	down.Store(true)
	s := &sink{fail: func(string, []*broker.Message) (bool, error) {
		if down.Load() {
			return false, errors.New("broker down")
		}
		return true, nil
	}}
	retry := backoff.Policy{MaxAttempts: 5, Initial: time.Hour, Max: 2 * time.Hour}
	r := newRelay(t, db, clk, outbox.WithRetry(retry), outbox.WithPollInterval(20*time.Millisecond),
		outbox.WithLagInterval(time.Hour), outbox.WithCleanupInterval(time.Hour),
		outbox.Target("u", s, outbox.Unordered, outbox.Batch(10), outbox.Workers(1)))
	const n = 50
	var evs []outbox.Event
	for i := range n {
		evs = append(evs, ev("u", strconv.Itoa(i), 1))
	}
	enqueue(t, db, t0, evs...)
	last := get(t, db, evs[n-1].ID).Seq

	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- r.Run(ctx) }()
	defer func() {
		cancel()
		<-stopped
	}()
	parked := func() {
		t.Helper()
		if !clk.WaitForWaiters(ctx.Done(), 2) {
			t.Fatal("relay not parked")
		}
	}
	// Every event fails once; the watermark (sampled each 20 ms of the
	// clock, and held back by every transaction on the server) lets the
	// floor pass them all. The retries are due an hour after t0.
	testkit.Eventually(t, "every event to fail once", 10*time.Second, func() bool {
		var k int
		if err := db.QueryRow(ctx, "SELECT COUNT(*) FROM msgx_outbox WHERE attempts = 1 AND locked_until IS NULL").Scan(&k); err != nil {
			t.Fatal(err)
		}
		return k == n
	})
	// Transactions of other clients of the server (other tests' included)
	// hold the watermark back for as long as they run: the bound is a real
	// time, not a number of samples.
	deadline := time.Now().Add(30 * time.Second)
	for outbox.Floor(r, "u") < last {
		if time.Now().After(deadline) {
			t.Fatalf("the floor stays at %d below %d", outbox.Floor(r, "u"), last)
		}
		parked()
		clk.Advance(25 * time.Millisecond)
	}
	parked()
	if due := t0.Add(retry.Initial); !clk.Now().Before(due) {
		t.Fatalf("the clock reached %v, past the retries' due time %v, before the broker came back", clk.Now(), due)
	}
	down.Store(false)
	clk.Set(t0.Add(retry.Initial + 10*time.Millisecond))
	testkit.Eventually(t, "every retry sent without the clock moving on", 10*time.Second, func() bool { return s.count() == n })
}
