package inbox_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

func TestGroupCommitProcessesInOrderInOneTransaction(t *testing.T) {
	storetest.Each(t, []store.Line{inbox.Schema(), outbox.Schema()}, func(t *testing.T, db *store.DB) {
		var commits []inbox.Committed
		f := newFixture(t, db, inbox.WithGroupSize(10), inbox.WithOnCommit(func(c inbox.Committed) { commits = append(commits, c) }))
		f.lead(f.eng)
		msgs := map[int64]string{}
		for id := int64(1); id <= 12; id++ {
			msgs[id] = "id" + string(rune('a'+id)) + ";FLOP/ETA"
		}
		f.enqueue(f.stream, msgs)
		f.drain(f.eng)
		if len(commits) != 2 || len(commits[0].IDs) != 10 || len(commits[1].IDs) != 2 {
			t.Fatalf("commits = %+v, want 10 then 2 messages", commits)
		}
		want := []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
		if got := f.proc.ran(); !slices.Equal(got, want) {
			t.Fatalf("processed %v, want %v", got, want)
		}
		if got := f.events(); !slices.Equal(got, evs(f.stream, want...)) {
			t.Fatalf("events %v", got)
		}
		r := f.row(f.stream, 3)
		if r.Status != inbox.Succeeded || r.Attempts != 1 || r.Identity != "idd" || r.Kind != "FLOP/ETA" ||
			r.FinishedAt == nil || !r.FinishedAt.Equal(t0) || r.ProcessingStartedAt == nil || r.BackfillNextAt != nil {
			t.Fatalf("row 3 = %+v", r)
		}
		if n := f.count("SELECT COUNT(*) FROM msgx_inbox_identity WHERE stream = $1", f.stream); n != 12 {
			t.Fatalf("%d identities bound, want 12", n)
		}
		// Enqueueing a known transport id again is a no-op.
		n, err := f.eng.Enqueue(context.Background(), inbox.Incoming{ID: 3, Payload: []byte("other;X")})
		if err != nil || n != 0 {
			t.Fatalf("re-enqueue = %d, %v", n, err)
		}
	})
}

func TestHeadFailureBlocksWithBackoffThenGoesDead(t *testing.T) {
	storetest.Each(t, []store.Line{inbox.Schema(), outbox.Schema()}, func(t *testing.T, db *store.DB) {
		f := newFixture(t, db)
		f.lead(f.eng)
		f.proc.set(1, "fail:INFRA")
		f.enqueue(f.stream, map[int64]string{1: "a;K", 2: "b;K", 3: "c;K"})
		wantDelays := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second}
		for attempt, d := range wantDelays {
			progress, _ := f.step(f.eng)
			if !progress {
				t.Fatalf("attempt %d: no progress", attempt+1)
			}
			r := f.row(f.stream, 1)
			if r.Status != inbox.Failed || r.ErrorClass != inbox.Infra || r.Attempts != attempt+1 ||
				r.NextAttemptAt == nil || !r.NextAttemptAt.Equal(f.clk.Now().Add(d)) || !r.ProcessingStartedAt.Equal(t0) {
				t.Fatalf("after attempt %d: %+v (want next in %s)", attempt+1, r, d)
			}
			// The stream is blocked: later messages wait behind the head.
			f.wantStatus(map[int64]inbox.Status{2: inbox.Pending, 3: inbox.Pending})
			if attempt == len(wantDelays)-1 {
				break
			}
			// Before its time the head only makes the pump wait.
			f.clk.Advance(d - time.Millisecond)
			progress, wake := f.step(f.eng)
			if progress || !wake.Equal(*r.NextAttemptAt) {
				t.Fatalf("before retry time: progress=%v wake=%v, want wait until %v", progress, wake, r.NextAttemptAt)
			}
			f.clk.Advance(time.Millisecond)
		}
		// Attempts used up: DEAD(EXHAUSTED) without waiting, then the stream moves on.
		if progress, _ := f.step(f.eng); !progress {
			t.Fatal("exhausted head was not settled")
		}
		r := f.row(f.stream, 1)
		if r.Status != inbox.Dead || r.ErrorClass != inbox.Exhausted || !strings.Contains(r.Reason, "INFRA") {
			t.Fatalf("head = %+v, want DEAD(EXHAUSTED)", r)
		}
		f.drain(f.eng)
		f.wantStatus(map[int64]inbox.Status{2: inbox.Succeeded, 3: inbox.Succeeded})
		if got := f.bizIDs(f.stream); !slices.Equal(got, []int64{2, 3}) {
			t.Fatalf("business rows %v: the failed attempts must leave nothing", got)
		}
		if n := f.count("SELECT COUNT(*) FROM msgx_inbox_error WHERE stream = $1 AND msg_id = 1", f.stream); n != 6 {
			t.Fatalf("%d error records, want 5 failures + EXHAUSTED", n)
		}
	})
}

func TestHeadDeadlineEndsRetries(t *testing.T) {
	storetest.Each(t, []store.Line{inbox.Schema(), outbox.Schema()}, func(t *testing.T, db *store.DB) {
		f := newFixture(t, db, inbox.WithMaxAttempts(100), inbox.WithHeadDeadline(5*time.Second))
		f.lead(f.eng)
		f.proc.set(1, "fail:INFRA")
		f.enqueue(f.stream, map[int64]string{1: "a;K", 2: "b;K"})
		f.step(f.eng)              // t0: attempt 1, retry at +1s
		f.clk.Advance(time.Second) // attempt 2, retry at +2s (t0+3s)
		f.step(f.eng)
		f.clk.Advance(2 * time.Second) // attempt 3, retry at +4s (t0+7s) — past the deadline
		f.step(f.eng)
		_, wake := f.step(f.eng)
		if !wake.Equal(t0.Add(5 * time.Second)) {
			t.Fatalf("wake at %v, want the head deadline %v", wake, t0.Add(5*time.Second))
		}
		f.clk.Set(t0.Add(5 * time.Second))
		f.step(f.eng)
		r := f.row(f.stream, 1)
		if r.Status != inbox.Dead || r.ErrorClass != inbox.Exhausted || r.Attempts != 3 || !strings.Contains(r.Reason, "head") {
			t.Fatalf("head = %+v, want DEAD(EXHAUSTED) by deadline", r)
		}
		f.drain(f.eng)
		f.wantStatus(map[int64]inbox.Status{2: inbox.Succeeded})
	})
}

func TestFailureClasses(t *testing.T) {
	storetest.Each(t, []store.Line{inbox.Schema(), outbox.Schema()}, func(t *testing.T, db *store.DB) {
		f := newFixture(t, db, inbox.WithGroupSize(1))
		f.lead(f.eng)
		f.proc.set(4, "fail:PROTOCOL")
		f.proc.set(5, "fail:UNSUPPORTED")
		f.proc.set(6, "plain", "ok")
		f.proc.set(7, "panic", "ok")
		f.proc.set(8, "badstatus", "ok")
		f.proc.set(9, "skip")
		f.enqueue(f.stream, map[int64]string{
			1: "", 2: "garbage", 3: "codec", 4: "d;K", 5: "e;K", 6: "f;K", 7: "g;K", 8: "h;K", 9: "i;K", 10: "decodepanic",
		})
		type want struct {
			status inbox.Status
			class  inbox.Class
			reason string
		}
		expect := func(id int64, w want) {
			t.Helper()
			r := f.row(f.stream, id)
			if r.Status != w.status || r.ErrorClass != w.class || !strings.Contains(r.Reason, w.reason) {
				t.Fatalf("message %d = %s/%s %q, want %s/%s containing %q", id, r.Status, r.ErrorClass, r.Reason, w.status, w.class, w.reason)
			}
		}
		f.step(f.eng)
		expect(1, want{inbox.Dead, inbox.Malformed, "empty payload"})
		f.step(f.eng)
		expect(2, want{inbox.Dead, inbox.Malformed, "not a message"})
		f.step(f.eng)
		expect(3, want{inbox.Failed, inbox.CodecError, "codec"}) // retried: a codec fix may read it
		// Let the codec error exhaust: five attempts.
		for range 5 {
			f.clk.Advance(time.Minute)
			f.step(f.eng)
		}
		expect(3, want{inbox.Dead, inbox.Exhausted, "CODEC_ERROR"})
		f.step(f.eng)
		expect(4, want{inbox.Dead, inbox.Protocol, "scripted"})
		f.step(f.eng)
		// DEAD at once: no retry makes a processor appear, and the head
		// moves on without waiting (replayable once supported).
		expect(5, want{inbox.Dead, inbox.Unsupported, "scripted"})
		f.step(f.eng)
		expect(6, want{inbox.Failed, inbox.Infra, "unclassified"})
		f.clk.Advance(time.Second)
		f.step(f.eng)
		f.step(f.eng)
		expect(7, want{inbox.Failed, inbox.Infra, "panic: processor bug"})
		f.clk.Advance(time.Second)
		f.step(f.eng)
		f.step(f.eng)
		expect(8, want{inbox.Failed, inbox.Infra, "status"})
		f.clk.Advance(time.Second)
		f.drain(f.eng)
		expect(9, want{inbox.Skipped, "", "ignored"})
		expect(10, want{inbox.Failed, inbox.CodecError, "decoder panic"})
		// Business writes of failed attempts were rolled back; of the SKIPPED one kept.
		if got := f.bizIDs(f.stream); !slices.Equal(got, []int64{6, 7, 8, 9}) {
			t.Fatalf("business rows %v", got)
		}
	})
}

func TestFailingMessageRollsBackAloneAndEndsTheBatch(t *testing.T) {
	storetest.Each(t, []store.Line{inbox.Schema(), outbox.Schema()}, func(t *testing.T, db *store.DB) {
		var commits []inbox.Committed
		f := newFixture(t, db, inbox.WithGroupSize(10), inbox.WithOnCommit(func(c inbox.Committed) { commits = append(commits, c) }))
		f.lead(f.eng)
		f.proc.set(3, "fail:INFRA", "ok")
		f.enqueue(f.stream, map[int64]string{1: "a;K", 2: "b;K", 3: "c;K", 4: "d;K", 5: "e;K"})
		f.step(f.eng)
		if len(commits) != 1 || !slices.Equal(commits[0].IDs, []int64{1, 2}) || commits[0].Failed != 3 {
			t.Fatalf("commit = %+v, want 1,2 done and 3 failed in one transaction", commits)
		}
		f.wantStatus(map[int64]inbox.Status{1: inbox.Succeeded, 2: inbox.Succeeded, 3: inbox.Failed, 4: inbox.Pending, 5: inbox.Pending})
		if got := f.bizIDs(f.stream); !slices.Equal(got, []int64{1, 2}) {
			t.Fatalf("business rows %v: 3's savepoint must have rolled back only its own writes", got)
		}
		if got := f.events(); !slices.Equal(got, evs(f.stream, 1, 2)) {
			t.Fatalf("events %v", got)
		}
		f.clk.Advance(time.Second)
		f.drain(f.eng)
		if got := f.events(); !slices.Equal(got, evs(f.stream, 1, 2, 3, 4, 5)) {
			t.Fatalf("events %v, want strict order", got)
		}
	})
}

// TestFailingHeldBackWriteIsTheMessagesOwnFailure: group commit holds the
// processor's ExecBatch writes back and sends them with the batch's
// statuses; when one fails, no other message pays for it: the batch is run
// again one message per transaction, and the failing message is recorded
// alone, exactly as without the pipeline.
func TestFailingHeldBackWriteIsTheMessagesOwnFailure(t *testing.T) {
	storetest.Each(t, []store.Line{inbox.Schema(), outbox.Schema()}, func(t *testing.T, db *store.DB) {
		f := newFixture(t, db, inbox.WithGroupSize(10))
		f.lead(f.eng)
		for id := int64(1); id <= 5; id++ {
			f.proc.set(id, "okbatch")
		}
		f.proc.set(3, "batchdup", "okbatch")
		f.enqueue(f.stream, map[int64]string{1: "a;K", 2: "b;K", 3: "c;K", 4: "d;K", 5: "e;K"})
		for i := 0; i < 10 && f.status(3) == inbox.Pending; i++ {
			f.step(f.eng)
		}
		f.wantStatus(map[int64]inbox.Status{1: inbox.Succeeded, 2: inbox.Succeeded, 3: inbox.Failed, 4: inbox.Pending, 5: inbox.Pending})
		want := []int64{1, 2, 3} // SQLite sends every write at once
		if db.Dialect() == store.Postgres {
			// The failure showed when message 4's first statement sent the
			// held-back writes; then the group's messages ran one per
			// transaction up to the failing one.
			want = []int64{1, 2, 3, 4, 1, 2, 3}
		}
		if got := f.proc.ran(); !slices.Equal(got, want) {
			t.Fatalf("processor ran %v, want %v", got, want)
		}
		if r := f.row(f.stream, 3); r.ErrorClass != inbox.Infra || r.Attempts != 1 || !strings.Contains(r.Reason, "duplicate") && !strings.Contains(r.Reason, "UNIQUE") {
			t.Fatalf("row 3: %+v", r)
		}
		if r := f.row(f.stream, 1); r.Attempts != 1 {
			t.Fatalf("row 1 attempts = %d: the lost group transaction must not count", r.Attempts)
		}
		if got := f.bizIDs(f.stream); !slices.Equal(got, []int64{1, 2}) {
			t.Fatalf("business rows %v", got)
		}
		f.clk.Advance(time.Second)
		f.drain(f.eng)
		f.wantStatus(map[int64]inbox.Status{3: inbox.Succeeded, 4: inbox.Succeeded, 5: inbox.Succeeded})
		if got := f.events(); !slices.Equal(got, evs(f.stream, 1, 2, 3, 4, 5)) {
			t.Fatalf("events %v, want one per message in order", got)
		}
		if n := f.count("SELECT COUNT(*) FROM parent"); n != 5 {
			t.Fatalf("%d parent rows, want one per message", n)
		}
	})
}

func TestSameIdentityIsProcessedOnce(t *testing.T) {
	storetest.Each(t, []store.Line{inbox.Schema(), outbox.Schema()}, func(t *testing.T, db *store.DB) {
		f := newFixture(t, db, inbox.WithGroupSize(10))
		f.lead(f.eng)
		// 1 and 3 share an identity inside one batch; 5 repeats it in a later batch.
		f.enqueue(f.stream, map[int64]string{1: "X;K", 2: "Y;K", 3: "X;K"})
		f.drain(f.eng)
		f.enqueue(f.stream, map[int64]string{5: "X;K", 6: "Y;K", 7: "Z;K"})
		f.drain(f.eng)
		f.wantStatus(map[int64]inbox.Status{1: inbox.Succeeded, 2: inbox.Succeeded, 3: inbox.Skipped, 5: inbox.Skipped, 6: inbox.Skipped, 7: inbox.Succeeded})
		for id, owner := range map[int64]string{3: "duplicate-of:1", 5: "duplicate-of:1", 6: "duplicate-of:2"} {
			if r := f.row(f.stream, id); r.Reason != owner || r.Identity == "" {
				t.Fatalf("message %d reason %q identity %q, want %s", id, r.Reason, r.Identity, owner)
			}
		}
		if got := f.bizIDs(f.stream); !slices.Equal(got, []int64{1, 2, 7}) {
			t.Fatalf("business rows %v, want one per identity", got)
		}
	})
}

func TestRetryIsNotItsOwnDuplicate(t *testing.T) {
	storetest.Each(t, []store.Line{inbox.Schema(), outbox.Schema()}, func(t *testing.T, db *store.DB) {
		f := newFixture(t, db)
		f.lead(f.eng)
		f.proc.set(1, "fail:INFRA", "fail:INFRA", "ok")
		f.proc.set(3, "fail:PROTOCOL")
		f.enqueue(f.stream, map[int64]string{1: "X;K", 2: "X;K", 3: "Q;K", 4: "Q;K"})
		f.step(f.eng)
		if r := f.row(f.stream, 1); r.Status != inbox.Failed || r.Identity != "X" {
			t.Fatalf("after a failed attempt: %+v, want FAILED with identity bound", r)
		}
		if n := f.count("SELECT COUNT(*) FROM msgx_inbox_identity WHERE stream = $1 AND identity = 'X' AND msg_id = 1", f.stream); n != 1 {
			t.Fatal("a failed first attempt must bind the identity")
		}
		for range 2 {
			f.clk.Advance(time.Minute)
			f.step(f.eng)
		}
		f.drain(f.eng)
		// 1 succeeded on its third attempt (not a duplicate of itself); 2 is.
		// 3 went DEAD holding its identity, so 4 is a duplicate of a dead message.
		f.wantStatus(map[int64]inbox.Status{1: inbox.Succeeded, 2: inbox.Skipped, 3: inbox.Dead, 4: inbox.Skipped})
		if r := f.row(f.stream, 1); r.Attempts != 3 {
			t.Fatalf("attempts = %d, want 3", r.Attempts)
		}
		if r := f.row(f.stream, 4); r.Reason != "duplicate-of:3" {
			t.Fatalf("4: %q", r.Reason)
		}
	})
}

func TestArchivedMessagesStillDeduplicate(t *testing.T) {
	storetest.Each(t, []store.Line{inbox.Schema(), outbox.Schema()}, func(t *testing.T, db *store.DB) {
		bf := &fakeBackfiller{}
		f := newFixture(t, db, inbox.WithBackfill(bf), inbox.WithArchive(24*time.Hour, time.Hour, 2))
		f.lead(f.eng)
		f.enqueue(f.stream, map[int64]string{1: "X;K", 2: "Y;K", 3: "Z;K"})
		f.drain(f.eng)
		ctx := context.Background()
		// Not yet old enough, and not archived while the backfill is pending.
		f.clk.Advance(25 * time.Hour)
		if more, err := f.eng.Archive(ctx); err != nil || more {
			t.Fatalf("archive = %v, %v", more, err)
		}
		if n := f.count("SELECT COUNT(*) FROM msgx_inbox_hst"); n != 0 {
			t.Fatalf("%d archived before their backfill", n)
		}
		if _, err := f.eng.SweepBackfill(ctx); err != nil {
			t.Fatal(err)
		}
		more, err := f.eng.Archive(ctx)
		if err != nil || !more {
			t.Fatalf("archive = %v, %v; want a full batch", more, err)
		}
		if more, err = f.eng.Archive(ctx); err != nil || more {
			t.Fatalf("archive = %v, %v", more, err)
		}
		if n := f.count("SELECT COUNT(*) FROM msgx_inbox_hst WHERE stream = $1", f.stream); n != 3 {
			t.Fatalf("%d archived, want 3", n)
		}
		if _, err := inbox.Get(ctx, db, f.stream, 1); !errors.Is(err, inbox.ErrNotFound) {
			t.Fatalf("archived message still in the inbox: %v", err)
		}
		// The same transport id is not enqueued again; the same identity under
		// a new id is a duplicate of the archived message.
		n, err := f.eng.Enqueue(ctx, inbox.Incoming{ID: 1, Payload: []byte("X;K")}, inbox.Incoming{ID: 9, Payload: []byte("X;K")})
		if err != nil || n != 1 {
			t.Fatalf("enqueue = %d, %v; want only id 9", n, err)
		}
		f.drain(f.eng)
		if r := f.row(f.stream, 9); r.Status != inbox.Skipped || r.Reason != "duplicate-of:1" {
			t.Fatalf("9 = %+v", r)
		}
	})
}

func TestCommitFailureLeavesNothingBehind(t *testing.T) {
	storetest.Each(t, []store.Line{inbox.Schema(), outbox.Schema()}, func(t *testing.T, db *store.DB) {
		bf := &fakeBackfiller{}
		f := newFixture(t, db, inbox.WithGroupSize(10), inbox.WithBackfill(bf))
		f.lead(f.eng)
		f.proc.set(2, "commitfail", "ok")
		f.enqueue(f.stream, map[int64]string{1: "a;K", 2: "b;K", 3: "c;K"})
		// The group's commit fails: its writes, events, statuses and backfill
		// intents are all gone.
		if progress, _ := f.step(f.eng); !progress {
			t.Fatal("no progress")
		}
		f.wantStatus(map[int64]inbox.Status{1: inbox.Pending, 2: inbox.Pending, 3: inbox.Pending})
		if len(f.bizIDs(f.stream)) != 0 || len(f.events()) != 0 {
			t.Fatal("a failed commit left business rows or events")
		}
		if r := f.row(f.stream, 1); r.Attempts != 0 || r.BackfillNextAt != nil || r.ProcessingStartedAt != nil {
			t.Fatalf("row 1 after the failed commit: %+v", r)
		}
		// The messages are retried one per transaction: 1 commits, 2 fails
		// alone and is recorded as an INFRA failure of its own.
		f.step(f.eng)
		f.step(f.eng)
		f.wantStatus(map[int64]inbox.Status{1: inbox.Succeeded, 2: inbox.Failed, 3: inbox.Pending})
		if r := f.row(f.stream, 2); r.ErrorClass != inbox.Infra || r.Attempts != 1 || !strings.Contains(r.Reason, "transaction failed") {
			t.Fatalf("row 2: %+v", r)
		}
		f.clk.Advance(time.Second)
		f.drain(f.eng)
		f.wantStatus(map[int64]inbox.Status{2: inbox.Succeeded, 3: inbox.Succeeded})
		if got := f.events(); !slices.Equal(got, evs(f.stream, 1, 2, 3)) {
			t.Fatalf("events %v: one per message, in order", got)
		}
		if n := f.count("SELECT COUNT(*) FROM child"); n != 0 {
			t.Fatal("the failing write survived")
		}
	})
}

func TestInterruptRecordsNothing(t *testing.T) {
	storetest.Each(t, []store.Line{inbox.Schema(), outbox.Schema()}, func(t *testing.T, db *store.DB) {
		f := newFixture(t, db, inbox.WithGroupSize(10))
		f.lead(f.eng)
		f.proc.set(2, "block")
		f.enqueue(f.stream, map[int64]string{1: "a;K", 2: "b;K", 3: "c;K"})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, _, err := f.eng.Step(ctx)
			done <- err
		}()
		<-f.proc.blocked
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("step = %v, want the cancellation", err)
		}
		for id := int64(1); id <= 3; id++ {
			if r := f.row(f.stream, id); r.Status != inbox.Pending || r.Attempts != 0 {
				t.Fatalf("message %d after interrupt: %+v", id, r)
			}
		}
		if len(f.bizIDs(f.stream)) != 0 || f.count("SELECT COUNT(*) FROM msgx_inbox_error") != 0 {
			t.Fatal("an interrupted batch left writes or an error record")
		}
		f.proc.set(2, "ok")
		f.drain(f.eng)
		f.wantStatus(map[int64]inbox.Status{1: inbox.Succeeded, 2: inbox.Succeeded, 3: inbox.Succeeded})
	})
}

func TestStreamsAreIndependent(t *testing.T) {
	storetest.Each(t, []store.Line{inbox.Schema(), outbox.Schema()}, func(t *testing.T, db *store.DB) {
		f := newFixture(t, db)
		other := f.engine("s2", newProc())
		f.lead(f.eng)
		f.lead(other)
		f.proc.set(1, "fail:INFRA")
		f.enqueue(f.stream, map[int64]string{1: "X;K", 2: "Y;K"})
		f.enqueue("s2", map[int64]string{1: "X;K", 2: "Y;K"})
		f.step(f.eng)
		f.drain(other)
		if r, _ := inbox.Get(context.Background(), db, "s2", 2); r.Status != inbox.Succeeded {
			t.Fatalf("s2 blocked by s1's head: %+v", r)
		}
		// Identities are per stream: s2's X is no duplicate of s1's.
		if r, _ := inbox.Get(context.Background(), db, "s2", 1); r.Status != inbox.Succeeded {
			t.Fatalf("s2/1 = %+v", r)
		}
		f.wantStatus(map[int64]inbox.Status{1: inbox.Failed, 2: inbox.Pending})
	})
}

func TestPumpStaysBehindTheSourceWatermark(t *testing.T) {
	storetest.Each(t, []store.Line{inbox.Schema(), outbox.Schema()}, func(t *testing.T, db *store.DB) {
		f := newFixture(t, db)
		f.lead(f.eng)
		ctx := context.Background()
		if err := inbox.InitCursor(ctx, db, f.stream, 2, t0); err != nil {
			t.Fatal(err)
		}
		// 5 arrived by another path (HTTP) while 3 and 4 are not enqueued yet.
		f.enqueue(f.stream, map[int64]string{1: "a;K", 2: "b;K", 5: "e;K"})
		f.drain(f.eng)
		f.wantStatus(map[int64]inbox.Status{1: inbox.Succeeded, 2: inbox.Succeeded, 5: inbox.Pending})
		f.enqueue(f.stream, map[int64]string{3: "c;K", 4: "d;K"})
		err := db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
			return inbox.SetCursor(ctx, tx, f.stream, inbox.Cursor{Watermark: 2}, inbox.Cursor{Watermark: 5}, t0)
		})
		if err != nil {
			t.Fatal(err)
		}
		f.drain(f.eng)
		if got := f.proc.ran(); !slices.Equal(got, []int64{1, 2, 3, 4, 5}) {
			t.Fatalf("processed %v", got)
		}
	})
}

func TestMetrics(t *testing.T) {
	db := storetest.NewSQLite(t, store.WithMigrate(inbox.Schema(), outbox.Schema()))
	reg := prometheus.NewRegistry()
	f := newFixture(t, db, inbox.WithRegisterer(reg))
	f.lead(f.eng)
	f.proc.set(3, "fail:INFRA")
	f.enqueue(f.stream, map[int64]string{1: "a;K", 2: "garbage", 3: "c;K"})
	f.drain(f.eng)
	f.clk.Advance(10 * time.Second)
	f.step(f.eng) // retry, fails again
	f.step(f.eng) // waits
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				if l.GetName() != "stream" {
					key += "/" + l.GetValue()
				}
			}
			switch {
			case m.GetCounter() != nil:
				got[key] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				got[key] = m.GetGauge().GetValue()
			}
		}
	}
	for key, want := range map[string]float64{
		"msgx_inbox_failures_total/INFRA":     2,
		"msgx_inbox_failures_total/MALFORMED": 1,
		"msgx_inbox_settled_total/SUCCEEDED":  1,
		"msgx_inbox_settled_total/DEAD":       1,
		"msgx_inbox_settled_total/FAILED":     2,
		"msgx_inbox_head_blocked_seconds":     10,
	} {
		if got[key] != want {
			t.Errorf("%s = %v, want %v", key, got[key], want)
		}
	}
	if _, err := inbox.New(db, f.stream, f.proc, inbox.WithRegisterer(reg)); err == nil {
		t.Fatal("registering the same stream's metrics twice succeeded")
	}
}

func TestIdentitiesOfUnreachedMessagesAreReleased(t *testing.T) {
	storetest.Each(t, []store.Line{inbox.Schema(), outbox.Schema()}, func(t *testing.T, db *store.DB) {
		f := newFixture(t, db, inbox.WithGroupSize(10))
		f.lead(f.eng)
		// 1 cannot be decoded yet; 3 carries the identity 1 will decode to.
		f.enqueue(f.stream, map[int64]string{1: "codec:x;K", 2: "y;K", 3: "x;K"})
		f.step(f.eng)
		f.wantStatus(map[int64]inbox.Status{1: inbox.Failed, 2: inbox.Pending, 3: inbox.Pending})
		if n := f.count("SELECT COUNT(*) FROM msgx_inbox_identity WHERE stream = $1", f.stream); n != 0 {
			t.Fatalf("%d identities stay bound for messages the batch never reached", n)
		}
		// The codec is fixed: 1 owns its identity, and 3 is its duplicate.
		f.proc.mu.Lock()
		f.proc.codecFixed = true
		f.proc.mu.Unlock()
		f.clk.Advance(time.Minute)
		f.drain(f.eng)
		f.wantStatus(map[int64]inbox.Status{1: inbox.Succeeded, 2: inbox.Succeeded, 3: inbox.Skipped})
		if r := f.row(f.stream, 3); r.Reason != "duplicate-of:1" {
			t.Fatalf("3 = %+v, want a duplicate of 1", r)
		}
	})
}
