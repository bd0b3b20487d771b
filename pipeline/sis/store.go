package sis

import (
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/msgx/msgx/store"
)

//go:embed sql
var sqlFS embed.FS

var queries = store.MustLoadQuerySet("sis", sqlFS, "sql")

// scalarColumns are the scalar fields with a column of their own in
// flight_schd, in the column order of the SQL (the column is the lower-case
// field name). Other fields go to its extra column.
var scalarColumns = strings.Fields(`FFID ALCD FLNO MVIN SODT FLTY FLIN ACFT RENO TRML MAXP STND
	TAOP TAFL TAID PHAG FHAG MHAG EXSC EXSR FTSS APPT BOTM CNCL COBT CTOT EGSR EGST EOBT FINT IEST
	LACL NAAT NEAT PADT PEDT REMC RUNW TOBT VIPP VIPR FDIV FDIV_DDES FDIV_DDIR FLAB FLAB_ARES FRET FRET_REID`)

var scalarColumn = func() map[string]bool {
	m := make(map[string]bool, len(scalarColumns))
	for _, c := range scalarColumns {
		m[c] = true
	}
	return m
}()

// detailTable is one of the detail tables: the collections it holds and the
// item keys it has columns for (in the column order of its SQL).
type detailTable struct {
	name  string // query suffix: InsertRoute, ReadRoute, DeleteRoute
	colls []string
	keys  []string
}

// detailTables are the nine detail tables of the seed and the generic one,
// which takes every other collection (its items whole, as JSON).
var detailTables = []detailTable{
	{"Route", []string{"ROUT", "ERUT"}, []string{"APCD", "SCAT", "SCDT"}},
	{"Gate", []string{"GTDT"}, []string{"GATE", "PGOT", "PGCT", "GOTM", "GCTM", "GTYP"}},
	{"Stand", []string{"PSDT"}, []string{"PSST", "STST", "STET"}},
	{"Checkin", []string{"CKDT"}, []string{"CHKC", "CCLS", "PCOT", "PCCT", "COTM", "CCTM", "CTYP"}},
	{"Carousel", []string{"CLDT"}, []string{"BELT", "BCLS", "PCOT", "PCCT", "COTM", "CCTM", "BTYP"}},
	{"Chute", []string{"CHDT"}, []string{"CHUT", "CCLS", "PCBT", "PCET", "CBTM", "CETM", "CTYP"}},
	{"Airbridge", []string{"ABTM"}, []string{"ABDG", "ABOP", "AOTM"}},
	{"Chocks", []string{"CHOT"}, []string{"CHTM", "CHID", "CHST"}},
	{"Delay", []string{"DELY"}, []string{"@CODE", "@STRT", "@DURA", "#text"}},
	{"Detail", nil, nil},
}

// tableOf returns the detail table of a collection.
func tableOf(coll string) *detailTable {
	for i := range detailTables {
		for _, c := range detailTables[i].colls {
			if c == coll {
				return &detailTables[i]
			}
		}
	}
	return &detailTables[len(detailTables)-1]
}

// flightStore reads and writes flight state in a transaction.
type flightStore struct {
	q store.Queries
	d store.Dialect
}

func newFlightStore(d store.Dialect) (flightStore, error) {
	q, err := queries.For(d)
	if err != nil {
		return flightStore{}, err
	}
	return flightStore{q: q, d: d}, nil
}

// list is a FLID list argument: an array on PostgreSQL, JSON on SQLite.
func (s flightStore) list(flids []string) any {
	if s.d == store.Postgres {
		return flids
	}
	b, _ := json.Marshal(flids) // []string always marshals
	return string(b)
}

// load reads the current state of the flights (from the state document),
// locking their rows; flights not stored are missing from the map. One query
// whatever the number of flights.
func (s flightStore) load(ctx context.Context, q store.Querier, flids []string) (map[string]*Flight, error) {
	rows, err := q.Query(ctx, s.q.Get("LoadFlights"), s.list(flids))
	if err != nil {
		return nil, fmt.Errorf("sis: load flights: %w", err)
	}
	defer rows.Close()
	out := make(map[string]*Flight, len(flids))
	for rows.Next() {
		f := &Flight{}
		var doc string
		if err := rows.Scan(&f.FLID, &f.OperationDay, &f.Status, &f.Version, &f.LastMsgID, &doc); err != nil {
			return nil, fmt.Errorf("sis: load flights: %w", err)
		}
		f.doc = []byte(doc)
		fields, colls, err := parseState(f.doc)
		if err != nil {
			return nil, fmt.Errorf("sis: flight %s: state: %w", f.FLID, err)
		}
		f.Fields, f.Collections, f.raw = fields, map[string][]Item{}, colls
		out[f.FLID] = f
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sis: load flights: %w", err)
	}
	return out, nil
}

// save returns the statements that store f (encoded), whose previous state
// is old (nil for a new flight): the whole flight_schd row, and for each
// collection that changed (see collectionChanges), its rows replaced.
func (s flightStore) save(f, old *Flight, changed []CollectionChange, now time.Time) []store.Stmt {
	args := make([]any, 0, 8+len(scalarColumns))
	query := "UpdateFlight"
	if old == nil {
		query = "UpsertFlight"
		args = append(args, f.FLID, f.OperationDay, f.Status, f.Version, f.LastMsgID, now)
	} else {
		args = append(args, f.FLID, f.Status, f.Version, f.LastMsgID, now)
	}
	extra := map[string]string{}
	for k, v := range f.Fields {
		if !scalarColumn[k] {
			extra[k] = v
		}
	}
	for _, c := range scalarColumns {
		if v, ok := f.Fields[c]; ok {
			args = append(args, v)
		} else {
			args = append(args, nil)
		}
	}
	args = append(args, s.jsonArg(extra), string(f.doc))
	stmts := []store.Stmt{{SQL: s.q.Get(query), Args: args}}

	for _, c := range changed {
		name := c.Name
		t := tableOf(name)
		if s.d == store.Postgres {
			stmts = append(stmts, s.replace(t, f.FLID, name, f.Collections[name]))
			continue
		}
		stmts = append(stmts, store.Stmt{SQL: s.q.Get("Delete" + t.name), Args: []any{f.FLID, name}})
		for pos, it := range f.Collections[name] {
			stmts = append(stmts, store.Stmt{SQL: s.q.Get("Insert" + t.name), Args: s.itemArgs(t, f.FLID, name, pos, it)})
		}
	}
	return stmts
}

// replace is the statement that replaces a collection's rows with its
// items on PostgreSQL: one statement whatever their number (a delete and
// an insert per item otherwise), the items' columns as arrays.
func (s flightStore) replace(t *detailTable, flid, coll string, its []Item) store.Stmt {
	ncols := len(t.keys) + 2 // seq, the keys, extra
	pos := make([]int32, len(its))
	cols := make([][]*string, ncols)
	for c := range cols {
		cols[c] = make([]*string, len(its))
	}
	for i, it := range its {
		pos[i] = int32(i)
		for c, v := range s.itemArgs(t, flid, coll, i, it)[3:] {
			if v, ok := v.(string); ok {
				cols[c][i] = &v
			}
		}
	}
	args := make([]any, 0, 3+ncols)
	args = append(args, flid, coll, pos)
	for _, c := range cols {
		args = append(args, c)
	}
	return store.Stmt{SQL: s.q.Get("Replace" + t.name), Args: args}
}

// setStatus returns the statement that changes only a flight's status and
// version (FDEL: the detail rows stay as they were).
func (s flightStore) setStatus(f *Flight, now time.Time) store.Stmt {
	return store.Stmt{SQL: s.q.Get("SetStatus"), Args: []any{f.FLID, f.Status, f.Version, f.LastMsgID, now, string(f.doc)}}
}

// itemArgs splits an item into the table's columns: the sequence attribute,
// the keys with a column (when they are plain text), and the rest as JSON.
func (s flightStore) itemArgs(t *detailTable, flid, coll string, pos int, it Item) []any {
	rest := make(map[string]any, len(it))
	for k, v := range it {
		rest[k] = v
	}
	args := []any{flid, coll, pos}
	var seq any
	if attr := collectionSeq[coll]; attr != "" && t.keys != nil {
		if v, ok := rest["@"+attr].(string); ok {
			seq = v
			delete(rest, "@"+attr)
		}
	}
	args = append(args, seq)
	for _, k := range t.keys {
		if v, ok := rest[k].(string); ok {
			args = append(args, v)
			delete(rest, k)
		} else {
			args = append(args, nil)
		}
	}
	if t.keys == nil {
		// The generic table keeps the item whole.
		b, _ := marshalJSON(it) // the generic shape always marshals
		return append(args, string(b))
	}
	return append(args, s.jsonArg(rest))
}

// jsonArg is a JSON column value: NULL for an empty map.
func (s flightStore) jsonArg(m any) any {
	switch v := m.(type) {
	case map[string]string:
		if len(v) == 0 {
			return nil
		}
	case map[string]any:
		if len(v) == 0 {
			return nil
		}
	}
	b, _ := marshalJSON(m) // maps of strings and of the generic shape always marshal
	return string(b)
}

// Read returns the full state of the flights as stored in flight_schd and
// the detail tables (not from the state document): one query for the
// flights and one per detail table, whatever their number. Flights not
// stored are missing from the map.
func Read(ctx context.Context, q store.Querier, flids []string) (map[string]*Flight, error) {
	s, err := newFlightStore(q.Dialect())
	if err != nil {
		return nil, err
	}
	out := map[string]*Flight{}
	rows, err := q.Query(ctx, s.q.Get("ReadFlights"), s.list(flids))
	if err != nil {
		return nil, fmt.Errorf("sis: read flights: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		f := &Flight{Fields: map[string]string{}, Collections: map[string][]Item{}}
		cols := make([]*string, len(scalarColumns))
		var extra *string
		dest := []any{&f.FLID, &f.OperationDay, &f.Status, &f.Version, &f.LastMsgID}
		for i := range cols {
			dest = append(dest, &cols[i])
		}
		dest = append(dest, &extra)
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("sis: read flights: %w", err)
		}
		for i, c := range cols {
			if c != nil {
				f.Fields[scalarColumns[i]] = *c
			}
		}
		if extra != nil {
			var m map[string]string
			if err := json.Unmarshal([]byte(*extra), &m); err != nil {
				return nil, fmt.Errorf("sis: flight %s extra: %w", f.FLID, err)
			}
			for k, v := range m {
				f.Fields[k] = v
			}
		}
		out[f.FLID] = f
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sis: read flights: %w", err)
	}
	rows.Close()
	for i := range detailTables {
		if err := s.readDetails(ctx, q, &detailTables[i], flids, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (s flightStore) readDetails(ctx context.Context, q store.Querier, t *detailTable, flids []string, out map[string]*Flight) error {
	rows, err := q.Query(ctx, s.q.Get("Read"+t.name), s.list(flids))
	if err != nil {
		return fmt.Errorf("sis: read %s: %w", t.name, err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			flid, coll string
			pos        int
			seq, extra *string
		)
		cols := make([]*string, len(t.keys))
		dest := []any{&flid, &coll, &pos, &seq}
		for i := range cols {
			dest = append(dest, &cols[i])
		}
		dest = append(dest, &extra)
		if err := rows.Scan(dest...); err != nil {
			return fmt.Errorf("sis: read %s: %w", t.name, err)
		}
		it := Item{}
		if extra != nil {
			if err := json.Unmarshal([]byte(*extra), &it); err != nil {
				return fmt.Errorf("sis: flight %s %s: %w", flid, coll, err)
			}
		}
		if seq != nil {
			it["@"+collectionSeq[coll]] = *seq
		}
		for i, c := range cols {
			if c != nil {
				it[t.keys[i]] = *c
			}
		}
		if f := out[flid]; f != nil {
			f.Collections[coll] = append(f.Collections[coll], it)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("sis: read %s: %w", t.name, err)
	}
	return nil
}
