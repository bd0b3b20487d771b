package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
)

// Migration is one versioned schema change of a line.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Line is the schema of one package (the outbox, the inbox, a pipeline...):
// its own sequence of migrations, versioned from 1 independently of every
// other line, as River keeps its migration lines. The package that owns the
// tables owns the line (its SQL files embedded next to its code); the store
// only applies lines. A database holds the lines of what it is used for.
type Line struct {
	// Name identifies the line in msgx_migrations ("outbox", "inbox"...).
	Name string
	// Migrations returns the line's migrations for a dialect, in any order
	// (an empty list: the line has no tables on that dialect).
	Migrations func(Dialect) ([]Migration, error)
	// Requires lists the lines whose tables this line's tables or its
	// package's statements use: Migrate applies them first.
	Requires []Line
	// Legacy maps the versions of the single sequence that msgx used before
	// lines (table msgx_schema_migrations) to this line's versions: a
	// database migrated that way adopts the line without running its DDL
	// again.
	Legacy map[int]int
}

// ReadMigrations reads the files dir/NNNN_name.sql of fsys (an embedded
// directory of migrations; a missing directory yields none). Each file is
// passed through render, when not nil, once as it is read (for names filled
// in at load, such as a table prefix).
func ReadMigrations(fsys fs.FS, dir string, render func(string) string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		if isNotExist(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("store: read migrations %s: %w", dir, err)
	}
	var out []Migration
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".sql") {
			continue
		}
		num, rest, ok := strings.Cut(strings.TrimSuffix(name, ".sql"), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("store: migration file %q is not NNNN_name.sql", name)
		}
		body, err := fs.ReadFile(fsys, path.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("store: read migration %s: %w", name, err)
		}
		sql := string(body)
		if render != nil {
			sql = render(sql)
		}
		out = append(out, Migration{Version: v, Name: rest, SQL: sql})
	}
	return out, nil
}

func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }

// migrationLockKey is the advisory lock that serialises migrating processes.
const migrationLockKey = 0x6d736778 // "msgx"

// legacyTable is where msgx recorded its single migration sequence before
// lines. It is read, never written or dropped: a binary of that time started
// on the database again still finds its migrations applied.
const legacyTable = "msgx_schema_migrations"

// Migrate applies the pending migrations of lines (and of the lines they
// require, first) in one transaction. It is safe to run twice and from
// several processes at once: on PostgreSQL an advisory lock serialises them,
// on SQLite the write lock does. A line that a database migrated before
// lines already holds (see Line.Legacy) is recorded as applied without
// running its DDL.
func (db *DB) Migrate(ctx context.Context, lines ...Line) error {
	order, err := resolveLines(lines)
	if err != nil {
		return err
	}
	plans := make([][]Migration, len(order))
	for i, l := range order {
		if plans[i], err = lineMigrations(l, db.dialect); err != nil {
			return err
		}
	}
	return db.InTx(ctx, func(ctx context.Context, tx Tx) error {
		if db.dialect == Postgres {
			if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", migrationLockKey); err != nil {
				return fmt.Errorf("store: migration lock: %w", err)
			}
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS msgx_migrations (
			line TEXT NOT NULL, version INTEGER NOT NULL, name TEXT NOT NULL, applied_at TEXT NOT NULL,
			PRIMARY KEY (line, version))`); err != nil {
			return fmt.Errorf("store: migrations table: %w", err)
		}
		applied, err := appliedVersions(ctx, tx)
		if err != nil {
			return err
		}
		legacy, err := legacyVersions(ctx, tx)
		if err != nil {
			return err
		}
		for i, l := range order {
			if err := db.migrateLine(ctx, tx, l, plans[i], applied[l.Name], legacy); err != nil {
				return err
			}
		}
		return nil
	})
}

// migrateLine adopts l from the legacy sequence when the database has no
// record of l yet, then applies what is still pending.
func (db *DB) migrateLine(ctx context.Context, tx Tx, l Line, ms []Migration, done map[int]bool, legacy map[int]bool) error {
	if len(done) == 0 && len(legacy) > 0 {
		done = map[int]bool{}
		for _, m := range ms {
			if !legacyApplied(l.Legacy, m.Version, legacy) {
				continue
			}
			if err := recordMigration(ctx, tx, l.Name, m); err != nil {
				return err
			}
			done[m.Version] = true
			db.log.Info("migration adopted", "dialect", db.dialect, "line", l.Name, "version", m.Version, "name", m.Name)
		}
	}
	for _, m := range ms {
		if done[m.Version] {
			continue
		}
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return fmt.Errorf("store: migration %s %04d_%s: %w", l.Name, m.Version, m.Name, err)
		}
		if err := recordMigration(ctx, tx, l.Name, m); err != nil {
			return err
		}
		db.log.Info("migration applied", "dialect", db.dialect, "line", l.Name, "version", m.Version, "name", m.Name)
	}
	return nil
}

// legacyApplied reports whether the legacy sequence applied version v of a
// line whose legacy map is m.
func legacyApplied(m map[int]int, v int, legacy map[int]bool) bool {
	for old, nv := range m {
		if nv == v && legacy[old] {
			return true
		}
	}
	return false
}

func recordMigration(ctx context.Context, tx Tx, line string, m Migration) error {
	ins := "INSERT INTO msgx_migrations (line, version, name, applied_at) VALUES ($1, $2, $3, CAST(CURRENT_TIMESTAMP AS TEXT))"
	if tx.Dialect() == SQLite {
		ins = "INSERT INTO msgx_migrations (line, version, name, applied_at) VALUES (?1, ?2, ?3, CURRENT_TIMESTAMP)"
	}
	if _, err := tx.Exec(ctx, ins, line, m.Version, m.Name); err != nil {
		return fmt.Errorf("store: record migration %s %d: %w", line, m.Version, err)
	}
	return nil
}

// appliedVersions reads msgx_migrations: the applied versions by line.
func appliedVersions(ctx context.Context, q Querier) (map[string]map[int]bool, error) {
	rows, err := q.Query(ctx, "SELECT line, version FROM msgx_migrations")
	if err != nil {
		return nil, fmt.Errorf("store: read applied migrations: %w", err)
	}
	defer rows.Close()
	out := map[string]map[int]bool{}
	for rows.Next() {
		var (
			line string
			v    int
		)
		if err := rows.Scan(&line, &v); err != nil {
			return nil, fmt.Errorf("store: read applied migrations: %w", err)
		}
		if out[line] == nil {
			out[line] = map[int]bool{}
		}
		out[line][v] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: read applied migrations: %w", err)
	}
	return out, nil
}

// legacyVersions reads the versions of the legacy sequence (none when the
// database never had it).
func legacyVersions(ctx context.Context, q Querier) (map[int]bool, error) {
	if ok, err := tableExists(ctx, q, legacyTable); err != nil || !ok {
		return nil, err
	}
	rows, err := q.Query(ctx, "SELECT version FROM "+legacyTable)
	if err != nil {
		return nil, fmt.Errorf("store: read %s: %w", legacyTable, err)
	}
	defer rows.Close()
	out := map[int]bool{}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, fmt.Errorf("store: read %s: %w", legacyTable, err)
		}
		out[v] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: read %s: %w", legacyTable, err)
	}
	return out, nil
}

// lineMigrations returns l's migrations for d in version order.
func lineMigrations(l Line, d Dialect) ([]Migration, error) {
	if l.Migrations == nil {
		return nil, nil
	}
	ms, err := l.Migrations(d)
	if err != nil {
		return nil, fmt.Errorf("store: line %s: %w", l.Name, err)
	}
	ms = slices.Clone(ms)
	slices.SortFunc(ms, func(a, b Migration) int { return a.Version - b.Version })
	for i := 1; i < len(ms); i++ {
		if ms[i].Version == ms[i-1].Version {
			return nil, fmt.Errorf("store: line %s has two migrations with version %d", l.Name, ms[i].Version)
		}
	}
	return ms, nil
}

// resolveLines orders lines so that every line comes after the lines it
// requires, each once (by name).
func resolveLines(lines []Line) ([]Line, error) {
	var (
		out   []Line
		state = map[string]int{} // 1: being visited, 2: done
		visit func(l Line, from string) error
	)
	visit = func(l Line, from string) error {
		if l.Name == "" {
			return fmt.Errorf("store: a migration line required by %q has no name", from)
		}
		switch state[l.Name] {
		case 1:
			return fmt.Errorf("store: migration lines %q and %q require each other", from, l.Name)
		case 2:
			return nil
		}
		state[l.Name] = 1
		for _, r := range l.Requires {
			if err := visit(r, l.Name); err != nil {
				return err
			}
		}
		state[l.Name] = 2
		out = append(out, l)
		return nil
	}
	for _, l := range lines {
		if err := visit(l, ""); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Versions returns the newest applied version of each line the database
// holds (an empty map when none).
func (db *DB) Versions(ctx context.Context) (map[string]int, error) {
	out := map[string]int{}
	if ok, err := tableExists(ctx, db, "msgx_migrations"); err != nil || !ok {
		return out, err
	}
	rows, err := db.Query(ctx, "SELECT line, MAX(version) FROM msgx_migrations GROUP BY line")
	if err != nil {
		return nil, fmt.Errorf("store: schema versions: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			line string
			v    int
		)
		if err := rows.Scan(&line, &v); err != nil {
			return nil, fmt.Errorf("store: schema versions: %w", err)
		}
		out[line] = v
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: schema versions: %w", err)
	}
	return out, nil
}

// tableExists reports whether the table name is visible (on PostgreSQL: in
// the search path).
func tableExists(ctx context.Context, q Querier, name string) (bool, error) {
	query := "SELECT COUNT(*) FROM pg_catalog.pg_class WHERE oid = to_regclass($1)"
	if q.Dialect() == SQLite {
		query = "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?1"
	}
	var n int
	if err := q.QueryRow(ctx, query, name).Scan(&n); err != nil {
		return false, fmt.Errorf("store: look for table %s: %w", name, err)
	}
	return n > 0, nil
}

// DirMigrations returns a Line.Migrations that reads dir/<dialect> of fsys
// (see ReadMigrations): the usual layout of a package's embedded
// migrations, one directory per dialect.
func DirMigrations(fsys fs.FS, dir string) func(Dialect) ([]Migration, error) {
	return func(d Dialect) ([]Migration, error) {
		return ReadMigrations(fsys, path.Join(dir, string(d)), nil)
	}
}
