package store_test

import (
	"context"
	"maps"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// fsLine is a line of the given migrations, the same for both dialects
// except where a file is named per dialect (postgres/..., sqlite/...).
func fsLine(name string, files map[string]string, legacy map[int]int, requires ...store.Line) store.Line {
	fsys := fstest.MapFS{}
	for f, sql := range files {
		if strings.Contains(f, "/") {
			fsys["m/"+f] = &fstest.MapFile{Data: []byte(sql)}
			continue
		}
		for _, d := range []string{"postgres", "sqlite"} {
			fsys["m/"+d+"/"+f] = &fstest.MapFile{Data: []byte(sql)}
		}
	}
	return store.Line{Name: name, Migrations: store.DirMigrations(fsys, "m"), Requires: requires, Legacy: legacy}
}

// leaseLine makes a table of the shape of the inbox's stream leases, which
// the transaction tests write.
func leaseLine() store.Line {
	return fsLine("lease", map[string]string{
		"postgres/0001_lease.sql": "CREATE TABLE msgx_lease (name TEXT PRIMARY KEY, owner TEXT NOT NULL, expires_at TIMESTAMPTZ NOT NULL)",
		"sqlite/0001_lease.sql":   "CREATE TABLE msgx_lease (name TEXT PRIMARY KEY, owner TEXT NOT NULL, expires_at INTEGER NOT NULL)",
	}, nil)
}

// Two lines, the second referencing the first's table: migrating the
// second applies the first before it.
func twoLines() (parent, child store.Line) {
	parent = fsLine("parent", map[string]string{
		"0001_parent.sql": "CREATE TABLE parent (id BIGINT PRIMARY KEY)",
		"0002_name.sql":   "ALTER TABLE parent ADD COLUMN name TEXT",
	}, nil)
	child = fsLine("child", map[string]string{
		"0001_child.sql": "CREATE TABLE child (id BIGINT PRIMARY KEY, parent_id BIGINT NOT NULL REFERENCES parent (id))",
	}, nil, parent)
	return parent, child
}

func versions(t *testing.T, db *store.DB) map[string]int {
	t.Helper()
	vs, err := db.Versions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return vs
}

func TestMigrateTwiceAndConcurrently(t *testing.T) {
	_, dsn := storetest.NewSchema(t)
	ctx := context.Background()
	_, child := twoLines()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			db, err := store.Open(ctx, dsn, store.WithMigrate(child))
			if err != nil {
				errs <- err
				return
			}
			defer db.Close()
			errs <- db.Migrate(ctx, child) // a second run is a no-op
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent migrate: %v", err)
		}
	}
	db, err := store.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if vs, want := versions(t, db), map[string]int{"parent": 2, "child": 1}; !maps.Equal(vs, want) {
		t.Fatalf("versions = %v, want %v", vs, want)
	}
}

// A line is applied after the lines it requires, each line once however
// many lines require it, and only the lines asked for (and what they
// require) are applied.
func TestMigrateAppliesRequiredLinesFirst(t *testing.T) {
	storetest.Each(t, nil, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		parent, child := twoLines()
		other := fsLine("other", map[string]string{"0001_other.sql": "CREATE TABLE other (id BIGINT)"}, nil)
		if err := db.Migrate(ctx, child, parent, child); err != nil {
			t.Fatal(err)
		}
		if vs, want := versions(t, db), map[string]int{"parent": 2, "child": 1}; !maps.Equal(vs, want) {
			t.Fatalf("versions = %v, want %v", vs, want)
		}
		if _, err := db.Exec(ctx, "SELECT id FROM other"); err == nil {
			t.Fatal("a line not asked for was applied")
		}
		// A new migration of a line is applied on the next run, alone.
		parent2 := fsLine("parent", map[string]string{
			"0001_parent.sql": "CREATE TABLE parent (id BIGINT PRIMARY KEY)",
			"0002_name.sql":   "ALTER TABLE parent ADD COLUMN name TEXT",
			"0003_note.sql":   "ALTER TABLE parent ADD COLUMN note TEXT",
		}, nil)
		if err := db.Migrate(ctx, parent2, other); err != nil {
			t.Fatal(err)
		}
		if vs, want := versions(t, db), map[string]int{"parent": 3, "child": 1, "other": 1}; !maps.Equal(vs, want) {
			t.Fatalf("versions = %v, want %v", vs, want)
		}
	})
}

// A failing migration leaves nothing behind: the lines are applied in one
// transaction.
func TestMigrateIsAllOrNothing(t *testing.T) {
	storetest.Each(t, nil, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		parent, _ := twoLines()
		bad := fsLine("bad", map[string]string{"0001_bad.sql": "CREATE TABLE nonsense ("}, nil)
		if err := db.Migrate(ctx, parent, bad); err == nil || !strings.Contains(err.Error(), "bad 0001_bad") {
			t.Fatalf("migrate = %v, want the failing migration named", err)
		}
		if vs := versions(t, db); len(vs) != 0 {
			t.Fatalf("versions after a failed migration = %v, want none", vs)
		}
	})
}

func TestMigrateRefusesRequirementCycle(t *testing.T) {
	db := storetest.NewSQLite(t)
	a := fsLine("a", nil, nil)
	b := fsLine("b", nil, nil, a)
	a.Requires = []store.Line{b}
	if err := db.Migrate(context.Background(), a); err == nil || !strings.Contains(err.Error(), "require each other") {
		t.Fatalf("migrate = %v, want a cycle error", err)
	}
}

func TestMigrateRefusesBadFileName(t *testing.T) {
	db := storetest.NewSQLite(t)
	l := fsLine("a", map[string]string{"first.sql": "SELECT 1"}, nil)
	if err := db.Migrate(context.Background(), l); err == nil || !strings.Contains(err.Error(), "NNNN_name.sql") {
		t.Fatalf("migrate = %v, want a file name error", err)
	}
}

// A database migrated by the single legacy sequence (msgx_schema_migrations)
// adopts a line without running its DDL again (a CREATE TABLE without IF NOT
// EXISTS would fail), keeps its rows, applies what the legacy sequence did
// not have, and leaves the legacy record as it was.
func TestMigrateAdoptsLegacySequence(t *testing.T) {
	storetest.Each(t, nil, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		for _, s := range []string{
			"CREATE TABLE msgx_schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)",
			"INSERT INTO msgx_schema_migrations VALUES (7, 'thing', 'then'), (9, 'thing_name', 'then'), (12, 'unrelated', 'then')",
			"CREATE TABLE thing (id BIGINT PRIMARY KEY)",
			"ALTER TABLE thing ADD COLUMN name TEXT",
			"INSERT INTO thing (id, name) VALUES (1, 'kept')",
		} {
			if _, err := db.Exec(ctx, s); err != nil {
				t.Fatal(err)
			}
		}
		l := fsLine("thing", map[string]string{
			"0001_thing.sql": "CREATE TABLE thing (id BIGINT PRIMARY KEY)",
			"0002_name.sql":  "ALTER TABLE thing ADD COLUMN name TEXT",
			"0003_note.sql":  "ALTER TABLE thing ADD COLUMN note TEXT",
		}, map[int]int{7: 1, 9: 2})
		for range 2 {
			if err := db.Migrate(ctx, l); err != nil {
				t.Fatal(err)
			}
			if vs, want := versions(t, db), map[string]int{"thing": 3}; !maps.Equal(vs, want) {
				t.Fatalf("versions = %v, want %v", vs, want)
			}
		}
		var name string
		if err := db.QueryRow(ctx, "SELECT name FROM thing WHERE id = 1 AND note IS NULL").Scan(&name); err != nil || name != "kept" {
			t.Fatalf("row after adoption: %q, %v", name, err)
		}
		var n int
		if err := db.QueryRow(ctx, "SELECT COUNT(*) FROM msgx_schema_migrations").Scan(&n); err != nil || n != 3 {
			t.Fatalf("legacy rows = %d, %v; want 3", n, err)
		}
		// A line the database never had is applied in full even then.
		fresh := fsLine("fresh", map[string]string{"0001_fresh.sql": "CREATE TABLE fresh (id BIGINT)"}, map[int]int{50: 1})
		if err := db.Migrate(ctx, fresh); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(ctx, "INSERT INTO fresh (id) VALUES (1)"); err != nil {
			t.Fatal(err)
		}
	})
}
