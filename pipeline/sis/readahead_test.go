package sis_test

import (
	"context"
	"testing"
	"time"

	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/pipeline/sis"
	"github.com/msgx/msgx/pipeline/sis/sisxml"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// signalling is the SIS processor, telling when its Prepare returned.
type signalling struct {
	*sis.Processor
	prepared chan struct{}
}

func (s signalling) Prepare(ctx context.Context, tx store.Tx, batch []*sisxml.Message) error {
	err := s.Processor.Prepare(ctx, tx, batch)
	s.prepared <- struct{}{}
	return err
}

// TestReadAheadFindsTheFlightTheBatchBeforeCreates: a batch creates flight
// 9100, and its commit is held up (another session holds the lock its
// event's insert takes). The next batch, read ahead meanwhile, changes that
// flight: its read ahead cannot see the flight yet, and the change must
// still find it once the batch before has committed, not be skipped as a
// FLOP on an unknown flight.
func TestReadAheadFindsTheFlightTheBatchBeforeCreates(t *testing.T) {
	ctx := context.Background()
	db := storetest.NewPostgres(t, store.WithMigrate(sis.Schema()))
	proc, err := sis.NewProcessor(sis.Config{}, sis.WithLogger(testkit.Quiet()))
	if err != nil {
		t.Fatal(err)
	}
	p := signalling{Processor: proc, prepared: make(chan struct{}, 16)}
	holder, err := db.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release()
	lock := outbox.KeyLock(sis.TargetMsg, "9100")
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_lock($1)", lock); err != nil {
		t.Fatal(err)
	}
	unlocked := false
	defer func() {
		if !unlocked {
			_, _ = holder.Exec(ctx, "SELECT pg_advisory_unlock($1)", lock)
		}
	}()
	flop := func(name, flid string, seq int64) []byte {
		return withSeq(flidOf.ReplaceAll(fixture(t, "FLOP_"+name+"_1.xml"), []byte("<FLID>"+flid+"</FLID>")), seq)
	}
	// The first batch: both flights created, then one changed (from what
	// the batch holds: no read sends its held-back writes before the end).
	// The second: changes of the flight whose event waits for the lock.
	msgs := []inbox.Incoming{{ID: 1, Payload: adft(82000, "9100", "9101")}, {ID: 2, Payload: flop("STND", "9101", 82001)},
		{ID: 3, Payload: flop("CNCL", "9100", 82002)}, {ID: 4, Payload: flop("REMC", "9100", 82003)}}
	if err := db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		_, err := inbox.Enqueue(ctx, tx, stream, time.Now(), msgs...)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	eng, err := inbox.New(db, stream, inbox.Typed(p), inbox.WithGroupSize(2), inbox.WithLogger(testkit.Quiet()))
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- eng.Run(rctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil && rctx.Err() == nil {
			t.Errorf("engine: %v", err)
		}
	}()

	// The first batch's Prepare, then the second's, read ahead while the
	// first waits for the lock.
	for i := range 2 {
		select {
		case <-p.prepared:
		case <-time.After(10 * time.Second):
			t.Fatalf("batch %d was not prepared", i+1)
		}
	}
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_unlock($1)", lock); err != nil {
		t.Fatal(err)
	}
	unlocked = true

	for i, r := range waitTerminal(t, db, 10*time.Second, false, 1, 2, 3, 4) {
		if r.Status != inbox.Succeeded {
			t.Fatalf("message %d: %+v", i+1, r)
		}
	}
	f := (&harness{t: t, db: db}).flight("9100")
	if f.Version != 3 || f.Fields["CNCL"] != "15DEC031722" || f.Fields["REMC"] != "Bag loading Delay" {
		t.Fatalf("flight 9100: %+v", f)
	}
}
