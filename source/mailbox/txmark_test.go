package mailbox_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/failpoint"
	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/source/mailbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// eachStoreMailbox runs fn with the mailbox in the inbox's own store: SQLite
// (the embedded default) and PostgreSQL.
func eachStoreMailbox(t *testing.T, fn func(t *testing.T, e *env)) {
	t.Run("sqlite", func(t *testing.T) {
		fn(t, newStoreEnv(t, "sqlite", storetest.NewSQLite(t, store.WithMigrate(mailbox.Schema()))))
	})
	t.Run("postgres", func(t *testing.T) {
		fn(t, newStoreEnv(t, "postgres", storetest.NewPostgres(t, store.WithMigrate(mailbox.Schema()))))
	})
}

// badWriteProc processes messages in order; the write of message bad goes to
// a table that does not exist.
type badWriteProc struct {
	orderProc
	bad int64
}

func (p *badWriteProc) Process(ctx context.Context, tx store.Tx, m *inbox.Message) (inbox.Outcome, error) {
	if m.ID == p.bad {
		if err := tx.ExecBatch(ctx, store.Stmt{SQL: "INSERT INTO inboxmark_missing (id) VALUES (1)"}); err != nil {
			return inbox.Outcome{}, err
		}
	}
	return p.orderProc.Process(ctx, tx, m)
}

// markState compares the mailbox's marks with the inbox's rows: every
// terminal message has its mark and its row says it is backfilled, with no
// intent left; no other message has a mark.
func (e *env) markState(ids ...int64) error {
	marks := e.marks()
	for _, id := range ids {
		r, err := inbox.Get(context.Background(), e.db, "sis", id)
		if err != nil {
			return err
		}
		marked := marks[id].status == "DONE"
		switch {
		case r.Status.Terminal() && (!marked || r.BackfilledAt == nil || r.BackfillNextAt != nil):
			return fmt.Errorf("message %d is %s: mailbox mark %v, backfilled %v, intent %v", id, r.Status, marked, r.BackfilledAt, r.BackfillNextAt)
		case !r.Status.Terminal() && marked:
			return fmt.Errorf("message %d is %s but its mailbox row is marked", id, r.Status)
		}
	}
	return nil
}

// TestProcessedMarkIsWrittenInThePumpTransaction: with the mailbox in the
// store, the marks of a batch commit with its statuses. Right after the
// commit (before anything else could write them) they are there; a batch
// whose transaction failed as a whole left none; and at every commit the
// marked rows are exactly the terminal ones.
func TestProcessedMarkIsWrittenInThePumpTransaction(t *testing.T) {
	eachStoreMailbox(t, func(t *testing.T, e *env) {
		if !e.table.BackfillsIn(e.db) {
			t.Fatal("a table in the store does not say so")
		}
		e.put(1, 2, 3, 4)
		clk := clock.NewFake(t0)
		proc := &badWriteProc{bad: 3}
		ids := []int64{1, 2, 3, 4}
		var (
			mu      sync.Mutex
			reached int
			commits [][]int64
			failed  int64
		)
		check := func(when string) {
			if err := e.markState(ids...); err != nil {
				t.Errorf("%s: %v", when, err)
			}
		}
		fp, err := failpoint.Parse(failpoint.InboxAfterCommit+"=1", failpoint.WithKill(func() {
			mu.Lock()
			reached++
			mu.Unlock()
			check("right after the first commit")
		}))
		if err != nil {
			t.Fatal(err)
		}
		e.runEngine(proc, e.poller(clk), clk, e.table, inbox.WithGroupSize(4), inbox.WithFailpoints(fp),
			inbox.WithOnCommit(func(c inbox.Committed) {
				check("after a commit")
				mu.Lock()
				commits = append(commits, c.IDs)
				failed = c.Failed
				mu.Unlock()
			}))
		// Message 3 fails and holds the head (its retry waits on the fake
		// clock); 1 and 2 are done. The commit hook runs after the commit's
		// other work, so once it saw the failure the checks ran.
		testkit.Eventually(t, "the failure of message 3", patience, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return failed == 3
		})
		mu.Lock()
		defer mu.Unlock()
		if reached != 1 {
			t.Fatalf("after-commit point reached %d times, want 1", reached)
		}
		if got := proc.ran(); !slices.Equal(got[len(got)-2:], []int64{1, 2}) {
			t.Fatalf("processed %v", got)
		}
		check("at the end")
		if m := e.marks(); m[1].status != "DONE" || !m[1].at.Equal(t0) || m[2].status != "DONE" || m[3].status != "" || m[4].status != "" {
			t.Fatalf("marks %+v", m)
		}
		if e.name == "postgres" {
			// On PostgreSQL the batch of four ran in one pipeline and failed
			// as a whole; 1 and 2 then committed one per transaction.
			if len(commits) < 2 || !slices.EqualFunc(commits[:2], [][]int64{{1}, {2}}, slices.Equal) {
				t.Fatalf("commits %v, want [1] and [2] apart after the failed batch", commits)
			}
		}
		// A table in another store cannot be written in this one's
		// transactions.
		other, err := mailbox.NewStore(storetest.NewSQLite(t, store.WithMigrate(mailbox.Schema())), mailbox.WithTable(e.table.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if other.BackfillsIn(e.db) {
			t.Fatal("a table of another store says it lives in this one")
		}
	})
}

// TestMariaDBMailboxKeepsTheBackfillIntent: a mailbox on the shared server
// is written after the commit, from the durable intent.
func TestMariaDBMailboxKeepsTheBackfillIntent(t *testing.T) {
	e := newMariaDBEnv(t)
	if e.table.BackfillsIn(e.db) {
		t.Fatal("a MySQL mailbox says it lives in the store")
	}
	e.put(1)
	clk := clock.NewFake(t0)
	intent := make(chan error, 1)
	fp, err := failpoint.Parse(failpoint.InboxAfterCommit+"=1", failpoint.WithKill(func() {
		r, err := inbox.Get(context.Background(), e.db, "sis", 1)
		if err == nil && (r.BackfillNextAt == nil || r.BackfilledAt != nil || e.marks()[1].status != "") {
			err = fmt.Errorf("after the commit: intent %v, backfilled %v, mark %q", r.BackfillNextAt, r.BackfilledAt, e.marks()[1].status)
		}
		intent <- err
	}))
	if err != nil {
		t.Fatal(err)
	}
	e.runEngine(&orderProc{}, e.poller(clk), clk, e.table, inbox.WithFailpoints(fp))
	testkit.Eventually(t, "the mark, after the commit", patience, func() bool {
		r, err := inbox.Get(context.Background(), e.db, "sis", 1)
		return err == nil && r.BackfilledAt != nil && e.marks()[1].status == "DONE"
	})
	if err := <-intent; err != nil {
		t.Fatal(err)
	}
}

// TestSkippedAndDeadMessagesGetTheirMarkInTheTransaction: a duplicate
// (SKIPPED) and a message that is not one (DEAD, MALFORMED) are terminal
// too: their marks commit with their statuses.
func TestSkippedAndDeadMessagesGetTheirMarkInTheTransaction(t *testing.T) {
	eachStoreMailbox(t, func(t *testing.T, e *env) {
		e.put(1)
		e.exec("INSERT INTO TBL (CMINMSGS_ID, CMINMSGS_CLOB_MSG) VALUES (?, ?)", 2, payload(1)) // a duplicate of 1
		e.exec("INSERT INTO TBL (CMINMSGS_ID, CMINMSGS_CLOB_MSG) VALUES (?, ?)", 3, "")         // not a message
		e.put(4)
		clk := clock.NewFake(t0)
		checked := make(chan error, 1)
		fp, err := failpoint.Parse(failpoint.InboxAfterCommit+"=1", failpoint.WithKill(func() { checked <- e.markState(1, 2, 3, 4) }))
		if err != nil {
			t.Fatal(err)
		}
		e.runEngine(&orderProc{}, e.poller(clk), clk, e.table, inbox.WithGroupSize(4), inbox.WithFailpoints(fp))
		testkit.Eventually(t, "every message finished", patience, func() bool {
			r, err := inbox.Get(context.Background(), e.db, "sis", 4)
			return err == nil && r.Status.Terminal()
		})
		select {
		case err := <-checked:
			if err != nil {
				t.Fatalf("right after the first commit: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the after-commit point was not reached")
		}
		for id, want := range map[int64]inbox.Status{1: inbox.Succeeded, 2: inbox.Skipped, 3: inbox.Dead, 4: inbox.Succeeded} {
			if r, err := inbox.Get(context.Background(), e.db, "sis", id); err != nil || r.Status != want {
				t.Fatalf("message %d: %+v %v, want %s", id, r, err, want)
			}
		}
		if err := e.markState(1, 2, 3, 4); err != nil {
			t.Fatal(err)
		}
	})
}

// TestAFailingMarkFailsTheTransaction: the mark is one of the transaction's
// writes. A mark the mailbox refuses fails the batch as a whole; run one per
// transaction, the message it belongs to records the failure and holds the
// head, with neither its status nor its mark changed.
func TestAFailingMarkFailsTheTransaction(t *testing.T) {
	e := newStoreEnv(t, "postgres", storetest.NewPostgres(t, store.WithMigrate(mailbox.Schema())))
	ctx := context.Background()
	e.exec(`CREATE FUNCTION inboxmark_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.CMINMSGS_ID = 2 THEN RAISE EXCEPTION 'mark refused'; END IF;
	RETURN NEW;
END$$`)
	e.exec("CREATE TRIGGER inboxmark_refuse BEFORE UPDATE ON TBL FOR EACH ROW EXECUTE FUNCTION inboxmark_refuse()")
	e.put(1, 2, 3)
	clk := clock.NewFake(t0)
	proc := &orderProc{}
	e.runEngine(proc, e.poller(clk), clk, e.table, inbox.WithGroupSize(3))
	testkit.Eventually(t, "the failure of message 2", patience, func() bool {
		r, err := inbox.Get(ctx, e.db, "sis", 2)
		return err == nil && r.Status == inbox.Failed
	})
	r, err := inbox.Get(ctx, e.db, "sis", 2)
	if err != nil || r.ErrorClass != inbox.Infra || !strings.Contains(r.Reason, "mark refused") {
		t.Fatalf("message 2: %+v %v", r, err)
	}
	if err := e.markState(1, 2, 3); err != nil {
		t.Fatal(err)
	}
	if m := e.marks(); m[1].status != "DONE" || m[2].status != "" || m[3].status != "" {
		t.Fatalf("marks %+v", m)
	}
	if r, err := inbox.Get(ctx, e.db, "sis", 3); err != nil || r.Status != inbox.Pending {
		t.Fatalf("message 3: %+v %v", r, err)
	}
}
