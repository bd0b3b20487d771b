package workload

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Schema is a fresh PostgreSQL schema owned by one run, with a pool whose
// search_path points at it.
type Schema struct {
	Name string
	Pool *pgxpool.Pool
	dsn  string
}

// NewSchema creates a uniquely named schema (prefix_<random>) and a pool of
// size poolSize that resolves unqualified names in it.
func NewSchema(ctx context.Context, dsn, prefix string, poolSize int) (*Schema, error) {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	name := prefix + "_" + hex.EncodeToString(b[:])
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
		return nil, fmt.Errorf("create schema: %w", err)
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(poolSize)
	cfg.ConnConfig.RuntimeParams["search_path"] = name
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &Schema{Name: name, Pool: pool, dsn: dsn}, nil
}

// Drop closes the pool and drops the schema with everything in it.
func (s *Schema) Drop(ctx context.Context) error {
	s.Pool.Close()
	conn, err := pgx.Connect(ctx, s.dsn)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{s.Name}.Sanitize()+" CASCADE"); err != nil {
		return fmt.Errorf("drop schema %s: %w", s.Name, err)
	}
	return nil
}
