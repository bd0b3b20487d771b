// Package outboxbench measures the outbox: the relay burning down (or keeping
// up with) a backlog into an in-memory sink, the cost of the outbox insert in
// a business transaction, and the pgbench insert ceiling of the database.
// Every run works in a fresh PostgreSQL schema that it creates and drops.
package outboxbench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/msgx/msgx/store"
)

// DefaultDSN is the local PostgreSQL the benchmarks use.
const DefaultDSN = "postgres://root@127.0.0.1:5432/test?sslmode=disable"

// schema is a fresh schema and the DSN whose sessions use it.
type schema struct {
	name, dsn, base string
}

// newSchema creates a uniquely named schema on the server of dsn.
func newSchema(ctx context.Context, dsn, prefix string) (*schema, error) {
	var b [5]byte
	_, _ = rand.Read(b[:])
	name := prefix + "_" + hex.EncodeToString(b[:])
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", redact(dsn), err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
		return nil, fmt.Errorf("create schema: %w", err)
	}
	return &schema{name: name, dsn: withParam(dsn, "search_path", name), base: dsn}, nil
}

// withParam sets a query parameter of a DSN (pgx passes unknown ones to the
// server as session settings).
func withParam(dsn, key, value string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn
	}
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String()
}

// drop removes the schema and everything in it.
func (s *schema) drop() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.base)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{s.name}.Sanitize()+" CASCADE")
	return err
}

// open opens the schema as a migrated store with room for conns connections.
func (s *schema) open(ctx context.Context, conns int32) (*store.DB, error) {
	return openDSN(ctx, s.dsn, conns)
}

func openDSN(ctx context.Context, dsn string, conns int32) (*store.DB, error) {
	return store.Open(ctx, dsn, store.WithMigrate(), store.WithMaxConns(conns),
		store.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
}

func redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.User == nil {
		return dsn
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxx")
	}
	return u.String()
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
