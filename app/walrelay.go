package app

import (
	"context"
	"fmt"

	"github.com/msgx/msgx/outbox"
)

// buildWALRelay sets the store's transactions to the outbox's WAL mode and
// builds the WAL relay (outbox.mode wal). The slot is made here, before any
// stream or pipeline can commit an event: the stream decodes only what is
// committed after the slot exists.
func (a *App) buildWALRelay(ctx context.Context, opts []outbox.Option) error {
	if a.cfg.Outbox.Slot != "" {
		opts = append(opts, outbox.WALSlot(a.cfg.Outbox.Slot))
	}
	w, err := outbox.NewWALRelay(a.db, a.cfg.Store.DSN, opts...)
	if err != nil {
		return err
	}
	if err := w.Prepare(ctx); err != nil {
		w.Close()
		return fmt.Errorf("outbox wal mode: %w (docs/outbox.md, \"The WAL mode\": wal_level=logical and the REPLICATION attribute)", err)
	}
	if err := outbox.SetMode(a.db, outbox.ModeWAL); err != nil {
		w.Close()
		return err
	}
	a.wal, a.relay = w, w.Table()
	return nil
}
