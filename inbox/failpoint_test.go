package inbox_test

import (
	"testing"

	"github.com/msgx/msgx/failpoint"
	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// TestFailpointWindows: each inbox failpoint is reached where its name says.
// Mid-batch, another connection still sees the batch unprocessed (nothing
// committed); after the commit, it sees the batch finished and not yet
// backfilled. The kill is replaced by the check, so the pump goes on.
func TestFailpointWindows(t *testing.T) {
	f := newFixture(t, storetest.NewPostgres(t, store.WithMigrate(inbox.Schema(), outbox.Schema())))
	for _, c := range []struct {
		point string
		want  inbox.Status
	}{{failpoint.InboxMidBatch, inbox.Pending}, {failpoint.InboxAfterCommit, inbox.Succeeded}} {
		stream := "s-" + c.point
		bf := &fakeBackfiller{}
		reached := 0
		fp, err := failpoint.Parse(c.point+"=1", failpoint.WithKill(func() {
			reached++
			for id := int64(1); id <= 4; id++ {
				r := f.row(stream, id) // another connection of the pool
				if r.Status != c.want || r.BackfilledAt != nil {
					t.Errorf("%s: row %d is %s (backfilled %v), want %s, not backfilled", c.point, id, r.Status, r.BackfilledAt != nil, c.want)
				}
			}
			if n := bf.callCount(); n != 0 {
				t.Errorf("%s: %d backfill calls before the point", c.point, n)
			}
		}))
		if err != nil {
			t.Fatal(err)
		}
		eng := f.engine(stream, f.proc, inbox.WithGroupSize(4), inbox.WithBackfill(bf), inbox.WithFailpoints(fp))
		f.lead(eng)
		f.enqueue(stream, map[int64]string{1: "a;K", 2: "b;K", 3: "c;K", 4: "d;K"})
		f.step(eng)
		if reached != 1 {
			t.Fatalf("%s reached %d times in one batch, want once", c.point, reached)
		}
		for id := int64(1); id <= 4; id++ {
			if r := f.row(stream, id); r.Status != inbox.Succeeded {
				t.Errorf("%s: row %d ended %s", c.point, id, r.Status)
			}
		}
	}
}
