package mailbox_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/source/mailbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// downMailbox fails every read.
type downMailbox struct{ scans atomic.Int32 }

func (d *downMailbox) Scan(context.Context, int64, int) ([]mailbox.Row, error) {
	d.scans.Add(1)
	return nil, errors.New("mailbox server unreachable")
}
func (d *downMailbox) ScanRange(context.Context, int64, int64, int) ([]mailbox.Row, error) {
	return nil, nil
}
func (d *downMailbox) MaxID(context.Context) (int64, error) { return 0, nil }

// countingHandler counts warnings and errors.
type countingHandler struct{ n atomic.Int32 }

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		h.n.Add(1)
	}
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

func TestPollerBacksOffOnErrorsAndRateLimitsItsLog(t *testing.T) {
	db := storetest.NewSQLite(t, store.WithMigrate(mailbox.Schema()))
	clk := clock.NewFake(t0)
	down := &downMailbox{}
	logs := &countingHandler{}
	p := mailbox.NewPoller(down, db, "sis", mailbox.WithPollerClock(clk), mailbox.WithPollerLogger(slog.New(logs)),
		mailbox.WithGapTimesFromClock(), mailbox.WithStart(mailbox.FromBeginning()))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = p.Run(ctx, func() {}); close(done) }()
	defer func() { cancel(); <-done }()
	waitParked := func() {
		t.Helper()
		stop := make(chan struct{})
		timer := time.AfterFunc(10*time.Second, func() { close(stop) })
		defer timer.Stop()
		if !clk.WaitForWaiters(stop, 1) {
			t.Fatal("the poller never waited")
		}
	}
	for i, d := range []time.Duration{1, 2, 4, 8, 16, 30, 30, 30} {
		d *= time.Second
		waitParked()
		if n := down.scans.Load(); n != int32(i+1) {
			t.Fatalf("%d scans, want %d", n, i+1)
		}
		p.Nudge() // a nudge does not cut the backoff short
		clk.Advance(d - time.Millisecond)
		if clk.Waiters() != 1 {
			t.Fatalf("failure %d: the poller polled again before %v", i+1, d)
		}
		clk.Advance(time.Millisecond)
	}
	waitParked()
	// Nine failures at 0, 1, 3, 7, 15, 31, 61, 91 and 121 s: logged at the
	// first, then at most once per 30 s (31, 61, 91, 121).
	if n := logs.n.Load(); n != 5 {
		t.Fatalf("%d log lines for 9 failures", n)
	}
}
