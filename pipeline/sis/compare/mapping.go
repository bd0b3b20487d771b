package compare

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/msgx/msgx/pipeline/sis"
	"github.com/msgx/msgx/pipeline/sis/sisxml"
)

// The names a column can map to besides the SIS fields and collections.
const (
	// KeyFLID is the column holding the flight's FLID (required).
	KeyFLID = "FLID"
	// KeyDay is the column holding the operation day (required): a date,
	// yyyy-mm-dd (a longer value is cut to its first ten characters),
	// yyyymmdd, or an SIS body date (ddMONyy).
	KeyDay = "OPERATION_DAY"
	// KeyStatus is the column holding the flight's status, ACTIVE or
	// DELETED once its values are translated (optional: without it msgx's
	// DELETED flights are left out, the incumbent taken to hold live
	// flights only).
	KeyStatus = "STATUS"
)

// Mapping says how the incumbent's flight table is read: which column holds
// which SIS field or collection, and how values are normalised before they
// are compared (see ParseMapping for its YAML form).
type Mapping struct {
	// Columns maps each incumbent column to what it holds; columns not
	// named are not read.
	Columns map[string]Column
	// Trim removes leading and trailing white space from every value of
	// both sides (default true).
	Trim bool
	// FoldCase compares values without regard to letter case.
	FoldCase bool
	// TimeLayout is how the incumbent writes a time (a Go layout, e.g.
	// "2006-01-02 15:04:05"); TimeNames are the SIS fields and item
	// children that are times. Such a value is compared as the minute it
	// names, whichever of the layout and the SIS body format (ddMONyyHHmm)
	// it is written in.
	TimeLayout string
	TimeNames  []string

	times map[string]bool
}

// Column is what one incumbent column holds.
type Column struct {
	// Name is the SIS field (ALCD, FDIV_DDES), the collection (GTDT: the
	// column holds a JSON array of items in msgx's item shape) or one of
	// FLID, OPERATION_DAY, STATUS.
	Name string
	// Values translates the incumbent's codes to msgx's (after trimming),
	// e.g. {"1": "ACTIVE", "0": "DELETED"} for STATUS; a value not listed
	// is compared as it is.
	Values map[string]string
}

// collection reports whether the column holds a collection.
func (c Column) collection() bool { return sis.IsCollection(c.Name) }

var sisName = regexp.MustCompile(`^[A-Z][A-Z0-9]*(_[A-Z0-9]+)?$`)

// ParseMapping reads a mapping file:
//
//	columns:                        # incumbent column: SIS name
//	  FLIGHT_ID: FLID
//	  OP_DATE: OPERATION_DAY
//	  REC_STATE: {name: STATUS, values: {"A": ACTIVE, "X": DELETED}}
//	  CARRIER: ALCD
//	  STD: SODT
//	  GATES: GTDT                   # a JSON array of GTDT items
//	trim: true                      # default true
//	fold-case: false                # default false
//	times:
//	  layout: "2006-01-02 15:04:05"
//	  names: [SODT, PGOT, PGCT]
//
// Unknown keys, a name mapped twice and a missing FLID or OPERATION_DAY
// column are errors.
func ParseMapping(r io.Reader) (*Mapping, error) {
	var raw struct {
		Columns  map[string]yaml.Node `yaml:"columns"`
		Trim     *bool                `yaml:"trim"`
		FoldCase bool                 `yaml:"fold-case"`
		Times    struct {
			Layout string   `yaml:"layout"`
			Names  []string `yaml:"names"`
		} `yaml:"times"`
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("compare: mapping: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&raw); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("compare: mapping: %w", err)
	}
	m := &Mapping{Columns: map[string]Column{}, Trim: raw.Trim == nil || *raw.Trim, FoldCase: raw.FoldCase,
		TimeLayout: raw.Times.Layout, TimeNames: raw.Times.Names}
	var errs []error
	for _, col := range slices.Sorted(maps.Keys(raw.Columns)) {
		n := raw.Columns[col]
		var c Column
		switch n.Kind {
		case yaml.ScalarNode:
			c.Name = n.Value
		case yaml.MappingNode:
			var spec struct {
				Name   string            `yaml:"name"`
				Values map[string]string `yaml:"values"`
			}
			if err := decodeStrict(&n, &spec); err != nil {
				errs = append(errs, fmt.Errorf("columns.%s: %w", col, err))
				continue
			}
			c = Column{Name: spec.Name, Values: spec.Values}
		default:
			errs = append(errs, fmt.Errorf("columns.%s: want an SIS name or {name, values}", col))
			continue
		}
		m.Columns[col] = c
	}
	if err := errors.Join(append(errs, m.check())...); err != nil {
		return nil, fmt.Errorf("compare: mapping: %w", err)
	}
	return m, nil
}

// decodeStrict decodes a node refusing keys v has no field for (yaml.v3's
// KnownFields does not reach a node decoded on its own).
func decodeStrict(n *yaml.Node, v any) error {
	b, err := yaml.Marshal(n)
	if err != nil {
		return err
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	return dec.Decode(v)
}

// check validates the mapping and prepares it for use.
func (m *Mapping) check() error {
	var errs []error
	by := map[string]string{}
	for _, col := range slices.Sorted(maps.Keys(m.Columns)) {
		c := m.Columns[col]
		switch {
		case c.Name == "":
			errs = append(errs, fmt.Errorf("columns.%s: no SIS name", col))
		case !sisName.MatchString(c.Name):
			errs = append(errs, fmt.Errorf("columns.%s: %q is not an SIS name (upper case, NAME or NAME_ATTR)", col, c.Name))
		case by[c.Name] != "":
			errs = append(errs, fmt.Errorf("columns.%s: %s is already the column %s", col, c.Name, by[c.Name]))
		case len(c.Values) > 0 && (c.collection() || c.Name == KeyFLID || c.Name == KeyDay):
			errs = append(errs, fmt.Errorf("columns.%s: values translate a field's codes, not a key's or a collection's", col))
		}
		by[c.Name] = col
	}
	for _, k := range []string{KeyFLID, KeyDay} {
		if by[k] == "" {
			errs = append(errs, fmt.Errorf("columns: no column is %s (it is the key)", k))
		}
	}
	if len(m.TimeNames) > 0 && m.TimeLayout == "" {
		errs = append(errs, errors.New("times: names without a layout"))
	}
	m.times = map[string]bool{}
	for _, n := range m.TimeNames {
		m.times[n] = true
	}
	return errors.Join(errs...)
}

// column returns the incumbent column holding an SIS name, "" if none.
func (m *Mapping) column(name string) string {
	for col, c := range m.Columns {
		if c.Name == name {
			return col
		}
	}
	return ""
}

// compared returns the fields and collections the mapping compares, each
// sorted (the key columns left out; STATUS is a field).
func (m *Mapping) compared() (fields, colls []string) {
	for _, c := range m.Columns {
		switch {
		case c.Name == KeyFLID || c.Name == KeyDay:
		case c.collection():
			colls = append(colls, c.Name)
		default:
			fields = append(fields, c.Name)
		}
	}
	slices.Sort(fields)
	slices.Sort(colls)
	return fields, colls
}

// normalise is the form of a value that is compared: trimmed, translated
// (values, incumbent side only), a time as its minute, case folded. name
// is the SIS field or item child the value belongs to.
func (m *Mapping) normalise(name, v string, values map[string]string) string {
	if m.Trim {
		v = strings.TrimSpace(v)
	}
	if t, ok := values[v]; ok {
		v = t
	}
	if m.times[name] {
		v = m.canonicalTime(v)
	}
	if m.FoldCase {
		v = strings.ToUpper(v)
	}
	return v
}

// canonicalTime writes a time as the SIS body format writes it, ddMONyyHHmm
// (ddMONyy for a date), upper case, whether it is in that format already
// or in the incumbent's layout; a value neither reads is kept as it is,
// and differs.
func (m *Mapping) canonicalTime(v string) string {
	if t, dateOnly, err := sisxml.ParseBodyTime(v, time.UTC); err == nil {
		return bodyTime(t, dateOnly)
	}
	if m.TimeLayout != "" {
		if t, err := time.Parse(m.TimeLayout, v); err == nil {
			return bodyTime(t, false)
		}
	}
	return v
}

// bodyTime formats t as an SIS body time.
func bodyTime(t time.Time, dateOnly bool) string {
	s := strings.ToUpper(t.Format("02Jan06"))
	if dateOnly {
		return s
	}
	return s + t.Format("1504")
}

// operationDay reads an operation day as yyyy-mm-dd.
func operationDay(v string) (string, error) {
	v = strings.TrimSpace(v)
	if len(v) >= 10 {
		if t, err := time.Parse(time.DateOnly, v[:10]); err == nil {
			return t.Format(time.DateOnly), nil
		}
	}
	if t, err := time.Parse("20060102", v); err == nil {
		return t.Format(time.DateOnly), nil
	}
	if t, _, err := sisxml.ParseBodyTime(v, time.UTC); err == nil {
		return t.Format(time.DateOnly), nil
	}
	return "", fmt.Errorf("operation day %q: want yyyy-mm-dd, yyyymmdd or ddMONyy", v)
}
