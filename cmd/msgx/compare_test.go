package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/msgx/msgx/pipeline/sis"
	"github.com/msgx/msgx/pipeline/sis/compare"
	"github.com/msgx/msgx/pipeline/sis/sistest"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// TestCompareFlightsCommand runs msgx compare flights against the state of
// the bundled traffic: an equal CSV export exits 0, one with a changed
// carrier exits 1 and --json names it, the same incumbent in a MariaDB
// table exits 0, and a wrong column, a wrong flag or no store exit 2.
func TestCompareFlightsCommand(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, dsn := storetest.NewSchema(t)
	db, err := store.Open(ctx, dsn, store.WithMigrate(sis.Schema()))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	sistest.ProcessTraffic(t, db, time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC))
	flights, err := compare.ReadMsgx(ctx, db, "", "")
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	mapping := write("mapping.yaml", "columns:\n  FLIGHT_ID: FLID\n  OP_DAY: OPERATION_DAY\n  REC: {name: STATUS, values: {A: ACTIVE, D: DELETED}}\n  CARRIER: ALCD\n")
	rows := [][]string{}
	for _, f := range flights {
		rows = append(rows, []string{f.FLID, f.OperationDay, map[string]string{"ACTIVE": "A", "DELETED": "D"}[f.Status], f.Fields["ALCD"]})
	}
	csvOf := func(rows [][]string) string {
		var b strings.Builder
		b.WriteString("FLIGHT_ID,OP_DAY,REC,CARRIER\n")
		for _, r := range rows {
			b.WriteString(strings.Join(r, ",") + "\n")
		}
		return b.String()
	}
	equal := write("equal.csv", csvOf(rows))
	rows[0][3] = "ZZ"
	changed := write("changed.csv", csvOf(rows))

	msgx := func(args ...string) (code int, stdout, stderr string) {
		cmd := newCompareCmd(func(c int) { code = c })
		var out, errb bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&errb)
		cmd.SetArgs(append([]string{"flights"}, args...))
		if err := cmd.ExecuteContext(ctx); err != nil && code == 0 {
			t.Fatalf("%v: %v", args, err)
		}
		return code, out.String(), errb.String()
	}

	code, out, _ := msgx("--dsn", dsn, "--mapping", mapping, "--csv", equal)
	if code != 0 || !strings.Contains(out, "EQUAL: 4 flights of the incumbent, 4 of msgx") {
		t.Errorf("equal: exit %d\n%s", code, out)
	}

	code, out, _ = msgx("--dsn", dsn, "--mapping", mapping, "--csv", changed, "--json")
	var rep compare.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json: %v\n%s", err, out)
	}
	if code != 1 || len(rep.Flights) != 1 || rep.Flights[0].FLID != flights[0].FLID || len(rep.Flights[0].Fields) != 1 ||
		rep.Flights[0].Fields[0].Name != "ALCD" || *rep.Flights[0].Fields[0].Incumbent != "ZZ" || rep.Summary.Equal != 3 {
		t.Errorf("changed: exit %d\n%s", code, out)
	}

	raw := storetest.OpenMySQL(t)
	table := storetest.UniqueName("cmp_cli_")
	if _, err := raw.ExecContext(ctx, "CREATE TABLE "+table+" (FLIGHT_ID VARCHAR(20), OP_DAY DATE, REC CHAR(1), CARRIER VARCHAR(10))"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = raw.ExecContext(context.Background(), "DROP TABLE "+table) })
	for _, f := range flights {
		if _, err := raw.ExecContext(ctx, "INSERT INTO "+table+" VALUES (?, ?, ?, ?)", f.FLID, f.OperationDay,
			map[string]string{"ACTIVE": "A", "DELETED": "D"}[f.Status], f.Fields["ALCD"]); err != nil {
			t.Fatal(err)
		}
	}
	code, out, _ = msgx("--dsn", dsn, "--mapping", mapping, "--incumbent", storetest.MySQLDSN(), "--table", table)
	if code != 0 || !strings.Contains(out, "EQUAL") {
		t.Errorf("mariadb: exit %d\n%s", code, out)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--dsn", dsn, "--mapping", write("bad.yaml", "columns: {FLIGHT_ID: FLID, OP_DAY: OPERATION_DAY, GATE: GTDT}"), "--csv", equal},
			"no column GATE"},
		{[]string{"--dsn", dsn, "--mapping", mapping, "--csv", equal, "--form", "2026-12-06"}, "unknown flag: --form"},
		{[]string{"--dsn", "sqlite:" + filepath.Join(dir, "none.db"), "--mapping", mapping, "--csv", equal}, "the store (--dsn)"},
		{[]string{"--dsn", dsn, "--mapping", mapping}, "give the incumbent as"},
	} {
		code, _, stderr := msgx(tc.args...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
}
