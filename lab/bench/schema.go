package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultDSN is the local PostgreSQL server the database workloads use
// unless told otherwise.
const DefaultDSN = "postgres://root@127.0.0.1:5432/test?sslmode=disable"

// Schema is a fresh PostgreSQL schema a benchmark works in, and the DSN
// whose sessions use it.
type Schema struct {
	Name string
	// DSN is the server's DSN with search_path set to the schema.
	DSN  string
	base string
}

// NewSchema creates a uniquely named schema (prefix_<random>) on the server
// of dsn.
func NewSchema(ctx context.Context, dsn, prefix string) (*Schema, error) {
	var b [5]byte
	_, _ = rand.Read(b[:])
	name := prefix + "_" + hex.EncodeToString(b[:])
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", Redact(dsn), err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
		return nil, fmt.Errorf("create schema: %w", err)
	}
	return &Schema{Name: name, DSN: WithParam(dsn, "search_path", name), base: dsn}, nil
}

// Drop removes the schema and everything in it.
func (s *Schema) Drop() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.base)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{s.Name}.Sanitize()+" CASCADE")
	return err
}

// WithParam sets a query parameter of a DSN (pgx passes unknown ones to the
// server as session settings, e.g. application_name, synchronous_commit).
func WithParam(dsn, key, value string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn
	}
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String()
}

// Redact hides a DSN's password.
func Redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.User == nil {
		return dsn
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxx")
	}
	return u.String()
}
