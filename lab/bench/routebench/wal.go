package routebench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/pipeline/routepassport"
)

// walOptions run the pipeline's relay in the outbox's WAL mode (variant
// e2e-wal) on a slot and publication of the run's own; drop removes them
// once the pipeline has stopped.
func walOptions(serverDSN, dsn string) (opts []routepassport.Option, drop func()) {
	var b [5]byte
	_, _ = rand.Read(b[:])
	name := "msgx_routebench_" + hex.EncodeToString(b[:])
	opts = []routepassport.Option{routepassport.WithWALRelay(dsn),
		routepassport.WithRelayOptions(outbox.WALSlot(name), outbox.WALPublication(name))}
	return opts, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, serverDSN)
		if err != nil {
			return
		}
		defer conn.Close(ctx)
		for ctx.Err() == nil {
			if _, err := conn.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", name); err == nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		_, _ = conn.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{name}.Sanitize())
	}
}
