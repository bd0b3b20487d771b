// Package storetest makes a fresh database per test: a new schema in the local
// PostgreSQL (dropped at cleanup) or a new SQLite file, migrated with the lines
// the test names (store.WithMigrate), and nothing else.
package storetest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // OpenMySQL's driver
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/msgx/msgx/broker/brokertest"
	"github.com/msgx/msgx/store"
)

// PostgresURL is the server the tests use: MSGX_TEST_POSTGRES, or the local
// trust-authenticated server.
func PostgresURL() string {
	if u := os.Getenv("MSGX_TEST_POSTGRES"); u != "" {
		return u
	}
	return "postgres://root@127.0.0.1:5432/test?sslmode=disable"
}

// MySQLDSN is the MariaDB/MySQL server the mailbox tests use (go-sql-driver
// form): MSGX_TEST_MYSQL, or the local server's root user and test database.
// Tests create their mailbox tables under unique names in it.
func MySQLDSN() string {
	if d := os.Getenv("MSGX_TEST_MYSQL"); d != "" {
		return d
	}
	return "root@tcp(127.0.0.1:3306)/test?parseTime=true&loc=UTC"
}

// OpenMySQL connects to MySQLDSN, checks the server answers and closes the
// connection at cleanup.
func OpenMySQL(t testing.TB) *sql.DB {
	t.Helper()
	raw, err := sql.Open("mysql", MySQLDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = raw.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := raw.PingContext(ctx); err != nil {
		t.Fatalf("mariadb at %s: %v", MySQLDSN(), err)
	}
	return raw
}

// UniqueName is prefix followed by random hex: a table, topic or stream name
// no other test (or concurrent run) uses.
func UniqueName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// NewSchema creates an empty schema on the test server and returns its name
// and a DSN whose sessions use it. The schema is dropped at cleanup.
func NewSchema(t testing.TB) (schema, dsn string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema = "t_" + strings.ToLower(sanitize(t.Name())) + "_" + hex.EncodeToString(b[:])
	if len(schema) > 63 {
		schema = schema[len(schema)-63:]
		schema = "t" + schema[1:]
	}
	dsn, drop, err := CreateSchema(ctx, schema)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := drop(); err != nil {
			t.Log(err)
		}
	})
	return schema, dsn
}

// CreateSchema creates the schema name on the test server and returns a
// DSN whose sessions use it and the function that drops it (NewSchema's
// work, for code without a testing.T: the examples).
func CreateSchema(ctx context.Context, name string) (dsn string, drop func() error, err error) {
	conn, err := pgx.Connect(ctx, PostgresURL())
	if err != nil {
		return "", nil, fmt.Errorf("storetest: connect to %s: %w", PostgresURL(), err)
	}
	defer conn.Close(ctx)
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+ident); err != nil {
		return "", nil, fmt.Errorf("storetest: create schema: %w", err)
	}
	drop = func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, PostgresURL())
		if err != nil {
			return fmt.Errorf("storetest: drop schema %s: %w", name, err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+ident+" CASCADE"); err != nil {
			return fmt.Errorf("storetest: drop schema %s: %w", name, err)
		}
		return nil
	}
	sep := "?"
	if strings.Contains(PostgresURL(), "?") {
		sep = "&"
	}
	return PostgresURL() + sep + "search_path=" + name, drop, nil
}

// NewPostgres opens a database in a fresh schema, migrated with the lines of
// the store.WithMigrate among opts.
func NewPostgres(t testing.TB, opts ...store.Option) *store.DB {
	t.Helper()
	_, dsn := NewSchema(t)
	return open(t, dsn, opts)
}

// NewCuttablePostgres opens a database in a fresh schema (as NewPostgres) through a
// TCP proxy, which the test cuts and restores to take the database away and
// bring it back.
func NewCuttablePostgres(t testing.TB, opts ...store.Option) (*store.DB, *brokertest.Proxy) {
	t.Helper()
	_, dsn := NewSchema(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := brokertest.NewProxy(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	u.Host = proxy.Addr()
	return open(t, u.String(), opts), proxy
}

// NewSQLite opens a database in a fresh file, migrated with the lines of the
// store.WithMigrate among opts.
func NewSQLite(t testing.TB, opts ...store.Option) *store.DB {
	t.Helper()
	return open(t, "sqlite:"+filepath.Join(t.TempDir(), "msgx.db"), opts)
}

func open(t testing.TB, dsn string, opts []store.Option) *store.DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := store.Open(ctx, dsn, opts...)
	if err != nil {
		t.Fatalf("storetest: open %s: %v", dsn, err)
	}
	t.Cleanup(db.Close)
	return db
}

// Each runs fn once per dialect as subtests, each with its own fresh database
// migrated with lines.
func Each(t *testing.T, lines []store.Line, fn func(t *testing.T, db *store.DB)) {
	t.Run("postgres", func(t *testing.T) { fn(t, NewPostgres(t, store.WithMigrate(lines...))) })
	t.Run("sqlite", func(t *testing.T) { fn(t, NewSQLite(t, store.WithMigrate(lines...))) })
}

func sanitize(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	out := b.String()
	if len(out) > 30 {
		out = out[:30]
	}
	return fmt.Sprint(out)
}

// CheckPlans fails the test for every statement of stmts (by name) whose
// generic plan (the one PostgreSQL caches once it stops planning each
// execution afresh, made without the parameters' values), made on a
// connection of pool with the tables as they are now, reads a table whose
// name matches tables sequentially or is compiled (JIT) before it runs.
// Tests use it to check that statements keep their index paths when they
// are first planned on nearly empty tables.
func CheckPlans(t testing.TB, pool *pgxpool.Pool, stmts map[string]string, tables *regexp.Regexp) {
	t.Helper()
	for name, plan := range GenericPlans(t, pool, stmts) {
		for _, m := range seqScanRE.FindAllStringSubmatch(plan, -1) {
			if tables.MatchString(m[1]) {
				t.Errorf("%s reads %s sequentially:\n%s", name, m[1], plan)
			}
		}
		if strings.Contains(plan, "JIT:") {
			t.Errorf("%s is compiled before it runs:\n%s", name, plan)
		}
	}
}

// GenericPlans returns the generic plan of each statement (see CheckPlans)
// as EXPLAIN prints it, made on a connection of pool, by name.
func GenericPlans(t testing.TB, pool *pgxpool.Pool, stmts map[string]string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pc, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatalf("storetest: acquire: %v", err)
	}
	// The connection's session settings are changed below: it is not given
	// back to the pool.
	conn := pc.Hijack()
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "SET plan_cache_mode = force_generic_plan"); err != nil {
		t.Fatalf("storetest: %v", err)
	}
	out := map[string]string{}
	for name, sql := range stmts {
		out[name] = genericPlan(ctx, t, conn, name, sql)
	}
	return out
}

// genericPlan returns the generic plan of sql as EXPLAIN prints it, costs
// and JIT included, on conn (whose plan_cache_mode forces generic plans).
func genericPlan(ctx context.Context, t testing.TB, conn *pgx.Conn, name, sql string) string {
	t.Helper()
	// The parameters the statement takes: the highest $n outside comments
	// (a query file's comments name the parameters of the statements after
	// them too).
	n := 0
	for _, m := range paramRE.FindAllStringSubmatch(commentRE.ReplaceAllString(sql, ""), -1) {
		if k, _ := strconv.Atoi(m[1]); k > n {
			n = k
		}
	}
	args := ""
	if n > 0 {
		args = "(" + strings.TrimSuffix(strings.Repeat("NULL,", n), ",") + ")"
	}
	if _, err := conn.Exec(ctx, "PREPARE msgx_plan_check AS "+sql); err != nil {
		t.Fatalf("storetest: prepare %s: %v", name, err)
	}
	defer func() {
		if _, err := conn.Exec(ctx, "DEALLOCATE msgx_plan_check"); err != nil {
			t.Fatalf("storetest: deallocate %s: %v", name, err)
		}
	}()
	rows, err := conn.Query(ctx, "EXPLAIN EXECUTE msgx_plan_check"+args)
	if err != nil {
		t.Fatalf("storetest: explain %s: %v", name, err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("storetest: explain %s: %v", name, err)
	}
	return strings.Join(lines, "\n")
}

var (
	paramRE   = regexp.MustCompile(`\$(\d+)`)
	commentRE = regexp.MustCompile(`--[^\n]*`)
	seqScanRE = regexp.MustCompile(`Seq Scan on (\w+)`)
)
