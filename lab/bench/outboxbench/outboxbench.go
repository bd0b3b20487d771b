// Package outboxbench measures the outbox: the relay burning down (or keeping
// up with) a backlog into an in-memory sink, the cost of the outbox insert in
// a business transaction, and the pgbench insert ceiling of the database.
// Every run works in a fresh PostgreSQL schema that it creates and drops.
package outboxbench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
)

func openDSN(ctx context.Context, dsn string, conns int32) (*store.DB, error) {
	return store.Open(ctx, dsn, store.WithMigrate(outbox.Schema()), store.WithMaxConns(conns),
		store.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
}

func payload(n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte('a' + i%26)
	}
	return p
}

// progress prints a line now and then while long work runs.
type progress struct {
	w    io.Writer
	last time.Time
}

func (p *progress) say(format string, args ...any) {
	if p.w == nil || time.Since(p.last) < 2*time.Second {
		return
	}
	p.last = time.Now()
	fmt.Fprintf(p.w, format+"\n", args...)
}
