// Package sistest holds test helpers of the SIS pipeline for other
// packages' tests: the bundled traffic processed into a store.
package sistest

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/pipeline/sis"
	"github.com/msgx/msgx/pipeline/sis/traffic"
	"github.com/msgx/msgx/store"
)

// ProcessTraffic runs the SIS processor on the bundled traffic in the
// order of traffic.Ordered (the schedule first, the FDEL last), stream
// "sis", message i+1 at start+i seconds, one transaction per message as the
// inbox engine runs it (the message in a savepoint). A message the
// processor refuses is left as the engine would leave it: nothing written.
func ProcessTraffic(t testing.TB, db *store.DB, start time.Time) {
	t.Helper()
	p, err := sis.NewProcessor(sis.Config{}, sis.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := traffic.Ordered(1000)
	if err != nil {
		t.Fatal(err)
	}
	for i, payload := range msgs {
		d, err := p.Decode(payload)
		if err != nil {
			continue // refused before processing: the engine marks it DEAD
		}
		msg := &inbox.Message{Stream: "sis", ID: int64(i + 1), Payload: payload, Attempt: 1, Identity: d.Identity,
			Kind: d.Kind, Decoded: d.Value, Now: start.Add(time.Duration(i) * time.Second)}
		err = db.InTx(context.Background(), func(ctx context.Context, tx store.Tx) error {
			return tx.Savepoint(ctx, func(ctx context.Context) error {
				_, err := p.Process(ctx, tx, msg, d.Value)
				return err
			})
		})
		if err != nil && inbox.ClassOf(err) == inbox.Infra {
			t.Fatalf("message %d: %v", i+1, err)
		}
	}
}
