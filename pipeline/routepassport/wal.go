package routepassport

import (
	"context"
	"fmt"

	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
)

// WithWALRelay runs the pipeline's own relay in the outbox's WAL mode: Run
// makes the replication slot, sets db's transactions to the WAL mode
// (outbox.SetMode) before it takes the first record, and streams the events
// with an outbox.WALRelay over replicationDSN (a role with REPLICATION).
// Without its own relay (WithRelay(false)) the service's relay and mode
// apply instead.
func WithWALRelay(replicationDSN string) Option { return func(c *config) { c.walDSN = replicationDSN } }

// buildRelay builds the pipeline's relay, in the WAL mode with WithWALRelay.
func (p *Pipeline) buildRelay(db *store.DB, opts []outbox.Option) error {
	if p.cfg.walDSN == "" {
		r, err := outbox.NewRelay(db, opts...)
		p.relay = r
		return err
	}
	w, err := outbox.NewWALRelay(db, p.cfg.walDSN, opts...)
	if err != nil {
		return err
	}
	p.wal, p.relay = w, w.Table()
	return nil
}

// prepareWAL makes the slot and only then turns the WAL mode on, so that no
// event is committed before the slot can stream it.
func (p *Pipeline) prepareWAL(ctx context.Context) error {
	if p.wal == nil {
		return nil
	}
	if err := p.wal.Prepare(ctx); err != nil {
		return fmt.Errorf("routepassport: wal relay: %w", err)
	}
	return outbox.SetMode(p.db, outbox.ModeWAL)
}
