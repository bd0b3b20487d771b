package outbox_test

import (
	"testing"

	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/failpoint"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// TestFailpointAfterConfirm: outbox-after-confirm is reached once per
// confirmed send, when the broker holds the events and their rows are still
// PENDING. The kill is replaced by the check, so the relay goes on.
func TestFailpointAfterConfirm(t *testing.T) {
	db := storetest.NewPostgres(t, store.WithMigrate(outbox.Schema()))
	s := &sink{}
	reached := 0
	fp, err := failpoint.Parse("outbox-after-confirm=1", failpoint.WithKill(func() {
		reached++
		if n := s.count(); n != 3 {
			t.Errorf("the broker holds %d events at the point, want the send's 3", n)
		}
		if n := countStatus(t, db, outbox.StatusPending); n != 3 {
			t.Errorf("%d events PENDING at the point, want 3 (not yet marked sent)", n)
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	r := newRelay(t, db, clock.NewFake(t0), outbox.Target("u", s, outbox.Unordered), outbox.WithFailpoints(fp))
	enqueue(t, db, t0, ev("u", "A", 1), ev("u", "B", 1), ev("u", "C", 1))
	flush(t, r)
	if reached != 1 {
		t.Fatalf("the point was reached %d times, want once", reached)
	}
	if n := countStatus(t, db, outbox.StatusSent); n != 3 {
		t.Fatalf("%d events SENT after the relay went on, want 3", n)
	}
}
