package compare_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/csv"
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/msgx/msgx/pipeline/sis"
	"github.com/msgx/msgx/pipeline/sis/compare"
	"github.com/msgx/msgx/pipeline/sis/sistest"
	"github.com/msgx/msgx/pipeline/sis/sisxml"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// mappingYAML is the incumbent's layout: its own column names, a status
// code, SODT as a time column, two collections as JSON.
const mappingYAML = `
columns:
  FLIGHT_ID: FLID
  OP_DATE: OPERATION_DAY
  REC_STATE: {name: STATUS, values: {"A": ACTIVE, "D": DELETED}}
  CARRIER: ALCD
  FLIGHT_NO: FLNO
  MOVEMENT: MVIN
  STD: SODT
  AC_TYPE: ACFT
  REGISTRATION: RENO
  STAND: STND
  ROUTE_JSON: ROUT
  GATES_JSON: GTDT
fold-case: true
times:
  layout: "2006-01-02 15:04"
  names: [SODT]
`

// columns are the incumbent table's columns in order, and the SIS name of each.
var columns = []struct{ col, name string }{
	{"FLIGHT_ID", "FLID"}, {"OP_DATE", "OPERATION_DAY"}, {"REC_STATE", "STATUS"}, {"CARRIER", "ALCD"},
	{"FLIGHT_NO", "FLNO"}, {"MOVEMENT", "MVIN"}, {"STD", "SODT"}, {"AC_TYPE", "ACFT"},
	{"REGISTRATION", "RENO"}, {"STAND", "STND"}, {"ROUTE_JSON", "ROUT"}, {"GATES_JSON", "GTDT"},
}

// row is one incumbent row: column → value (nil: NULL).
type row map[string]*string

func str(s string) *string { return &s }

// incumbentRow is a flight as the incumbent would hold it: its codes, its
// time format (SODT as a date and time), its collections as JSON.
func incumbentRow(t *testing.T, f compare.Flight) row {
	r := row{"FLIGHT_ID": str(f.FLID), "OP_DATE": str(f.OperationDay)}
	r["REC_STATE"] = str(map[string]string{sis.StatusActive: "A", sis.StatusDeleted: "D"}[f.Status])
	for _, c := range columns[3:] {
		if sis.IsCollection(c.name) {
			if its := f.Collections[c.name]; len(its) > 0 {
				b, err := json.Marshal(its)
				if err != nil {
					t.Fatal(err)
				}
				r[c.col] = str(string(b))
			}
			continue
		}
		v, ok := f.Fields[c.name]
		if !ok {
			continue
		}
		if c.name == "SODT" {
			tm, _, err := sisxml.ParseBodyTime(v, time.UTC)
			if err != nil {
				t.Fatal(err)
			}
			v = tm.Format("2006-01-02 15:04")
		}
		r[c.col] = str(v)
	}
	return r
}

// planted is the incumbent built from msgx's state with the planted
// differences, and the report they must give.
type planted struct {
	rows      []row
	flights   []compare.FlightDiff
	onlyInc   []compare.Missing
	onlyMsgx  []compare.Missing
	absorbed  string // the flight whose difference normalisation absorbs
	flightsIn int
}

// plant builds the incumbent from msgx's flights: one field changed, one
// flight left out, one flight msgx does not have, a gate changed and a gate
// left out of a collection, and a carrier in lower case padded with blanks
// (absorbed, as the time format of SODT is).
func plant(t *testing.T, msgx []compare.Flight) planted {
	var changed, missing, coll, absorbed *compare.Flight
	for i := range msgx {
		f := &msgx[i]
		switch {
		case coll == nil && f.Status == sis.StatusActive && len(f.Collections["GTDT"]) >= 3:
			coll = f
		case changed == nil && f.Status == sis.StatusActive && f.Fields["ACFT"] != "":
			changed = f
		case absorbed == nil && f.Fields["ALCD"] != "":
			absorbed = f
		case missing == nil:
			missing = f
		}
	}
	if changed == nil || missing == nil || coll == nil || absorbed == nil {
		t.Fatalf("the traffic has too few flights to plant the differences in (%d flights)", len(msgx))
	}
	var p planted
	p.absorbed = absorbed.FLID
	gates := coll.Collections["GTDT"]
	for _, f := range msgx {
		if f.FLID == missing.FLID {
			p.onlyMsgx = append(p.onlyMsgx, compare.Missing{FLID: f.FLID, OperationDay: f.OperationDay})
			continue
		}
		r := incumbentRow(t, f)
		switch f.FLID {
		case changed.FLID:
			r["AC_TYPE"] = str("B77W")
		case absorbed.FLID:
			r["CARRIER"] = str("  " + strings.ToLower(f.Fields["ALCD"]) + " ")
		case coll.FLID:
			// The second gate changed, the third left out.
			second := sis.Item{}
			for k, v := range gates[1] {
				second[k] = v
			}
			second["GATE"] = "G99"
			b, err := json.Marshal([]sis.Item{gates[0], second})
			if err != nil {
				t.Fatal(err)
			}
			r["GATES_JSON"] = str(string(b))
		}
		p.rows = append(p.rows, r)
	}
	extra := incumbentRow(t, *changed)
	extra["FLIGHT_ID"] = str("990001")
	p.rows = append(p.rows, extra)
	p.onlyInc = []compare.Missing{{FLID: "990001", OperationDay: changed.OperationDay, Row: len(p.rows)}}
	p.flightsIn = len(p.rows)

	rowOf := func(flid string) int {
		for i, r := range p.rows {
			if *r["FLIGHT_ID"] == flid {
				return i + 1
			}
		}
		return 0
	}
	var was *string
	if v, ok := changed.Fields["ACFT"]; ok {
		was = &v
	}
	third, err := json.Marshal(gates[2])
	if err != nil {
		t.Fatal(err)
	}
	p.flights = []compare.FlightDiff{
		{FLID: changed.FLID, OperationDay: changed.OperationDay, Row: rowOf(changed.FLID),
			Fields: []compare.FieldDiff{{Name: "ACFT", Label: sis.Label("ACFT"), Incumbent: str("B77W"), Msgx: was}}},
		{FLID: coll.FLID, OperationDay: coll.OperationDay, Row: rowOf(coll.FLID),
			Collections: []compare.CollectionDiff{
				{Name: "GTDT", Label: sis.Label("GTDT"), Item: "GTNO=" + gates[1]["@GTNO"].(string), Child: "GATE",
					Incumbent: str("G99"), Msgx: str(gates[1]["GATE"].(string))},
				{Name: "GTDT", Label: sis.Label("GTDT"), Item: "GTNO=" + gates[2]["@GTNO"].(string), Msgx: str(string(third))},
			}},
	}
	slices.SortFunc(p.flights, func(a, b compare.FlightDiff) int { return compareFLIDs(a.FLID, b.FLID) })
	return p
}

func compareFLIDs(a, b string) int {
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	return strings.Compare(a, b)
}

// check asserts the report holds the planted differences and no others.
func check(t *testing.T, rep *compare.Report, p planted, msgxFlights int) {
	t.Helper()
	if rep.Equal() {
		t.Fatal("the report finds the two sides equal")
	}
	if !reflect.DeepEqual(rep.Flights, p.flights) {
		t.Errorf("differing flights:\n got  %s\n want %s", js(rep.Flights), js(p.flights))
	}
	if !reflect.DeepEqual(rep.OnlyIncumbent, p.onlyInc) {
		t.Errorf("only in the incumbent:\n got  %s\n want %s", js(rep.OnlyIncumbent), js(p.onlyInc))
	}
	if !reflect.DeepEqual(rep.OnlyMsgx, p.onlyMsgx) {
		t.Errorf("only in msgx:\n got  %s\n want %s", js(rep.OnlyMsgx), js(p.onlyMsgx))
	}
	s := rep.Summary
	want := compare.Summary{Incumbent: p.flightsIn, Msgx: msgxFlights, Matched: msgxFlights - 1, Equal: msgxFlights - 3,
		Differing: 2, OnlyIncumbent: 1, OnlyMsgx: 1, FieldDiffs: 1, CollectionDiffs: 2,
		Fields:      []string{"ACFT", "ALCD", "FLNO", "MVIN", "RENO", "SODT", "STATUS", "STND"},
		Collections: []string{"GTDT", "ROUT"}}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("summary:\n got  %s\n want %s", js(s), js(want))
	}
	var text bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, f := range p.flights {
		if !strings.Contains(text.String(), "flight "+f.FLID+" "+f.OperationDay) {
			t.Errorf("the text report does not name flight %s:\n%s", f.FLID, text.String())
		}
	}
	if strings.Contains(text.String(), "flight "+p.absorbed+" ") {
		t.Errorf("the text report names flight %s, whose only difference is case and blanks:\n%s", p.absorbed, text.String())
	}
	t.Logf("report:\n%s", text.String())
}

func js(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// msgxState runs the bundled SIS traffic through the SIS processor into a
// fresh PostgreSQL schema and reads the flights back.
func msgxState(t *testing.T) []compare.Flight {
	db := storetest.NewPostgres(t, store.WithMigrate(sis.Schema()))
	sistest.ProcessTraffic(t, db, time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fs, err := compare.ReadMsgx(ctx, db, "", "")
	if err != nil {
		t.Fatal(err)
	}
	// Days asked for are read day by day: flights 15 and 16 fly on
	// 2021-01-23, 121112312 on 2003-12-15 and 7610151 on 2020-12-15.
	for _, tc := range []struct {
		from, to string
		want     []string
	}{
		{"2021-01-23", "2021-01-23", []string{"15", "16"}},
		{"2020-12-14", "2021-01-23", []string{"7610151", "15", "16"}},
		{"2000-01-01", "2030-01-01", []string{"121112312", "15", "16", "7610151"}}, // too many days: all
	} {
		days, err := compare.ReadMsgx(ctx, db, tc.from, tc.to)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, f := range days {
			got = append(got, f.FLID)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("msgx flights of %s to %s: %v, want %v", tc.from, tc.to, got, tc.want)
		}
	}
	return fs
}

func mapping(t *testing.T) *compare.Mapping {
	m, err := compare.ParseMapping(strings.NewReader(mappingYAML))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func writeCSV(t *testing.T, rows []row) []byte {
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	head := make([]string, len(columns))
	for i, c := range columns {
		head[i] = c.col
	}
	_ = w.Write(head)
	for _, r := range rows {
		rec := make([]string, len(columns))
		for i, c := range columns {
			if v := r[c.col]; v != nil {
				rec[i] = *v
			}
		}
		_ = w.Write(rec)
	}
	w.Flush()
	if err := w.Error(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestComparePlantedDifferences compares msgx's state after the real
// traffic with an incumbent built from it plus planted differences, in a
// MariaDB table and in a CSV export: every planted difference is found
// and no other, the case and blanks difference is absorbed, and the same
// incumbent without the plants is equal.
func TestComparePlantedDifferences(t *testing.T) {
	ms := msgxState(t)
	m := mapping(t)
	p := plant(t, ms)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	t.Run("mariadb", func(t *testing.T) {
		raw := storetest.OpenMySQL(t)
		table := storetest.UniqueName("cmp_flights_")
		// The incumbent's own types: a DATE day, a DATETIME STD, JSON text.
		ddl := "CREATE TABLE " + table + ` (
			FLIGHT_ID VARCHAR(20) NOT NULL, OP_DATE DATE NOT NULL, REC_STATE CHAR(1), CARRIER VARCHAR(10),
			FLIGHT_NO VARCHAR(10), MOVEMENT CHAR(1), STD DATETIME, AC_TYPE VARCHAR(10), REGISTRATION VARCHAR(20),
			STAND VARCHAR(10), ROUTE_JSON LONGTEXT, GATES_JSON LONGTEXT) CHARACTER SET utf8mb4`
		if _, err := raw.ExecContext(ctx, ddl); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = raw.ExecContext(context.Background(), "DROP TABLE "+table) })
		ins := "INSERT INTO " + table + " VALUES (" + strings.TrimSuffix(strings.Repeat("?,", len(columns)), ",") + ")"
		for _, r := range p.rows {
			args := make([]any, len(columns))
			for i, c := range columns {
				if v := r[c.col]; v != nil {
					args[i] = *v
				}
			}
			if _, err := raw.ExecContext(ctx, ins, args...); err != nil {
				t.Fatal(err)
			}
		}
		inc, err := compare.ReadTable(ctx, storetest.MySQLDSN(), table, m, time.UTC)
		if err != nil {
			t.Fatal(err)
		}
		// Rows come back in insertion order (no key, one writer).
		rep, err := compare.Compare(m, inc, ms, compare.Options{})
		if err != nil {
			t.Fatal(err)
		}
		check(t, rep, p, len(ms))
		// docs/sis.md shows this very report.
		var text bytes.Buffer
		if err := rep.WriteText(&text); err != nil {
			t.Fatal(err)
		}
		if doc := docBlock(t, "### The report"); text.String() != doc {
			t.Errorf("docs/sis.md's report is not the report:\n%s", text.String())
		}
	})

	t.Run("csv", func(t *testing.T) {
		inc, err := compare.ReadCSV(bytes.NewReader(append([]byte("\xef\xbb\xbf"), writeCSV(t, p.rows)...)), m)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := compare.Compare(m, inc, ms, compare.Options{})
		if err != nil {
			t.Fatal(err)
		}
		check(t, rep, p, len(ms))
	})

	t.Run("equal", func(t *testing.T) {
		var rows []row
		for _, f := range ms {
			rows = append(rows, incumbentRow(t, f))
		}
		inc, err := compare.ReadCSV(bytes.NewReader(writeCSV(t, rows)), m)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := compare.Compare(m, inc, ms, compare.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if !rep.Equal() || rep.Summary.Equal != len(ms) {
			t.Fatalf("the incumbent built from msgx's own state differs: %s", js(rep))
		}
	})
}

// TestCompareDaysAndStatus: From/To bound both sides; without a STATUS
// column msgx's DELETED flights are left out and counted; a flight the
// other side has on another day says so; the incumbent holding a flight
// twice is an error.
func TestCompareDaysAndStatus(t *testing.T) {
	m, err := compare.ParseMapping(strings.NewReader("columns: {ID: FLID, DAY: OPERATION_DAY, AL: ALCD}"))
	if err != nil {
		t.Fatal(err)
	}
	fl := func(flid, day, status, alcd string) compare.Flight {
		return compare.Flight{FLID: flid, OperationDay: day, Status: status, Fields: map[string]string{"ALCD": alcd}}
	}
	ms := []compare.Flight{fl("1", "2026-12-06", "ACTIVE", "CA"), fl("2", "2026-12-06", "DELETED", "MU"),
		fl("3", "2026-12-07", "ACTIVE", "CZ"), fl("4", "2026-12-08", "ACTIVE", "HU")}
	inc, err := compare.ReadCSV(strings.NewReader("ID,DAY,AL\n1,20261206,ca\n3,2026-12-06 00:00:00,CZ\n4,08DEC26,HU\n"), m)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := compare.Compare(m, inc, ms, compare.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := compare.Summary{Incumbent: 3, Msgx: 3, Matched: 2, Equal: 1, Differing: 1, OnlyIncumbent: 1, OnlyMsgx: 1,
		FieldDiffs: 1, DeletedLeftOut: 1, Fields: []string{"ALCD"}, Collections: []string{}}
	if !reflect.DeepEqual(rep.Summary, want) {
		t.Errorf("summary: got %s, want %s", js(rep.Summary), js(want))
	}
	if got, want := js(rep.OnlyMsgx), `[{"flid":"3","operation_day":"2026-12-07","other_side_day":"2026-12-06"}]`; got != want {
		t.Errorf("only msgx: got %s, want %s", got, want)
	}
	if got, want := js(rep.OnlyIncumbent), `[{"flid":"3","operation_day":"2026-12-06","incumbent_row":2,"other_side_day":"2026-12-07"}]`; got != want {
		t.Errorf("only incumbent: got %s, want %s", got, want)
	}

	rep, err = compare.Compare(m, inc, ms, compare.Options{From: "2026-12-08", To: "2026-12-08"})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Equal() || rep.Summary.Matched != 1 {
		t.Errorf("2026-12-08 alone: got %s", js(rep))
	}

	dup, err := compare.ReadCSV(strings.NewReader("ID,DAY,AL\n1,2026-12-06,CA\n1,2026-12-06,CA\n"), m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := compare.Compare(m, dup, ms, compare.Options{}); err == nil || !strings.Contains(err.Error(), "rows 1 and 2") {
		t.Errorf("a flight twice: got %v", err)
	}
}

// TestParseMappingRefuses: the mapping's mistakes are reported, all at once.
func TestParseMappingRefuses(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"columns: {A: ALCD}", "no column is FLID"},
		{"columns: {A: FLID, B: OPERATION_DAY, C: ALCD, D: ALCD}", "ALCD is already the column C"},
		{"columns: {A: FLID, B: OPERATION_DAY, C: alcd}", `"alcd" is not an SIS name`},
		{"columns: {A: FLID, B: OPERATION_DAY}\nfoldcase: true", "field foldcase not found"},
		{"columns: {A: FLID, B: OPERATION_DAY, C: {name: ALCD, value: {}}}", "field value not found"},
		{"columns: {A: FLID, B: OPERATION_DAY}\ntimes: {names: [SODT]}", "names without a layout"},
		{"columns: {A: FLID, B: OPERATION_DAY, C: {name: GTDT, values: {a: b}}}", "not a key's or a collection's"},
	} {
		_, err := compare.ParseMapping(strings.NewReader(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want an error with %q", tc.yaml, err, tc.want)
		}
	}
}

// TestReadTableRefusesAMissingColumn: a mapped column the table lacks is
// an error naming it and the columns the table has.
func TestReadTableRefusesAMissingColumn(t *testing.T) {
	raw := storetest.OpenMySQL(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	table := storetest.UniqueName("cmp_flights_")
	if _, err := raw.ExecContext(ctx, "CREATE TABLE "+table+" (ID VARCHAR(20), DAY DATE)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = raw.ExecContext(context.Background(), "DROP TABLE "+table) })
	m, err := compare.ParseMapping(strings.NewReader("columns: {id: FLID, DAY: OPERATION_DAY, AL: ALCD}"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = compare.ReadTable(ctx, storetest.MySQLDSN(), table, m, time.UTC)
	if err == nil || !strings.Contains(err.Error(), "no column AL (the table has ID, DAY)") {
		t.Fatalf("got %v", err)
	}
}

// docBlock returns the first fenced block after heading in docs/sis.md.
func docBlock(t *testing.T, heading string) string {
	t.Helper()
	b, err := os.ReadFile("../../../docs/sis.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, heading+"\n")
	if i < 0 {
		t.Fatalf("docs/sis.md has no %q", heading)
	}
	s = s[i:]
	start := strings.Index(s, "\n```")
	s = s[start+4:]
	s = s[strings.IndexByte(s, '\n')+1:]
	return s[:strings.Index(s, "```")]
}

// TestMappingDocExample: the mapping docs/sis.md shows parses.
func TestMappingDocExample(t *testing.T) {
	m, err := compare.ParseMapping(strings.NewReader(docBlock(t, "### The mapping file")))
	if err != nil {
		t.Fatal(err)
	}
	if c := m.Columns["GATES"]; c.Name != "GTDT" || !m.FoldCase || m.TimeLayout != "2006-01-02 15:04" {
		t.Errorf("the doc's mapping reads as %+v", m)
	}
}

// TestReadTablePostgres reads an incumbent on PostgreSQL: a timestamptz
// is read in the airport's zone, a date is the operation day, an integer
// FLID and a jsonb collection with a numeric sequence are read as text.
func TestReadTablePostgres(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, dsn := storetest.NewSchema(t)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE flight_info (flight_id bigint, op_day date, std timestamptz, carrier text, gates jsonb);
		INSERT INTO flight_info VALUES (121112312, '2003-12-15', '2003-12-15 05:45:00+00', 'CA', '[{"@GTNO": 1, "GATE": "G28"}]')`); err != nil {
		t.Fatal(err)
	}
	m, err := compare.ParseMapping(strings.NewReader("columns: {FLIGHT_ID: FLID, OP_DAY: OPERATION_DAY, STD: SODT, CARRIER: ALCD, GATES: GTDT}"))
	if err != nil {
		t.Fatal(err)
	}
	shanghai, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	inc, err := compare.ReadTable(ctx, dsn, "flight_info", m, shanghai)
	if err != nil {
		t.Fatal(err)
	}
	ms := []compare.Flight{{FLID: "121112312", OperationDay: "2003-12-15", Status: sis.StatusActive,
		Fields:      map[string]string{"SODT": "15DEC031345", "ALCD": "CA"},
		Collections: map[string][]sis.Item{"GTDT": {{"@GTNO": "1", "GATE": "G28"}}}}}
	rep, err := compare.Compare(m, inc, ms, compare.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Equal() || rep.Summary.Equal != 1 {
		t.Errorf("got %s from %s", js(rep), js(inc))
	}
}
