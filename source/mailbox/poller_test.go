package mailbox_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/source/mailbox"
	"github.com/msgx/msgx/store"
)

func TestPollerEnqueuesInIDOrderAndAdvancesTheWatermark(t *testing.T) {
	eachMailbox(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		for i := range 120 {
			id, err := e.table.Insert(ctx, []byte(payload(int64(i+1))), t0, mailbox.Meta{Subsystem: "AODB", Sequence: int64(i)})
			if err != nil || id != int64(i+1) {
				t.Fatalf("insert %d: %d, %v", i+1, id, err)
			}
		}
		p := e.poller(clock.NewFake(t0), mailbox.WithScansPerCommit(1))
		for _, want := range []mailbox.PollResult{
			{Enqueued: 50, Watermark: 50, Advanced: true, More: true},
			{Enqueued: 50, Watermark: 100, Advanced: true, More: true},
			{Enqueued: 20, Watermark: 120, Advanced: true},
			{Watermark: 120},
		} {
			if got := e.poll(p); got != want {
				t.Fatalf("poll = %+v, want %+v", got, want)
			}
		}
		if got := e.enqueued(); !slices.Equal(got, seq(1, 120)) {
			t.Fatalf("enqueued %v", got)
		}
		// Rescans are idempotent: from a watermark put back to 0, nothing is
		// enqueued twice and W comes back to the top.
		if _, err := e.db.Exec(ctx, "UPDATE msgx_inbox_cursor SET watermark = 0"); err != nil {
			t.Fatal(err)
		}
		total := 0
		for range 3 {
			total += e.poll(p).Enqueued
		}
		if total != 0 || e.cursor().Watermark != 120 || len(e.enqueued()) != 120 {
			t.Fatalf("rescan enqueued %d, W=%d", total, e.cursor().Watermark)
		}
	})
}

func TestPollerEnqueuesSeveralReadsInOneTransaction(t *testing.T) {
	eachMailbox(t, func(t *testing.T, e *env) {
		for i := int64(1); i <= 130; i++ {
			if i != 111 {
				e.put(i)
			}
		}
		p := e.poller(clock.NewFake(t0), mailbox.WithScansPerCommit(2))
		for _, want := range []mailbox.PollResult{
			{Enqueued: 100, Watermark: 100, Advanced: true, More: true},
			// The next reads stop at the hole at 111.
			{Enqueued: 10, Watermark: 110, GapFrom: 111, Advanced: true},
			{Watermark: 110, GapFrom: 111},
		} {
			if got := e.poll(p); got != want {
				t.Fatalf("poll = %+v, want %+v", got, want)
			}
		}
		if got := e.enqueued(); !slices.Equal(got, seq(1, 110)) {
			t.Fatalf("enqueued %v", got)
		}
	})
}

func TestPollerIgnoresTheProcessedMark(t *testing.T) {
	eachMailbox(t, func(t *testing.T, e *env) {
		e.put(1, 2, 3)
		// Row 2 already carries a processed mark (set by anyone): the poller
		// reads by id only.
		e.exec("UPDATE TBL SET CMINMSGS_STATUS = 'DONE', CMINMSGS_DATE_PROCESSED = ? WHERE CMINMSGS_ID = 2", t0)
		e.poll(e.poller(clock.NewFake(t0)))
		if got := e.enqueued(); !slices.Equal(got, []int64{1, 2, 3}) {
			t.Fatalf("enqueued %v", got)
		}
	})
}

func TestInterruptedEnqueueLeavesNothingAndIsRepaired(t *testing.T) {
	eachMailbox(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		for i := int64(1); i <= 40; i++ {
			e.put(i)
		}
		// The enqueue transaction breaks at message 30, after 1..29 were written.
		var drop string
		switch e.db.Dialect() {
		case store.Postgres:
			for _, s := range []string{
				`CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'boom'; END $$`,
				`CREATE TRIGGER boom BEFORE INSERT ON msgx_inbox FOR EACH ROW WHEN (NEW.msg_id = 30) EXECUTE FUNCTION boom()`,
			} {
				if _, err := e.db.Exec(ctx, s); err != nil {
					t.Fatal(err)
				}
			}
			drop = "DROP TRIGGER boom ON msgx_inbox"
		default:
			if _, err := e.db.Exec(ctx, `CREATE TRIGGER boom BEFORE INSERT ON msgx_inbox WHEN NEW.msg_id = 30 BEGIN SELECT RAISE(ABORT, 'boom'); END`); err != nil {
				t.Fatal(err)
			}
			drop = "DROP TRIGGER boom"
		}
		p := e.poller(clock.NewFake(t0))
		if _, err := p.Poll(ctx); err == nil {
			t.Fatal("poll through a broken enqueue succeeded")
		}
		if got := e.enqueued(); len(got) != 0 || e.cursor().Watermark != 0 {
			t.Fatalf("after the failed enqueue: %v enqueued, W=%d", got, e.cursor().Watermark)
		}
		// A cancelled poll (shutdown in the middle) leaves nothing either.
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := p.Poll(cctx); err == nil {
			t.Fatal("cancelled poll succeeded")
		}
		if _, err := e.db.Exec(ctx, drop); err != nil {
			t.Fatal(err)
		}
		e.poll(p)
		e.poll(p)
		if got := e.enqueued(); !slices.Equal(got, seq(1, 40)) || e.cursor().Watermark != 40 {
			t.Fatalf("after the repair: %v, W=%d", got, e.cursor().Watermark)
		}
	})
}

func TestGapStopsThePollerUntilFilledOrPermanent(t *testing.T) {
	eachMailbox(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		clk := clock.NewFake(t0)
		p := e.poller(clk, mailbox.WithMaxCommitDelay(time.Minute))
		e.put(1, 2, 4, 5)
		if res := e.poll(p); res.Watermark != 2 || res.GapFrom != 3 || res.Enqueued != 2 {
			t.Fatalf("poll = %+v, want to stop before the gap at 3", res)
		}
		clk.Advance(59 * time.Second)
		if res := e.poll(p); res.Watermark != 2 || res.Enqueued != 0 {
			t.Fatalf("poll = %+v: a young gap must hold", res)
		}
		if c := e.cursor(); c.GapFrom != 3 || !c.GapSeenAt.Equal(t0) {
			t.Fatalf("cursor = %+v: the gap ages from when it was first seen", c)
		}
		// The smaller id commits late: it is enqueued in order, before 4 and 5.
		e.put(3)
		if res := e.poll(p); res.Watermark != 5 || res.GapFrom != 0 || res.Enqueued != 3 {
			t.Fatalf("poll = %+v", res)
		}
		// A new gap at 7 ages from now ...
		t1 := clk.Now()
		e.put(6, 8)
		if res := e.poll(p); res.Watermark != 6 || res.GapFrom != 7 {
			t.Fatalf("poll = %+v", res)
		}
		clk.Advance(time.Minute)
		// ... and after the max commit delay it is permanent: recorded, skipped.
		// The next gap (9) starts its own aging.
		e.put(10)
		res := e.poll(p)
		if res.Watermark != 8 || res.GapFrom != 9 || res.Skipped != 1 {
			t.Fatalf("poll = %+v", res)
		}
		if c := e.cursor(); !c.GapSeenAt.Equal(t1.Add(time.Minute)) {
			t.Fatalf("the newer gap's aging starts at %v, want %v", c.GapSeenAt, t1.Add(time.Minute))
		}
		var from, to int64
		var first, declared time.Time
		if err := e.db.QueryRow(ctx, "SELECT from_id, to_id, first_seen_at, declared_at FROM msgx_inbox_gap WHERE stream = 'sis'").
			Scan(&from, &to, &first, &declared); err != nil {
			t.Fatal(err)
		}
		if from != 7 || to != 7 || !first.Equal(t1) || !declared.Equal(t1.Add(time.Minute)) {
			t.Fatalf("gap record %d-%d %v %v", from, to, first, declared)
		}
		clk.Advance(59 * time.Second)
		if res := e.poll(p); res.Watermark != 8 {
			t.Fatalf("poll = %+v: the newer gap is still young", res)
		}
		clk.Advance(time.Second)
		if res := e.poll(p); res.Watermark != 10 || res.GapFrom != 0 {
			t.Fatalf("poll = %+v", res)
		}
		// A permanent gap's row that shows up after all is taken in late, out
		// of order, and recorded as such.
		e.put(7)
		clk.Advance(10 * time.Second)
		if res := e.poll(p); res.Late != 1 || res.Watermark != 10 {
			t.Fatalf("poll = %+v, want the late row 7", res)
		}
		if got := e.enqueued(); !slices.Equal(got, []int64{1, 2, 3, 4, 5, 6, 7, 8, 10}) {
			t.Fatalf("enqueued %v", got)
		}
	})
}

func TestBackfillWritesTheProcessedMark(t *testing.T) {
	eachMailbox(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		e.put(1, 2, 3)
		at := t0.Add(90 * time.Minute)
		if err := e.table.Backfill(ctx, []int64{1, 3}, at); err != nil {
			t.Fatal(err)
		}
		if err := e.table.Backfill(ctx, []int64{1}, at); err != nil { // twice is harmless
			t.Fatal(err)
		}
		got := e.marks()
		if got[1].status != "DONE" || !got[1].at.Equal(at) || got[3].status != "DONE" || got[2].status != "" || !got[2].at.IsZero() {
			t.Fatalf("marks %+v", got)
		}
	})
}

type mark struct {
	status string
	at     time.Time
}

// marks reads every row's processed mark.
func (e *env) marks() map[int64]mark {
	e.t.Helper()
	out := map[int64]mark{}
	q := "SELECT CMINMSGS_ID, COALESCE(CMINMSGS_STATUS, ''), CMINMSGS_DATE_PROCESSED FROM " + e.table.Name()
	scan := func(next func() bool, sc func(...any) error) {
		for next() {
			var id int64
			var m mark
			var at *time.Time
			if err := sc(&id, &m.status, &at); err != nil {
				e.t.Fatal(err)
			}
			if at != nil {
				m.at = *at
			}
			out[id] = m
		}
	}
	if e.raw != nil {
		rows, err := e.raw.Query(q)
		if err != nil {
			e.t.Fatal(err)
		}
		defer rows.Close()
		scan(rows.Next, rows.Scan)
		// DATETIME holds airport wall time (the driver read it as UTC).
		for id, m := range out {
			if !m.at.IsZero() {
				m.at = airportWallTime(m.at)
				out[id] = m
			}
		}
		return out
	}
	rows, err := e.db.Query(context.Background(), q)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	scan(rows.Next, rows.Scan)
	return out
}

// orderProc records the order in which messages are processed.
type orderProc struct {
	mu    sync.Mutex
	order []int64
}

func (p *orderProc) Decode(b []byte) (inbox.Decoded, error) {
	return inbox.Decoded{Identity: string(b), Kind: "T"}, nil
}

func (p *orderProc) Process(_ context.Context, _ store.Tx, m *inbox.Message) (inbox.Outcome, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.order = append(p.order, m.ID)
	return inbox.Done(), nil
}

func (p *orderProc) ran() []int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]int64(nil), p.order...)
}

// failingBackfill is a mailbox whose processed-mark writes fail.
type failingBackfill struct{}

func (failingBackfill) Backfill(context.Context, []int64, time.Time) error {
	return errors.New("mailbox write refused")
}

// runEngine runs an engine fed by the poller until the test ends.
func (e *env) runEngine(proc inbox.Processor, p *mailbox.Poller, clk clock.Clock, bf inbox.Backfiller, opts ...inbox.Option) *inbox.Engine {
	e.t.Helper()
	base := []inbox.Option{inbox.WithClock(clk), inbox.WithDatabaseClock(false), inbox.WithLogger(testkit.Quiet()), inbox.WithSource(p), inbox.WithBackfill(bf)}
	eng, err := inbox.New(e.db, "sis", proc, append(base, opts...)...)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx) }()
	e.t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			e.t.Error("engine did not stop")
		}
	})
	return eng
}

func TestEndToEndFromMailboxToBackfill(t *testing.T) {
	eachMailbox(t, func(t *testing.T, e *env) {
		e.put(1, 2, 3)
		clk := clock.NewFake(t0)
		proc := &orderProc{}
		p := e.poller(clk)
		e.runEngine(proc, p, clk, e.table)
		// No clock movement: the first poll enqueues, wakes the pump, and the
		// commit triggers the backfill.
		testkit.Eventually(t, "processing and backfill", patience, func() bool {
			m := e.marks()
			return m[1].status == "DONE" && m[2].status == "DONE" && m[3].status == "DONE"
		})
		e.put(4)
		p.Nudge()
		testkit.Eventually(t, "message 4", patience, func() bool { return e.marks()[4].status == "DONE" })
		if got := proc.ran(); !slices.Equal(got, []int64{1, 2, 3, 4}) {
			t.Fatalf("processed %v", got)
		}
	})
}

func TestUnbackfilledMessagesDoNotBlockDiscovery(t *testing.T) {
	eachMailbox(t, func(t *testing.T, e *env) {
		e.put(1, 2)
		clk := clock.NewFake(t0)
		proc := &orderProc{}
		p := e.poller(clk)
		e.runEngine(proc, p, clk, failingBackfill{})
		testkit.Eventually(t, "first messages", patience, func() bool { return len(proc.ran()) == 2 })
		e.put(3, 4)
		p.Nudge()
		testkit.Eventually(t, "later messages", patience, func() bool { return len(proc.ran()) == 4 })
		for _, id := range []int64{1, 2} {
			r, err := inbox.Get(context.Background(), e.db, "sis", id)
			if err != nil || r.Status != inbox.Succeeded || r.BackfilledAt != nil {
				t.Fatalf("message %d: %+v %v", id, r, err)
			}
		}
	})
}

func TestSmallerIDCommittedLateOnMariaDB(t *testing.T) {
	e := newMariaDBEnv(t)
	ctx := context.Background()
	if id, err := e.table.Insert(ctx, []byte(payload(1)), t0, mailbox.Meta{}); err != nil || id != 1 {
		t.Fatalf("insert: %d %v", id, err)
	}
	// A writer takes id 2 and commits late; id 3 commits first.
	late, err := e.raw.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = late.Rollback() }()
	res, err := late.ExecContext(ctx, "INSERT INTO "+e.table.Name()+" (CMINMSGS_CLOB_MSG) VALUES (?)", payload(2))
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := res.LastInsertId(); id != 2 {
		t.Fatalf("late row got id %d", id)
	}
	if id, err := e.table.Insert(ctx, []byte(payload(3)), t0, mailbox.Meta{}); err != nil || id != 3 {
		t.Fatalf("insert: %d %v", id, err)
	}
	clk := clock.NewFake(t0)
	proc := &orderProc{}
	p := e.poller(clk)
	e.runEngine(proc, p, clk, e.table)
	testkit.Eventually(t, "the poller to stop at the gap", patience, func() bool {
		c, ok, _ := inbox.LoadCursor(ctx, e.db, "sis")
		return ok && c.GapFrom == 2
	})
	testkit.Eventually(t, "message 1", patience, func() bool { return len(proc.ran()) == 1 })
	if got := e.enqueued(); !slices.Equal(got, []int64{1}) {
		t.Fatalf("enqueued %v: nothing after the gap", got)
	}
	if err := late.Commit(); err != nil {
		t.Fatal(err)
	}
	p.Nudge()
	testkit.Eventually(t, "messages 2 and 3", patience, func() bool { return len(proc.ran()) == 3 })
	if got := proc.ran(); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Fatalf("processed %v: the late row must not be overtaken", got)
	}
}
