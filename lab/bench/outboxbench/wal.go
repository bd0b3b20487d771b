package outboxbench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
)

// The WAL mode's side of the outbox benchmarks: a producer-overhead variant
// whose events go into the WAL, and an outbox-relay run whose relay streams
// them from a slot of its own.

// walSlot is a slot and publication of one run, dropped at its end.
type walSlot struct {
	dsn, slot, pub string
}

func newWALSlot(dsn string) *walSlot {
	var b [5]byte
	_, _ = rand.Read(b[:])
	s := "msgx_bench_" + hex.EncodeToString(b[:])
	return &walSlot{dsn: dsn, slot: s, pub: s}
}

func (w *walSlot) options() []outbox.Option {
	return []outbox.Option{outbox.WALSlot(w.slot), outbox.WALPublication(w.pub)}
}

// drop removes the run's slot (once its relay has stopped) and publication.
func (w *walSlot) drop() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, w.dsn)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	for ctx.Err() == nil {
		if _, err := conn.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", w.slot); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	_, _ = conn.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{w.pub}.Sanitize())
}

// prepareWAL makes db's transactions enqueue into the WAL and creates the
// slot, so that every event committed from now on is streamed.
func prepareWAL(ctx context.Context, db *store.DB, dsn string, w *walSlot) error {
	r, err := outbox.NewWALRelay(db, dsn, append(w.options(), outbox.Target(benchTarget, &relaySink{}, outbox.Unordered))...)
	if err != nil {
		return err
	}
	defer r.Close()
	if err := r.Prepare(ctx); err != nil {
		return fmt.Errorf("wal mode: %w", err)
	}
	return outbox.SetMode(db, outbox.ModeWAL)
}

// lastStatesSent reports whether the sink has the newest event of every key
// the producers wrote: the end of a compacted run in the WAL mode, which
// leaves no row to watch.
func lastStatesSent(s *relaySink, producers []*producer) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, pr := range producers {
		for k, seq := range pr.seq {
			if !s.seen["k"+strconv.Itoa(k)+"."+strconv.Itoa(seq)+"."+pr.run] {
				return false
			}
		}
	}
	return true
}
