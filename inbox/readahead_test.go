package inbox_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// While a batch commits, the pump reads, decodes and binds the next one;
// here that batch's commit waits (a deferred foreign key on a parent another
// transaction is deleting) and then fails. The batch read ahead must not be
// processed before the failure is known, and must leave nothing behind: not
// even the identity it bound while the failing batch still held it.
func TestReadAheadWaitsForTheCommitBeforeIt(t *testing.T) {
	db := storetest.NewPostgres(t, store.WithMigrate(inbox.Schema(), outbox.Schema()))
	f := newFixture(t, db, inbox.WithGroupSize(3), inbox.WithLease(30*time.Second))
	ctx := context.Background()
	if _, err := db.Exec(ctx, "INSERT INTO parent (id) VALUES (424243)"); err != nil {
		t.Fatal(err)
	}
	// The parent is being deleted: a commit checking it waits for this
	// transaction.
	blocker, err := db.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = blocker.Rollback(ctx) }()
	if _, err := blocker.Exec(ctx, "DELETE FROM parent WHERE id = 424243"); err != nil {
		t.Fatal(err)
	}
	f.proc.set(3, "commitwait", "ok")
	// 4 has 1's identity: its binding waits for the first batch's commit.
	f.enqueue(f.stream, map[int64]string{1: "x;K", 2: "b;K", 3: "c;K", 4: "x;K", 5: "e;K", 6: "f;K"})
	start(t, f.eng)

	testkit.Eventually(t, "the next batch read ahead", patience, func() bool {
		d := f.proc.decodedPayloads()
		return len(d) >= 6 && slices.Equal(d[3:6], []string{"x;K", "e;K", "f;K"})
	})
	// A bounded quiet period: the batch read ahead is not processed while
	// the commit before it is undecided.
	time.Sleep(300 * time.Millisecond)
	if got := f.proc.ran(); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Fatalf("processor ran %v while the first batch was committing, want [1 2 3]", got)
	}
	if err := blocker.Commit(ctx); err != nil { // the parent is gone: the commit fails
		t.Fatal(err)
	}
	testkit.Eventually(t, "message 3 failing alone", patience, func() bool { return f.status(3) == inbox.Failed })
	f.advanceUntil("every message", 100*time.Millisecond, f.allSettled(f.stream, 1, 2, 3, 4, 5, 6))

	f.wantStatus(map[int64]inbox.Status{1: inbox.Succeeded, 2: inbox.Succeeded, 3: inbox.Succeeded, 4: inbox.Skipped, 5: inbox.Succeeded, 6: inbox.Succeeded})
	if r := f.row(f.stream, 4); r.Reason != "duplicate-of:1" {
		t.Fatalf("message 4: %+v, want a duplicate of 1", r)
	}
	if r := f.row(f.stream, 3); r.Attempts != 2 || !strings.Contains(f.errorReasons(3), "transaction failed") {
		t.Fatalf("message 3: %+v, errors %q", r, f.errorReasons(3))
	}
	// The group, then its messages one per transaction up to the failing
	// one, then the retry and the rest.
	if got, want := f.proc.ran(), []int64{1, 2, 3, 1, 2, 3, 3, 5, 6}; !slices.Equal(got, want) {
		t.Fatalf("processor ran %v, want %v", got, want)
	}
	if got := f.events(); !slices.Equal(got, evs(f.stream, 1, 2, 3, 5, 6)) {
		t.Fatalf("events %v, want one per processed message in order", got)
	}
}

// With nothing failing, the batches read ahead go through in order, and
// every message of a batch that repeats the identities of the batch before
// it (which is committing while it is read) finds them taken.
func TestReadAheadKeepsOrderAndIdentities(t *testing.T) {
	db := storetest.NewPostgres(t, store.WithMigrate(inbox.Schema(), outbox.Schema()))
	f := newFixture(t, db, inbox.WithGroupSize(4), inbox.WithLease(30*time.Second))
	msgs := map[int64]string{}
	var ids, fresh []int64
	for id := int64(1); id <= 40; id++ {
		ident := id
		if (id-1)/4%2 == 1 { // batches 2, 4, ...: the batch before's identities
			ident = id - 4
		} else {
			fresh = append(fresh, id)
		}
		msgs[id] = "i" + strconv.FormatInt(ident, 10) + ";K"
		ids = append(ids, id)
	}
	f.enqueue(f.stream, msgs)
	start(t, f.eng)
	testkit.Eventually(t, "every message", patience, f.allSettled(f.stream, ids...))
	for _, id := range ids {
		r := f.row(f.stream, id)
		if slices.Contains(fresh, id) {
			if r.Status != inbox.Succeeded {
				t.Fatalf("message %d: %+v, want SUCCEEDED", id, r)
			}
		} else if r.Status != inbox.Skipped || r.Reason != "duplicate-of:"+strconv.FormatInt(id-4, 10) {
			t.Fatalf("message %d: %+v, want a duplicate of %d", id, r, id-4)
		}
	}
	if got := f.events(); !slices.Equal(got, evs(f.stream, fresh...)) {
		t.Fatalf("events %v, want %v", got, evs(f.stream, fresh...))
	}
}

// errorReasons is the recorded failures of a message, joined.
func (f *fixture) errorReasons(id int64) string {
	f.t.Helper()
	var s string
	if err := f.db.QueryRow(context.Background(),
		"SELECT COALESCE(string_agg(reason, ' | ' ORDER BY attempt), '') FROM msgx_inbox_error WHERE stream = $1 AND msg_id = $2",
		f.stream, id).Scan(&s); err != nil {
		f.t.Fatal(err)
	}
	return s
}
