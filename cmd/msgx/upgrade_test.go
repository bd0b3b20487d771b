package main

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// legacyMigrate migrates db as msgx did before migration lines: the one
// sequence of testdata/legacy/DIALECT (a frozen copy of those files),
// recorded in msgx_schema_migrations.
func legacyMigrate(t *testing.T, db *store.DB) {
	t.Helper()
	ctx := context.Background()
	dir := filepath.Join("testdata", "legacy", string(db.Dialect()))
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	ins := "INSERT INTO msgx_schema_migrations (version, name, applied_at) VALUES ($1, $2, CAST(CURRENT_TIMESTAMP AS TEXT))"
	if db.Dialect() == store.SQLite {
		ins = "INSERT INTO msgx_schema_migrations (version, name, applied_at) VALUES (?1, ?2, CURRENT_TIMESTAMP)"
	}
	err = db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		if _, err := tx.Exec(ctx, `CREATE TABLE msgx_schema_migrations (
			version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)`); err != nil {
			return err
		}
		for _, n := range names {
			num, rest, _ := strings.Cut(strings.TrimSuffix(n, ".sql"), "_")
			v, err := strconv.Atoi(num)
			if err != nil {
				return err
			}
			body, err := os.ReadFile(filepath.Join(dir, n))
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, string(body)); err != nil {
				t.Fatalf("legacy %s: %v", n, err)
			}
			if _, err := tx.Exec(ctx, ins, v, rest); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// describeSchema lists the tables, columns and indexes of db's schema, in a
// form that compares two schemas (names without the schema's own name).
func describeSchema(t *testing.T, db *store.DB) []string {
	t.Helper()
	q := `SELECT 'column ' || table_name || '.' || column_name || ' ' || data_type || ' ' || is_nullable
	          || ' ' || COALESCE(collation_name, '') || ' ' || COALESCE(column_default, '') || ' ' || is_identity
	      FROM information_schema.columns WHERE table_schema = current_schema()
	      UNION ALL
	      SELECT 'index ' || regexp_replace(indexdef, ' ON \S+\.', ' ON ') FROM pg_indexes WHERE schemaname = current_schema()
	      UNION ALL
	      SELECT 'options ' || relname || ' ' || COALESCE(array_to_string(reloptions, ','), '')
	      FROM pg_class WHERE relnamespace = current_schema()::regnamespace AND relkind = 'r'
	      UNION ALL
	      SELECT 'constraint ' || conname || ' ' || pg_get_constraintdef(oid)
	      FROM pg_constraint WHERE connamespace = current_schema()::regnamespace`
	if db.Dialect() == store.SQLite {
		q = "SELECT type || ' ' || name || ' ' || COALESCE(sql, '') FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"
	}
	rows, err := db.Query(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(s, "msgx_migrations") || strings.Contains(s, "msgx_schema_migrations") {
			continue // the records of what was applied differ by design
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// A database migrated by the single sequence that msgx kept before
// migration lines (the 43 files, frozen in testdata/legacy) upgrades in
// place with msgx migrate: every line is taken over without its DDL running
// again, the rows are kept, the schema is the one a fresh database gets, and
// a second run changes nothing.
func TestMigrateUpgradesLegacyDatabase(t *testing.T) {
	for _, dialect := range []store.Dialect{store.Postgres, store.SQLite} {
		t.Run(string(dialect), func(t *testing.T) {
			ctx := context.Background()
			var dsn, freshDSN string
			if dialect == store.Postgres {
				_, dsn = storetest.NewSchema(t)
				_, freshDSN = storetest.NewSchema(t)
			} else {
				dsn = "sqlite:" + filepath.Join(t.TempDir(), "old.db")
				freshDSN = "sqlite:" + filepath.Join(t.TempDir(), "fresh.db")
			}
			db, err := store.Open(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(db.Close)
			legacyMigrate(t, db)
			p := func(i int) string {
				if dialect == store.SQLite {
					return "?" + strconv.Itoa(i)
				}
				return "$" + strconv.Itoa(i)
			}
			now := time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)
			rows := map[string]string{
				"msgx_lease":       "SELECT owner FROM msgx_lease WHERE name = 'stream-a'",
				"msgx_inbox":       "SELECT stream FROM msgx_inbox WHERE msg_id = 7",
				"msgx_outbox":      "SELECT topic FROM msgx_outbox WHERE event_id = 'ev-1'",
				"cminmsgs":         "SELECT CMINMSGS_CLOB_MSG FROM cminmsgs WHERE CMINMSGS_ID = 1",
				"msgx_admin_audit": "SELECT actor FROM msgx_admin_audit WHERE action = 'replay'",
				"sis_seq":          "SELECT name FROM sis_seq WHERE value = 41",
			}
			inserts := []store.Stmt{
				{SQL: "INSERT INTO msgx_lease (name, owner, expires_at) VALUES ('stream-a', 'owner-a', " + p(1) + ")", Args: []any{now}},
				{SQL: "INSERT INTO msgx_inbox (stream, msg_id, payload, received_at) VALUES ('stream-a', 7, " + p(1) + ", " + p(2) + ")", Args: []any{[]byte("<m/>"), now}},
				{SQL: "INSERT INTO msgx_outbox (event_id, target, topic, payload, created_at, next_attempt_at) VALUES ('ev-1', 't', 'topic-1', " + p(1) + ", " + p(2) + ", " + p(2) + ")", Args: []any{[]byte("{}"), now}},
				{SQL: "INSERT INTO cminmsgs (CMINMSGS_ID, CMINMSGS_CLOB_MSG) VALUES (1, 'mailbox row')"},
				{SQL: "INSERT INTO msgx_admin_audit (at, actor, action, source, scope, selector, dry_run, count, reason, detail) VALUES (" + p(1) + ", 'ops', 'replay', 'inbox', 's', '{}', " + p(2) + ", 1, 'r', '')", Args: []any{now, false}},
				{SQL: "INSERT INTO sis_seq (name, value) VALUES ('RQFD', 41)"},
			}
			if dialect == store.Postgres {
				rows["route_passport_sources"] = "SELECT route_id FROM route_passport_sources WHERE source_id = 's-1'"
				inserts = append(inserts, store.Stmt{SQL: "INSERT INTO route_passport_sources (source_id, route_id, processed_at) VALUES ('s-1', 'r-1', $1)", Args: []any{now}})
			}
			err = db.InTx(ctx, func(ctx context.Context, tx store.Tx) error { return tx.ExecBatch(ctx, inserts...) })
			if err != nil {
				t.Fatal(err)
			}
			before := map[string]string{}
			for table, q := range rows {
				var s string
				if err := db.QueryRow(ctx, q).Scan(&s); err != nil {
					t.Fatalf("%s before: %v", table, err)
				}
				before[table] = s
			}

			// Every line of the build at its newest migration (sis 0008,
			// after the legacy numbers, is PostgreSQL's only).
			want := map[string]int{"admin": 1, "inbox": 8, "mailbox": 1, "outbox": 5, "sis": 7}
			if dialect == store.Postgres {
				want["routepassport"], want["sis"] = 2, 8
			}
			var applied int
			for i := range 2 {
				out := run(t, "migrate", "--dsn", dsn)
				vs, err := db.Versions(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if !maps.Equal(vs, want) {
					t.Fatalf("run %d: versions %v (printed %q), want %v", i+1, vs, out, want)
				}
				var n int
				if err := db.QueryRow(ctx, "SELECT COUNT(*) FROM msgx_migrations").Scan(&n); err != nil {
					t.Fatal(err)
				}
				if i == 1 && n != applied {
					t.Fatalf("the second run recorded %d migrations more", n-applied)
				}
				applied = n
			}
			for table, q := range rows {
				var s string
				if err := db.QueryRow(ctx, q).Scan(&s); err != nil || s != before[table] {
					t.Errorf("%s after the upgrade: %q, %v; want %q", table, s, err, before[table])
				}
			}

			fresh, err := store.Open(ctx, freshDSN, store.WithMigrate(buildLines()...))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(fresh.Close)
			got, wantSchema := describeSchema(t, db), describeSchema(t, fresh)
			if len(wantSchema) < 40 {
				t.Fatalf("the fresh schema lists only %d objects: %q", len(wantSchema), wantSchema)
			}
			if !slices.Equal(got, wantSchema) {
				for _, s := range got {
					if !slices.Contains(wantSchema, s) {
						t.Errorf("upgraded only: %s", s)
					}
				}
				for _, s := range wantSchema {
					if !slices.Contains(got, s) {
						t.Errorf("fresh only: %s", s)
					}
				}
			}
		})
	}
}

// msgx migrate --config applies the lines the configuration uses, in its
// store: a service without the SIS stream gets no SIS table.
func TestMigrateConfigAppliesItsLines(t *testing.T) {
	dir := t.TempDir()
	dsn := "sqlite:" + filepath.Join(dir, "m.db")
	cfg := filepath.Join(dir, "msgx.yaml")
	if err := os.WriteFile(cfg, []byte("store:\n  dsn: "+dsn+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := run(t, "migrate", "--config", cfg)
	if want := "schema at version: admin 1, inbox 8, outbox 5 (sqlite)"; !strings.Contains(out, want) {
		t.Fatalf("migrate printed %q, want %q", out, want)
	}
	db, err := store.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(context.Background(), "SELECT COUNT(*) FROM sqlite_master WHERE name LIKE 'flight%' OR name LIKE 'sis%' OR name = 'cminmsgs'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d SIS or mailbox tables, %v; want none", n, err)
	}
}
