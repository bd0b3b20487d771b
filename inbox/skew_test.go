package inbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/msgx/msgx/backoff"
	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// TestRetryTimesHoldAcrossHostClocks: the first leader's host clock runs ten
// minutes ahead; its message keeps failing (INFRA, retried within a second)
// until it stops. The next leader, on a host with the right time, retries
// the message at once: the retry time was written on the database's clock.
// With each host's own clock it would wait ten minutes.
func TestRetryTimesHoldAcrossHostClocks(t *testing.T) {
	db := storetest.NewPostgres(t, store.WithMigrate(inbox.Schema(), outbox.Schema()))
	setupTables(t, db)
	const stream = "skew"
	engine := func(owner string, host clock.Clock, p inbox.Processor) *inbox.Engine {
		e, err := inbox.New(db, stream, p, inbox.WithOwner(owner), inbox.WithClock(host), inbox.WithLogger(testkit.Quiet()),
			inbox.WithPollInterval(50*time.Millisecond), inbox.WithLease(30*time.Second), inbox.WithMaxAttempts(1000),
			inbox.WithBackoff(backoff.Policy{MaxAttempts: 1000, Initial: 200 * time.Millisecond, Max: time.Second, Multiplier: 2}))
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	ahead, right := newProc(), newProc()
	ahead.set(1, "fail:INFRA")
	if err := db.InTx(context.Background(), func(ctx context.Context, tx store.Tx) error {
		_, err := inbox.Enqueue(ctx, tx, stream, time.Now(), inbox.Incoming{ID: 1, Payload: []byte("a;K")})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	row := func() inbox.Row {
		r, err := inbox.Get(context.Background(), db, stream, 1)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	ra := start(t, engine("ahead", clock.Offset{Base: clock.Real{}, D: 10 * time.Minute}, ahead))
	testkit.Eventually(t, "the failed attempts of the leader ahead", patience, func() bool { r := row(); return r.Status == inbox.Failed && r.Attempts >= 2 })
	ra.stop(t)
	if next := row().NextAttemptAt; next == nil || time.Until(*next) > 5*time.Second {
		t.Fatalf("the leader ahead wrote the retry time %v, %s from now: its host's time, not the database's", next, time.Until(*next))
	}
	start(t, engine("right", clock.Real{}, right))
	testkit.Eventually(t, "the retry by the next leader", patience, func() bool { return row().Status == inbox.Succeeded })
}
