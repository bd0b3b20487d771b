package mailbox_test

import (
	"context"
	"database/sql"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/source/mailbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// lateRecord reads what was recorded of a late row.
func (e *env) lateRecord(id int64) (action string, gapID int64) {
	e.t.Helper()
	err := e.db.QueryRow(context.Background(), "SELECT action, gap_id FROM msgx_inbox_late WHERE stream = 'sis' AND msg_id = $1", id).
		Scan(&action, &gapID)
	if err != nil {
		e.t.Fatalf("late record of %d: %v", id, err)
	}
	return action, gapID
}

// value reads a counter or gauge.
func value(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 1)
	c.Collect(ch)
	var m dto.Metric
	if err := (<-ch).Write(&m); err != nil {
		t.Fatal(err)
	}
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}

func TestLateRowOfAPermanentGapOnMariaDB(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy mailbox.LatePolicy
		action string
		want   []int64
	}{
		{"process", mailbox.ProcessLate, "TAKEN", []int64{1, 2, 3}},
		{"refuse", mailbox.RefuseLate, "REFUSED", []int64{1, 2, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newMariaDBEnv(t)
			ctx := context.Background()
			if _, err := e.table.Insert(ctx, []byte(payload(1)), t0, mailbox.Meta{}); err != nil {
				t.Fatal(err)
			}
			// A writer takes id 2 and commits only after its gap went permanent.
			late, err := e.raw.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = late.Rollback() }()
			if _, err := late.ExecContext(ctx, "INSERT INTO "+e.table.Name()+" (CMINMSGS_CLOB_MSG) VALUES (?)", payload(2)); err != nil {
				t.Fatal(err)
			}
			if _, err := e.table.Insert(ctx, []byte(payload(3)), t0, mailbox.Meta{}); err != nil {
				t.Fatal(err)
			}
			clk := clock.NewFake(t0)
			p := e.poller(clk, mailbox.WithMaxCommitDelay(time.Minute), mailbox.WithLateRows(tc.policy, time.Hour))
			reg := prometheus.NewRegistry()
			reg.MustRegister(p)
			if res := e.poll(p); res.GapFrom != 2 || res.Watermark != 1 {
				t.Fatalf("poll = %+v, want to wait at 2", res)
			}
			clk.Advance(time.Minute)
			if res := e.poll(p); res.Skipped != 1 || res.Watermark != 3 {
				t.Fatalf("poll = %+v, want 2 declared permanent", res)
			}
			if err := late.Commit(); err != nil {
				t.Fatal(err)
			}
			clk.Advance(10 * time.Second)
			if res := e.poll(p); res.Late != 1 {
				t.Fatalf("poll = %+v, want the late row", res)
			}
			if got := e.enqueued(); !slices.Equal(got, tc.want) {
				t.Fatalf("enqueued %v, want %v", got, tc.want)
			}
			if action, gap := e.lateRecord(2); action != tc.action || gap == 0 {
				t.Fatalf("late record = %s (gap %d), want %s", action, gap, tc.action)
			}
			if n := value(t, p.LateRows(tc.action)); n != 1 {
				t.Fatalf("late rows metric = %v", n)
			}
			// Found once: later checks neither record nor count it again.
			clk.Advance(10 * time.Second)
			if res := e.poll(p); res.Late != 0 {
				t.Fatalf("poll = %+v: the late row was found twice", res)
			}
			if mfs, err := reg.Gather(); err != nil || len(mfs) == 0 {
				t.Fatalf("the poller's metrics do not gather: %v", err)
			}
			// Past the retention period the gap is no longer watched.
			clk.Advance(time.Hour)
			e.poll(p)
			if n := value(t, p.GapsWatched()); n != 0 {
				t.Fatalf("gaps watched after retention = %v", n)
			}
			r, err := inbox.Get(ctx, e.db, "sis", 2)
			switch {
			case err != nil:
				t.Fatalf("late message: %v", err)
			case tc.policy == mailbox.ProcessLate && r.Status != inbox.Pending:
				t.Fatalf("late message taken in: %+v", r)
			case tc.policy == mailbox.RefuseLate && (r.Status != inbox.Dead || r.ErrorClass != inbox.Late):
				t.Fatalf("late message refused: %+v, want DEAD %s", r, inbox.Late)
			}
		})
	}
}

func TestGapsAgeOnTheDatabasesClock(t *testing.T) {
	e := newStoreEnv(t, "postgres", storetest.NewPostgres(t, store.WithMigrate(mailbox.Schema())))
	ctx := context.Background()
	clk := clock.NewFake(t0)
	p := mailbox.NewPoller(e.table, e.db, "sis", mailbox.WithPollerClock(clk), mailbox.WithPollerLogger(testkit.Quiet()),
		mailbox.WithMaxCommitDelay(time.Minute), mailbox.WithStart(mailbox.FromBeginning()))
	e.put(1, 3)
	if res := e.poll(p); res.GapFrom != 2 {
		t.Fatalf("poll = %+v", res)
	}
	// This host's clock jumps ahead; the database's has not moved a minute.
	clk.Advance(2 * time.Minute)
	if res := e.poll(p); res.GapFrom != 2 || res.Skipped != 0 {
		t.Fatalf("poll = %+v: a host clock ahead of the database's declared a young gap permanent", res)
	}
	if c := e.cursor(); time.Since(c.GapSeenAt).Abs() > time.Minute {
		t.Fatalf("gap first seen at %v: not the database's time", c.GapSeenAt)
	}
	// A minute later by the database's clock it is permanent.
	if _, err := e.db.Exec(ctx, "UPDATE msgx_inbox_cursor SET gap_seen_at = now() - interval '61 seconds'"); err != nil {
		t.Fatal(err)
	}
	if res := e.poll(p); res.Skipped != 1 || res.Watermark != 3 {
		t.Fatalf("poll = %+v, want the gap declared permanent", res)
	}
}

func TestMailboxRowDeclaredGBKIsReadAsTheUTF8ItIsOnMariaDB(t *testing.T) {
	e := newMariaDBEnv(t)
	// A legacy writer stored a GBK document through a utf8mb4 connection:
	// the column holds UTF-8 text whose declaration still says GBK.
	const stored = `<?xml version="1.0" encoding='GBK'?><MSG><RMRK>航班延误</RMRK></MSG>`
	e.exec("INSERT INTO TBL (CMINMSGS_CLOB_MSG) VALUES (?)", stored)
	rows, err := e.table.Scan(context.Background(), 0, 10)
	if err != nil || len(rows) != 1 {
		t.Fatalf("scan: %v %v", rows, err)
	}
	if want := `<?xml version="1.0" encoding='UTF-8'?><MSG><RMRK>航班延误</RMRK></MSG>`; string(rows[0].Msg) != want {
		t.Fatalf("read %q, want %q", rows[0].Msg, want)
	}
}

func TestEveryLateRowOfAWideGapIsFound(t *testing.T) {
	eachMailbox(t, func(t *testing.T, e *env) {
		clk := clock.NewFake(t0)
		p := e.poller(clk, mailbox.WithClaimBatch(2), mailbox.WithMaxCommitDelay(time.Minute))
		e.put(1, 6)
		e.poll(p)
		clk.Advance(time.Minute)
		if res := e.poll(p); res.Skipped != 4 || res.Watermark != 6 {
			t.Fatalf("poll = %+v, want 2-5 declared permanent", res)
		}
		e.put(2, 3, 4, 5) // more late rows than one claim batch
		clk.Advance(10 * time.Second)
		if res := e.poll(p); res.Late != 4 {
			t.Fatalf("poll = %+v, want all 4 late rows", res)
		}
		if got := e.enqueued(); !slices.Equal(got, seq(1, 6)) {
			t.Fatalf("enqueued %v", got)
		}
	})
}

// lateInsert writes rows 1 and 3 and row 2 between them in a transaction
// left open, which the caller commits when row 2 is to come late; the test's
// end rolls it back if it was not.
func (e *env) lateInsert(t *testing.T, ctx context.Context) *sql.Tx {
	t.Helper()
	if _, err := e.table.Insert(ctx, []byte(payload(1)), t0, mailbox.Meta{}); err != nil {
		t.Fatal(err)
	}
	late, err := e.raw.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = late.Rollback() })
	if _, err := late.ExecContext(ctx, "INSERT INTO "+e.table.Name()+" (CMINMSGS_CLOB_MSG) VALUES (?)", payload(2)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.table.Insert(ctx, []byte(payload(3)), t0, mailbox.Meta{}); err != nil {
		t.Fatal(err)
	}
	return late
}

// The sequence with a max commit delay of 10 s: the gap at a row is
// declared permanent, the row after it is processed, then the row commits.
// By default it is not processed — its older change would overwrite the
// newer one — but kept DEAD as LATE with what an operator needs to decide.
func TestLateRowIsNotAppliedOverANewerOneOnMariaDB(t *testing.T) {
	e := newMariaDBEnv(t)
	ctx := context.Background()
	late := e.lateInsert(t, ctx)
	clk := clock.NewFake(t0)
	proc := &orderProc{}
	p := e.poller(clk, mailbox.WithMaxCommitDelay(10*time.Second)) // the default late-row policy
	e.runEngine(proc, p, clk, e.table)
	testkit.Eventually(t, "the poller to wait at the gap", patience, func() bool {
		c, ok, _ := inbox.LoadCursor(ctx, e.db, "sis")
		return ok && c.GapFrom == 2 && len(proc.ran()) == 1
	})
	clk.Advance(10 * time.Second)
	p.Nudge()
	// Processed and committed: the processor ran inside the transaction,
	// which may not have committed yet when it returns.
	testkit.Eventually(t, "the gap declared permanent and row 3 processed", patience, func() bool {
		r, err := inbox.Get(ctx, e.db, "sis", 3)
		return len(proc.ran()) == 2 && err == nil && r.Status == inbox.Succeeded
	})
	if err := late.Commit(); err != nil {
		t.Fatal(err)
	}
	clk.Advance(10 * time.Second) // the next look at the permanent gaps
	p.Nudge()
	var r inbox.Row
	testkit.Eventually(t, "the late row recorded", patience, func() bool {
		var err error
		r, err = inbox.Get(ctx, e.db, "sis", 2)
		return err == nil
	})
	if r.Status != inbox.Dead || r.ErrorClass != inbox.Late {
		t.Fatalf("late row: %s %s (%s), want DEAD %s", r.Status, r.ErrorClass, r.Reason, inbox.Late)
	}
	for _, want := range []string{"mailbox row 2", "gap 2-2", "20s before it was found", "newer messages already applied: 3"} {
		if !strings.Contains(r.Reason, want) {
			t.Errorf("reason %q does not say %q", r.Reason, want)
		}
	}
	if action, _ := e.lateRecord(2); action != "REFUSED" {
		t.Errorf("late record %s, want REFUSED", action)
	}
	// Not processed: a quiet period in which the pump, woken, leaves it alone.
	p.Nudge()
	quietUntil := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(quietUntil) {
		if got := proc.ran(); !slices.Equal(got, []int64{1, 3}) {
			t.Fatalf("processed %v: the late row was applied after the newer one", got)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Replaying it is deliberate and possible.
	res, err := inbox.Replay(ctx, e.db, "sis", t0, inbox.ReplayRequest{IDs: []int64{2}, Actor: "op", Reason: "checked: apply it"})
	if err != nil || !slices.Equal(res.Replayed, []int64{2}) {
		t.Fatalf("replay: %+v %v", res, err)
	}
}

// A writer that stores a row and enqueues it itself (the HTTP ingress, a
// broker source) and commits after the poller declared its id a permanent
// gap does not get it processed after newer rows through its own enqueue:
// the late-row policy decides, as for any late row.
func TestLateRowOfAWriterThatEnqueuesItselfOnMariaDB(t *testing.T) {
	e := newMariaDBEnv(t)
	ctx := context.Background()
	late := e.lateInsert(t, ctx)
	clk := clock.NewFake(t0)
	p := e.poller(clk, mailbox.WithMaxCommitDelay(10*time.Second))
	e.poll(p)
	clk.Advance(10 * time.Second)
	if res := e.poll(p); res.Skipped != 1 || res.Watermark != 3 {
		t.Fatalf("poll = %+v, want 2 declared permanent", res)
	}
	if err := late.Commit(); err != nil {
		t.Fatal(err)
	}
	// The writer's enqueue after its (late) insert, as the HTTP ingress does it.
	eng, err := inbox.New(e.db, "sis", &orderProc{}, inbox.WithLogger(testkit.Quiet()))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := eng.Enqueue(ctx, inbox.Incoming{ID: 2, Payload: []byte(payload(2))}); err != nil || n != 0 {
		t.Fatalf("the writer's enqueue of the late row: %d %v, want it left to the poller", n, err)
	}
	clk.Advance(10 * time.Second)
	if res := e.poll(p); res.Late != 1 {
		t.Fatalf("poll = %+v, want the late row", res)
	}
	if r, err := inbox.Get(ctx, e.db, "sis", 2); err != nil || r.Status != inbox.Dead || r.ErrorClass != inbox.Late {
		t.Fatalf("late row: %+v %v, want DEAD %s", r, err, inbox.Late)
	}
}
