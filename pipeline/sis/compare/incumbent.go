package compare

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	_ "github.com/go-sql-driver/mysql" // the incumbent on MySQL/MariaDB
	_ "github.com/jackc/pgx/v5/stdlib" // the incumbent on PostgreSQL

	"github.com/msgx/msgx/pipeline/sis"
)

// Flight is one flight of either side as it is compared: its key, its
// status and the fields and collections the mapping names, values as the
// side holds them (normalised only when compared).
type Flight struct {
	FLID         string
	OperationDay string
	// Status is ACTIVE or DELETED on msgx's side; on the incumbent's the
	// STATUS column's value ("" without one).
	Status      string
	Fields      map[string]string
	Collections map[string][]sis.Item
	// Row is the incumbent row (1 = the first data row), 0 for msgx.
	Row int
}

// rowSource yields the incumbent's rows as column → value (nil for NULL).
type rowSource interface {
	columns() []string
	next() (map[string]*string, error) // io.EOF after the last row
}

// ReadTable reads the incumbent's flight table (or view) from a database:
// dsn is postgres://… (or postgresql://…) for PostgreSQL, otherwise a
// go-sql-driver/mysql DSN (user:pass@tcp(host:3306)/db). The table is read
// whole in one read-only transaction, so its rows are one consistent
// state; nothing is written. A column of type timestamptz is taken in loc
// (the airport's zone); other time columns by their wall clock.
func ReadTable(ctx context.Context, dsn, table string, m *Mapping, loc *time.Location) ([]Flight, error) {
	driver, quote := "mysql", func(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		driver, quote = "pgx", func(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
	} else if !strings.Contains(dsn, "parseTime=") {
		// DATETIME and DATE as times, not text in the server's format.
		dsn += map[bool]string{true: "&", false: "?"}[strings.Contains(dsn, "?")] + "parseTime=true"
	}
	if table == "" {
		return nil, errors.New("compare: incumbent: no table")
	}
	parts := strings.Split(table, ".")
	for i, p := range parts {
		parts[i] = quote(p)
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return nil, fmt.Errorf("compare: incumbent: %w", err)
	}
	defer db.Close()
	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("compare: incumbent: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	rows, err := tx.QueryContext(ctx, "SELECT * FROM "+strings.Join(parts, "."))
	if err != nil {
		return nil, fmt.Errorf("compare: incumbent table %s: %w", table, err)
	}
	defer rows.Close()
	src, err := newSQLRows(rows, loc)
	if err != nil {
		return nil, fmt.Errorf("compare: incumbent table %s: %w", table, err)
	}
	out, err := readFlights(src, m)
	if err != nil {
		return nil, fmt.Errorf("compare: incumbent table %s: %w", table, err)
	}
	return out, nil
}

// ReadCSV reads the incumbent's flights from a CSV export: a header row of
// column names, then one row per flight; an empty cell is NULL. A UTF-8
// byte order mark (spreadsheet exports write one) is skipped.
func ReadCSV(r io.Reader, m *Mapping) ([]Flight, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("compare: incumbent csv: %w", err)
	}
	cr := csv.NewReader(bytes.NewReader(bytes.TrimPrefix(b, []byte("\xef\xbb\xbf"))))
	head, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("compare: incumbent csv: header: %w", err)
	}
	out, err := readFlights(&csvRows{r: cr, head: head}, m)
	if err != nil {
		return nil, fmt.Errorf("compare: incumbent csv: %w", err)
	}
	return out, nil
}

// readFlights turns the incumbent's rows into flights through the mapping.
// Column names match without regard to case.
func readFlights(src rowSource, m *Mapping) ([]Flight, error) {
	have := map[string]string{} // lower-case → as the source spells it
	for _, c := range src.columns() {
		have[strings.ToLower(c)] = c
	}
	cols := map[string]string{} // mapping column → source column
	var missing []string
	for _, col := range slices.Sorted(maps.Keys(m.Columns)) {
		if c, ok := have[strings.ToLower(col)]; ok {
			cols[col] = c
		} else {
			missing = append(missing, col)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("no column %s (the table has %s)", strings.Join(missing, ", "), strings.Join(src.columns(), ", "))
	}
	var (
		out  []Flight
		errs []error
	)
	for row := 1; ; row++ {
		vals, err := src.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("row %d: %w", row, err)
		}
		f := Flight{Fields: map[string]string{}, Collections: map[string][]sis.Item{}, Row: row}
		for col, c := range m.Columns {
			v := vals[cols[col]]
			if v == nil {
				continue
			}
			switch {
			case c.Name == KeyFLID:
				f.FLID = strings.TrimSpace(*v)
			case c.Name == KeyDay:
				if f.OperationDay, err = operationDay(*v); err != nil {
					errs = append(errs, fmt.Errorf("row %d: %s: %w", row, col, err))
				}
			case c.Name == KeyStatus:
				f.Status = *v
				f.Fields[KeyStatus] = *v
			case c.collection():
				its, err := parseItems(*v)
				if err != nil {
					errs = append(errs, fmt.Errorf("row %d: %s: %w", row, col, err))
				}
				if len(its) > 0 {
					f.Collections[c.Name] = its
				}
			default:
				f.Fields[c.Name] = *v
			}
		}
		if f.FLID == "" {
			errs = append(errs, fmt.Errorf("row %d: no FLID", row))
		}
		out = append(out, f)
		if len(errs) >= 20 {
			errs = append(errs, errors.New("(more rows not checked)"))
			break
		}
	}
	return out, errors.Join(errs...)
}

// parseItems reads a collection column: a JSON array of items in msgx's
// item shape ({"@GTNO": "1", "GATE": "A12"}); numbers and booleans are
// read as their text. Empty text, null and [] are no items.
func parseItems(v string) ([]sis.Item, error) {
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	dec := json.NewDecoder(strings.NewReader(v))
	dec.UseNumber()
	var its []sis.Item
	if err := dec.Decode(&its); err != nil {
		return nil, fmt.Errorf("not a JSON array of items: %w", err)
	}
	return its, nil
}

// sqlRows is a rowSource over a query's rows.
type sqlRows struct {
	rows  *sql.Rows
	names []string
	tz    []bool // the column is timestamptz
	date  []bool // the column is a date
	loc   *time.Location
}

func newSQLRows(rows *sql.Rows, loc *time.Location) (*sqlRows, error) {
	types, err := rows.ColumnTypes()
	if err != nil {
		return nil, err
	}
	s := &sqlRows{rows: rows, loc: loc}
	for _, t := range types {
		s.names = append(s.names, t.Name())
		tn := strings.ToUpper(t.DatabaseTypeName())
		s.tz = append(s.tz, tn == "TIMESTAMPTZ")
		s.date = append(s.date, tn == "DATE")
	}
	return s, nil
}

func (s *sqlRows) columns() []string { return s.names }

func (s *sqlRows) next() (map[string]*string, error) {
	if !s.rows.Next() {
		if err := s.rows.Err(); err != nil {
			return nil, err
		}
		return nil, io.EOF
	}
	vals := make([]any, len(s.names))
	ptrs := make([]any, len(s.names))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := s.rows.Scan(ptrs...); err != nil {
		return nil, err
	}
	out := make(map[string]*string, len(s.names))
	for i, v := range vals {
		var str string
		switch v := v.(type) {
		case nil:
			continue
		case []byte:
			str = string(v)
		case string:
			str = v
		case time.Time:
			// As the SIS body writes a time: the minute, in the airport's
			// zone for an instant, by its wall clock otherwise.
			if s.tz[i] {
				v = v.In(s.loc)
			}
			str = bodyTime(v, s.date[i])
		default:
			str = fmt.Sprint(v)
		}
		out[s.names[i]] = &str
	}
	return out, nil
}

// csvRows is a rowSource over a CSV file.
type csvRows struct {
	r    *csv.Reader
	head []string
}

func (c *csvRows) columns() []string { return c.head }

func (c *csvRows) next() (map[string]*string, error) {
	rec, err := c.r.Read()
	if err != nil {
		return nil, err
	}
	out := make(map[string]*string, len(rec))
	for i, v := range rec {
		if v == "" || i >= len(c.head) {
			continue
		}
		out[c.head[i]] = &v
	}
	return out, nil
}
