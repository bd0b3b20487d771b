package store

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
)

//go:embed migrations
var migrationFS embed.FS

// Migration is one versioned schema change.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Migrations lists the embedded migrations of a dialect in version order.
func Migrations(d Dialect) ([]Migration, error) {
	dir := path.Join("migrations", string(d))
	entries, err := fs.ReadDir(migrationFS, dir)
	if err != nil {
		return nil, fmt.Errorf("store: read migrations: %w", err)
	}
	var out []Migration
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".sql") {
			continue
		}
		num, rest, ok := strings.Cut(strings.TrimSuffix(name, ".sql"), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("store: migration file %q is not NNNN_name.sql", name)
		}
		body, err := fs.ReadFile(migrationFS, path.Join(dir, name))
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: v, Name: rest, SQL: string(body)})
	}
	slices.SortFunc(out, func(a, b Migration) int { return a.Version - b.Version })
	for i := 1; i < len(out); i++ {
		if out[i].Version == out[i-1].Version {
			return nil, fmt.Errorf("store: two migrations with version %d", out[i].Version)
		}
	}
	return out, nil
}

// migrationLockKey is the advisory lock that serialises migrating processes.
const migrationLockKey = 0x6d736778 // "msgx"

// Migrate applies the pending embedded migrations in one transaction. It is
// safe to run twice and from several processes at once: on PostgreSQL an
// advisory lock serialises them, on SQLite the write lock does.
func (db *DB) Migrate(ctx context.Context) error {
	ms, err := Migrations(db.dialect)
	if err != nil {
		return err
	}
	return db.InTx(ctx, func(ctx context.Context, tx Tx) error {
		if db.dialect == Postgres {
			if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", migrationLockKey); err != nil {
				return fmt.Errorf("store: migration lock: %w", err)
			}
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS msgx_schema_migrations (
			version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)`); err != nil {
			return fmt.Errorf("store: migrations table: %w", err)
		}
		applied := map[int]bool{}
		rows, err := tx.Query(ctx, "SELECT version FROM msgx_schema_migrations")
		if err != nil {
			return fmt.Errorf("store: read applied migrations: %w", err)
		}
		for rows.Next() {
			var v int
			if err := rows.Scan(&v); err != nil {
				rows.Close()
				return err
			}
			applied[v] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, m := range ms {
			if applied[m.Version] {
				continue
			}
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return fmt.Errorf("store: migration %04d_%s: %w", m.Version, m.Name, err)
			}
			ins := "INSERT INTO msgx_schema_migrations (version, name, applied_at) VALUES ($1, $2, CAST(CURRENT_TIMESTAMP AS TEXT))"
			if db.dialect == SQLite {
				ins = "INSERT INTO msgx_schema_migrations (version, name, applied_at) VALUES (?1, ?2, CURRENT_TIMESTAMP)"
			}
			if _, err := tx.Exec(ctx, ins, m.Version, m.Name); err != nil {
				return fmt.Errorf("store: record migration %d: %w", m.Version, err)
			}
			db.log.Info("migration applied", "dialect", db.dialect, "version", m.Version, "name", m.Name)
		}
		return nil
	})
}

// Version returns the newest applied migration version (0 when none).
func (db *DB) Version(ctx context.Context) (int, error) {
	var v *int
	err := db.QueryRow(ctx, "SELECT MAX(version) FROM msgx_schema_migrations").Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("store: schema version: %w", err)
	}
	if v == nil {
		return 0, nil
	}
	return *v, nil
}
