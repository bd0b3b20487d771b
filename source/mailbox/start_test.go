package mailbox_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/source/mailbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

func TestFirstStartMustBeChosen(t *testing.T) {
	eachMailbox(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		e.put(1, 2, 3)
		clk := clock.NewFake(t0)
		poller := func(stream string, start mailbox.Start) *mailbox.Poller {
			return mailbox.NewPoller(e.table, e.db, stream, mailbox.WithPollerClock(clk), mailbox.WithPollerLogger(testkit.Quiet()), mailbox.WithStart(start))
		}
		if _, err := poller("unset", mailbox.Start{}).Poll(ctx); !errors.Is(err, mailbox.ErrNoStart) {
			t.Fatalf("poll without a cursor or a start = %v, want ErrNoStart", err)
		}
		if _, ok, _ := inbox.LoadCursor(ctx, e.db, "unset"); ok {
			t.Fatal("a cursor was created without a start")
		}
		for _, tc := range []struct {
			stream string
			start  mailbox.Start
			want   int64
		}{
			{"now", mailbox.FromNow(), 3},
			{"id", mailbox.FromID(1), 1},
			{"beginning", mailbox.FromBeginning(), 0},
		} {
			p := poller(tc.stream, tc.start)
			if _, err := p.Poll(ctx); err != nil {
				t.Fatal(err)
			}
			c, ok, err := inbox.LoadCursor(ctx, e.db, tc.stream)
			if err != nil || !ok {
				t.Fatalf("%s: cursor %v %v", tc.stream, ok, err)
			}
			if tc.start == mailbox.FromNow() && c.Watermark != 3 {
				t.Fatalf("from now: W = %d, want 3", c.Watermark)
			}
			if c.Watermark != 3 {
				t.Fatalf("%s: W = %d after the first poll", tc.stream, c.Watermark)
			}
			counts, err := inbox.Counts(ctx, e.db, tc.stream)
			if err != nil {
				t.Fatal(err)
			}
			if got := int64(counts[inbox.Pending]); got != 3-tc.want {
				t.Fatalf("%s: %d enqueued, want %d", tc.stream, got, 3-tc.want)
			}
		}
		// Once the cursor exists the start no longer matters.
		e.put(4)
		if res, err := poller("now", mailbox.Start{}).Poll(ctx); err != nil || res.Watermark != 4 || res.Enqueued != 1 {
			t.Fatalf("poll of an existing stream without a start = %+v, %v", res, err)
		}
	})
}

// gatedScanner holds the poller's first read until it is opened.
type gatedScanner struct {
	*mailbox.Table
	reached chan struct{}
	open    chan struct{}
}

func (g *gatedScanner) Scan(ctx context.Context, after int64, limit int) ([]mailbox.Row, error) {
	select {
	case g.reached <- struct{}{}:
	default:
	}
	select {
	case <-g.open:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.Table.Scan(ctx, after, limit)
}

func TestNothingOvertakesTheMailboxBeforeTheCursorExists(t *testing.T) {
	e := newStoreEnv(t, "postgres", storetest.NewPostgres(t, store.WithMigrate(mailbox.Schema())))
	ctx := context.Background()
	e.put(1, 2, 3, 4, 5)
	clk := clock.NewFake(t0)
	g := &gatedScanner{Table: e.table, reached: make(chan struct{}, 1), open: make(chan struct{})}
	p := mailbox.NewPoller(g, e.db, "sis", mailbox.WithPollerClock(clk), mailbox.WithPollerLogger(testkit.Quiet()),
		mailbox.WithGapTimesFromClock(), mailbox.WithStart(mailbox.FromBeginning()))
	// Message 5 arrived over HTTP before the poller read the mailbox.
	if err := e.db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		_, err := inbox.Enqueue(ctx, tx, "sis", t0, inbox.Incoming{ID: 5, Payload: []byte(payload(5))})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	proc := &orderProc{}
	e.runEngine(proc, p, clk, e.table)
	<-g.reached
	// The pump has looked and parked (its timer, the renewer's and the backfill
	// sweep's are on the clock): it did not take message 5.
	done := make(chan struct{})
	timer := time.AfterFunc(10*time.Second, func() { close(done) })
	defer timer.Stop()
	if !clk.WaitForWaiters(done, 3) {
		t.Fatal("the pump never parked")
	}
	if got := proc.ran(); len(got) != 0 {
		t.Fatalf("processed %v before the mailbox's older rows were read", got)
	}
	close(g.open)
	testkit.Eventually(t, "all five", patience, func() bool { return len(proc.ran()) == 5 })
	if got := proc.ran(); !slices.Equal(got, []int64{1, 2, 3, 4, 5}) {
		t.Fatalf("processed %v", got)
	}
}
