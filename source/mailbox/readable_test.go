package mailbox_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/source/mailbox"
)

// A mailbox table that goes missing on MariaDB: the poller's reads fail,
// the mailbox is not called unreadable before unreadable-after, then
// CheckReadable fails with how long and the server's error and the gauge
// shows the time; the table back, the first poll makes it readable again.
func TestMissingMailboxTableIsUnreadableAfterTheThreshold(t *testing.T) {
	e := newMariaDBEnv(t)
	ctx := context.Background()
	clk := clock.NewFake(t0)
	p := mailbox.NewPoller(e.table, e.db, "sis", mailbox.WithPollerClock(clk), mailbox.WithPollerLogger(testkit.Quiet()),
		mailbox.WithGapTimesFromClock(), mailbox.WithStart(mailbox.FromBeginning()), mailbox.WithUnreadableAfter(30*time.Second))
	gauge := func() float64 { return testutil.ToFloat64(p.UnreadableGauge()) }
	if _, err := p.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.CheckReadable(ctx); err != nil || gauge() != 0 {
		t.Fatalf("readable mailbox: check %v, gauge %v", err, gauge())
	}

	if err := e.table.Drop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Poll(ctx); err == nil {
		t.Fatal("a poll of a missing table succeeded")
	}
	clk.Advance(29 * time.Second)
	if _, err := p.Poll(ctx); err == nil {
		t.Fatal("a poll of a missing table succeeded")
	}
	if err := p.CheckReadable(ctx); err != nil {
		t.Errorf("unreadable for 29 s of 30: %v", err)
	}
	if g := gauge(); g != 29 {
		t.Errorf("gauge after 29 s: %v", g)
	}
	clk.Advance(time.Second)
	err := p.CheckReadable(ctx)
	if err == nil || !strings.Contains(err.Error(), "unreadable for 30s") || !strings.Contains(err.Error(), "doesn't exist") {
		t.Errorf("unreadable for 30 s: check %v", err)
	}
	if since, last := p.Unreadable(); !since.Equal(t0) || last == nil {
		t.Errorf("Unreadable = %v, %v", since, last)
	}

	if err := e.table.Create(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.CheckReadable(ctx); err != nil || gauge() != 0 {
		t.Errorf("the table back: check %v, gauge %v", err, gauge())
	}
}

// A poll that fails in the store, not in the mailbox, does not make the
// mailbox unreadable: the database's own readiness check names that.
func TestStoreFailureDoesNotMakeTheMailboxUnreadable(t *testing.T) {
	e := newMariaDBEnv(t)
	ctx := context.Background()
	clk := clock.NewFake(t0)
	p := mailbox.NewPoller(e.table, e.db, "sis", mailbox.WithPollerClock(clk), mailbox.WithPollerLogger(testkit.Quiet()),
		mailbox.WithGapTimesFromClock(), mailbox.WithStart(mailbox.FromBeginning()), mailbox.WithUnreadableAfter(time.Second))
	e.db.Close()
	if _, err := p.Poll(ctx); err == nil {
		t.Fatal("a poll with the store closed succeeded")
	}
	clk.Advance(time.Minute)
	if since, err := p.Unreadable(); !since.IsZero() || err != nil {
		t.Errorf("store down: mailbox unreadable since %v (%v)", since, err)
	}
}
