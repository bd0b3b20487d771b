package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/msgx/msgx/app/config"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
)

// checkWAL is serve --check's part for outbox.mode wal: it connects to the
// store and says what the server or the role lacks.
func checkWAL(ctx context.Context, w io.Writer, cfg *config.Config) error {
	db, err := store.Open(ctx, cfg.Store.DSN)
	if err != nil {
		return fmt.Errorf("outbox.mode wal: the store cannot be reached to check its prerequisites: %w", err)
	}
	defer db.Close()
	problems := outbox.CheckWAL(ctx, db, cfg.Store.DSN, cfg.Outbox.Slot)
	if len(problems) == 0 {
		fmt.Fprintln(w, "outbox.mode wal: the server and the role have what the wal mode needs")
		return nil
	}
	fmt.Fprintf(w, "outbox.mode wal: the server or the role lacks what the wal mode needs:\n  %s\n", strings.Join(problems, "\n  "))
	return errors.New("outbox.mode wal: prerequisites missing (see above)")
}
