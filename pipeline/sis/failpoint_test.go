package sis_test

import (
	"testing"

	"github.com/msgx/msgx/failpoint"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/pipeline/sis"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// TestFailpointMidSnapshot: sis-mid-snapshot is reached once per snapshot
// that changes flights, after they went into the transaction and before it
// commits (another connection does not see them yet); not for a snapshot
// that changes nothing, nor for a FLOP.
func TestFailpointMidSnapshot(t *testing.T) {
	db := storetest.NewPostgres(t, store.WithMigrate(sis.Schema()))
	var h *harness
	reached := 0
	fp, err := failpoint.Parse("sis-mid-snapshot=1", failpoint.WithKill(func() {
		reached++
		if f := h.flight("41"); f != nil {
			t.Errorf("flight 41 visible at the point: the snapshot is committed already")
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	p, err := sis.NewProcessor(sis.Config{}, sis.WithLogger(testkit.Quiet()), sis.WithFailpoints(fp))
	if err != nil {
		t.Fatal(err)
	}
	h = &harness{t: t, db: db, p: p}
	h.ok(adft(1, "41", "42"))
	if reached != 1 || h.flight("41") == nil || h.flight("42") == nil {
		t.Fatalf("after the ADFT: reached %d times, flights %v %v", reached, h.flight("41"), h.flight("42"))
	}
	h.ok(adft(2, "41", "42")) // the same flights again: nothing changes
	if n := fp.Hits(failpoint.SISMidSnapshot); n != 1 {
		t.Fatalf("a snapshot that changed nothing reached the point: %d hits", n)
	}
}
