// Package compare is the cutover comparison of the SIS flight state (对拍):
// before msgx replaces the incumbent exchange, both run side by side (msgx
// in shadow mode) and the flights each holds are compared, flight by
// flight and field by field. It reads the incumbent's flight table (a
// MySQL/MariaDB or PostgreSQL table, or a CSV export) through a Mapping of
// its columns to SIS names, reads msgx's state with sis.QueryFlights,
// matches flights by FLID and operation day and reports every difference.
// It only reads, on both sides.
package compare

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/msgx/msgx/pipeline/sis"
	"github.com/msgx/msgx/store"
)

// maxDayQueries bounds the days ReadMsgx reads one by one; a longer span
// is read whole (Compare keeps the days asked for).
const maxDayQueries = 62

// ReadMsgx reads msgx's flights from its store (sis.QueryFlights: the
// flight tables, not the events), page by page: the flights of the days
// from to to when both are given (yyyy-mm-dd) and at most maxDayQueries
// days apart, day by day; every flight otherwise.
func ReadMsgx(ctx context.Context, db store.Querier, from, to string) ([]Flight, error) {
	days := []string{""}
	if from != "" && to != "" {
		first, err1 := time.Parse(time.DateOnly, from)
		last, err2 := time.Parse(time.DateOnly, to)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("compare: msgx flights: %w", err)
		}
		if last.Sub(first) <= maxDayQueries*24*time.Hour {
			days = nil
			for d := first; !d.After(last); d = d.AddDate(0, 0, 1) {
				days = append(days, d.Format(time.DateOnly))
			}
		}
	}
	var out []Flight
	for _, day := range days {
		after := ""
		for {
			page, err := sis.QueryFlights(ctx, db, sis.FlightFilter{Day: day, After: after, Limit: sis.MaxFlightPage})
			if err != nil {
				return nil, fmt.Errorf("compare: msgx flights: %w", err)
			}
			for _, f := range page.Flights {
				fl := Flight{FLID: f.FLID, OperationDay: f.OperationDay, Status: f.Status, Fields: f.Fields, Collections: f.Collections}
				if fl.Fields == nil {
					fl.Fields = map[string]string{}
				}
				fl.Fields[KeyStatus] = f.Status
				out = append(out, fl)
			}
			if page.Next == "" {
				break
			}
			after = page.Next
		}
	}
	return out, nil
}

// Options narrow a comparison.
type Options struct {
	// From and To bound the operation days compared (yyyy-mm-dd,
	// inclusive; "" for no bound), on both sides.
	From, To string
}

// Report is the result of a comparison.
type Report struct {
	Summary Summary `json:"summary"`
	// Flights are the flights on both sides that differ, in FLID order.
	Flights []FlightDiff `json:"flights"`
	// OnlyIncumbent and OnlyMsgx are the flights one side does not have.
	OnlyIncumbent []Missing `json:"only_incumbent"`
	OnlyMsgx      []Missing `json:"only_msgx"`
}

// Equal reports whether the two sides hold the same flights.
func (r *Report) Equal() bool {
	return len(r.Flights) == 0 && len(r.OnlyIncumbent) == 0 && len(r.OnlyMsgx) == 0
}

// Summary counts what was compared and found.
type Summary struct {
	Incumbent     int `json:"incumbent"` // flights of the incumbent compared
	Msgx          int `json:"msgx"`      // flights of msgx compared
	Matched       int `json:"matched"`   // on both sides
	Equal         int `json:"equal"`
	Differing     int `json:"differing"`
	OnlyIncumbent int `json:"only_incumbent"`
	OnlyMsgx      int `json:"only_msgx"`
	// FieldDiffs and CollectionDiffs count the differences of the
	// differing flights.
	FieldDiffs      int `json:"field_differences"`
	CollectionDiffs int `json:"collection_differences"`
	// DeletedLeftOut counts msgx's DELETED flights not compared (the
	// mapping has no STATUS column).
	DeletedLeftOut int      `json:"deleted_left_out"`
	Fields         []string `json:"fields"`      // the fields compared
	Collections    []string `json:"collections"` // the collections compared
	From           string   `json:"from,omitempty"`
	To             string   `json:"to,omitempty"`
}

// FlightDiff is a flight whose two versions differ.
type FlightDiff struct {
	FLID         string           `json:"flid"`
	OperationDay string           `json:"operation_day"`
	Row          int              `json:"incumbent_row"`
	Fields       []FieldDiff      `json:"fields,omitempty"`
	Collections  []CollectionDiff `json:"collections,omitempty"`
}

// FieldDiff is a scalar field that differs; a nil value is absent (NULL,
// empty, or cleared).
type FieldDiff struct {
	Name      string  `json:"name"`
	Label     string  `json:"label,omitempty"`
	Incumbent *string `json:"incumbent"`
	Msgx      *string `json:"msgx"`
}

// CollectionDiff is a difference in a collection: an item one side does
// not have (Child "", the values are the item's JSON) or one child of an
// item on both sides.
type CollectionDiff struct {
	Name  string `json:"name"`
	Label string `json:"label,omitempty"`
	// Item names the item: SEQ=value by its sequence attribute (GTNO=2)
	// when every item of both sides has a distinct one, #n (from 1) by
	// position otherwise.
	Item string `json:"item"`
	// Child is the item's child ("GATE", "@CODE", nested "X.Y", repeated
	// "X[1]"); "" for the whole item.
	Child     string  `json:"child,omitempty"`
	Incumbent *string `json:"incumbent"`
	Msgx      *string `json:"msgx"`
}

// Missing is a flight only one side has. OtherDay is the operation day
// the other side has the same FLID on, if it has.
type Missing struct {
	FLID         string `json:"flid"`
	OperationDay string `json:"operation_day"`
	Row          int    `json:"incumbent_row,omitempty"`
	OtherDay     string `json:"other_side_day,omitempty"`
}

type key struct{ flid, day string }

// Compare compares the incumbent's flights with msgx's through the mapping.
// The incumbent holding one flight (FLID and day) twice is an error.
func Compare(m *Mapping, incumbent, msgx []Flight, o Options) (*Report, error) {
	fields, colls := m.compared()
	rep := &Report{Flights: []FlightDiff{}, OnlyIncumbent: []Missing{}, OnlyMsgx: []Missing{},
		Summary: Summary{Fields: fields, Collections: colls, From: o.From, To: o.To}}
	if fields == nil {
		rep.Summary.Fields = []string{}
	}
	if colls == nil {
		rep.Summary.Collections = []string{}
	}
	inDays := func(day string) bool {
		return (o.From == "" || day >= o.From) && (o.To == "" || day <= o.To)
	}
	withStatus := m.column(KeyStatus) != ""

	inc := map[key]*Flight{}
	incDays := map[string]string{}
	for i := range incumbent {
		f := &incumbent[i]
		if !inDays(f.OperationDay) {
			continue
		}
		k := key{f.FLID, f.OperationDay}
		if prev := inc[k]; prev != nil {
			return nil, fmt.Errorf("compare: the incumbent has flight %s of %s twice (rows %d and %d)", f.FLID, f.OperationDay, prev.Row, f.Row)
		}
		inc[k] = f
		incDays[f.FLID] = f.OperationDay
	}
	ms := map[key]*Flight{}
	msDays := map[string]string{}
	for i := range msgx {
		f := &msgx[i]
		if !inDays(f.OperationDay) {
			continue
		}
		if !withStatus && f.Status == sis.StatusDeleted {
			rep.Summary.DeletedLeftOut++
			continue
		}
		ms[key{f.FLID, f.OperationDay}] = f
		msDays[f.FLID] = f.OperationDay
	}
	rep.Summary.Incumbent, rep.Summary.Msgx = len(inc), len(ms)

	for _, k := range sortedKeys(ms) {
		mf := ms[k]
		inf := inc[k]
		if inf == nil {
			miss := Missing{FLID: k.flid, OperationDay: k.day}
			if d := incDays[k.flid]; d != "" {
				miss.OtherDay = d
			}
			rep.OnlyMsgx = append(rep.OnlyMsgx, miss)
			continue
		}
		rep.Summary.Matched++
		d := FlightDiff{FLID: k.flid, OperationDay: k.day, Row: inf.Row}
		for _, name := range fields {
			d.Fields = append(d.Fields, m.diffField(name, inf, mf)...)
		}
		for _, name := range colls {
			d.Collections = append(d.Collections, m.diffCollection(name, inf.Collections[name], mf.Collections[name])...)
		}
		if len(d.Fields) == 0 && len(d.Collections) == 0 {
			rep.Summary.Equal++
			continue
		}
		rep.Summary.Differing++
		rep.Summary.FieldDiffs += len(d.Fields)
		rep.Summary.CollectionDiffs += len(d.Collections)
		rep.Flights = append(rep.Flights, d)
	}
	for _, k := range sortedKeys(inc) {
		if ms[k] != nil {
			continue
		}
		miss := Missing{FLID: k.flid, OperationDay: k.day, Row: inc[k].Row}
		if d := msDays[k.flid]; d != "" {
			miss.OtherDay = d
		}
		rep.OnlyIncumbent = append(rep.OnlyIncumbent, miss)
	}
	rep.Summary.OnlyIncumbent, rep.Summary.OnlyMsgx = len(rep.OnlyIncumbent), len(rep.OnlyMsgx)
	return rep, nil
}

// sortedKeys orders flight keys by FLID (numerically when both are
// numbers, as FLIDs usually are), then day.
func sortedKeys(m map[key]*Flight) []key {
	ks := slices.Collect(maps.Keys(m))
	slices.SortFunc(ks, func(a, b key) int {
		if c := compareFLID(a.flid, b.flid); c != 0 {
			return c
		}
		return strings.Compare(a.day, b.day)
	})
	return ks
}

func compareFLID(a, b string) int {
	x, errA := strconv.ParseInt(a, 10, 64)
	y, errB := strconv.ParseInt(b, 10, 64)
	if errA == nil && errB == nil {
		return cmp.Compare(x, y)
	}
	return strings.Compare(a, b)
}

// diffField compares one scalar field; an empty value is an absent one.
func (m *Mapping) diffField(name string, inc, ms *Flight) []FieldDiff {
	var values map[string]string
	if col := m.column(name); col != "" {
		values = m.Columns[col].Values
	}
	iv, iok := inc.Fields[name]
	mv, mok := ms.Fields[name]
	in, mn := "", ""
	if iok {
		in = m.normalise(name, iv, values)
	}
	if mok {
		mn = m.normalise(name, mv, nil)
	}
	if in == mn {
		return nil
	}
	return []FieldDiff{{Name: name, Label: sis.Label(name), Incumbent: present(iv, in), Msgx: present(mv, mn)}}
}

// present is the raw value to show, nil when its normal form is empty.
func present(raw, normal string) *string {
	if normal == "" {
		return nil
	}
	return &raw
}

// diffCollection compares one collection item by item, child by child.
func (m *Mapping) diffCollection(name string, inc, ms []sis.Item) []CollectionDiff {
	ik, mk, ok := m.itemKeys(name, inc, ms)
	if !ok {
		ik, mk = positions(len(inc)), positions(len(ms))
	}
	iIdx := map[string]int{}
	for i, k := range ik {
		iIdx[k] = i
	}
	mIdx := map[string]int{}
	for i, k := range mk {
		mIdx[k] = i
	}
	order := append([]string(nil), mk...)
	for _, k := range ik {
		if _, ok := mIdx[k]; !ok {
			order = append(order, k)
		}
	}
	var out []CollectionDiff
	label := sis.Label(name)
	for _, k := range order {
		i, iok := iIdx[k]
		j, mok := mIdx[k]
		if !iok || !mok {
			d := CollectionDiff{Name: name, Label: label, Item: k}
			if iok {
				d.Incumbent = itemJSON(inc[i])
			} else {
				d.Msgx = itemJSON(ms[j])
			}
			out = append(out, d)
			continue
		}
		a, b := flatten(inc[i]), flatten(ms[j])
		paths := slices.Sorted(maps.Keys(a))
		for p := range b {
			if _, ok := a[p]; !ok {
				paths = append(paths, p)
			}
		}
		slices.Sort(paths)
		for _, p := range paths {
			leaf := leafName(p)
			av, aok := a[p]
			bv, bok := b[p]
			an, bn := "", ""
			if aok {
				an = m.normalise(leaf, av, nil)
			}
			if bok {
				bn = m.normalise(leaf, bv, nil)
			}
			if an != bn {
				out = append(out, CollectionDiff{Name: name, Label: label, Item: k, Child: p, Incumbent: present(av, an), Msgx: present(bv, bn)})
			}
		}
	}
	return out
}

// itemKeys names the items of both sides by their sequence attribute, if
// the collection has one and every item of each side has a distinct value.
func (m *Mapping) itemKeys(name string, inc, ms []sis.Item) (ik, mk []string, ok bool) {
	attr := sis.SequenceAttr(name)
	if attr == "" {
		return nil, nil, false
	}
	keys := func(its []sis.Item) ([]string, bool) {
		seen := map[string]bool{}
		var out []string
		for _, it := range its {
			v, _ := it["@"+attr].(string)
			if n, isNum := it["@"+attr].(json.Number); isNum {
				v = n.String()
			}
			v = strings.TrimSpace(v)
			if v == "" || seen[v] {
				return nil, false
			}
			seen[v] = true
			out = append(out, attr+"="+v)
		}
		return out, true
	}
	ik, ok1 := keys(inc)
	mk, ok2 := keys(ms)
	return ik, mk, ok1 && ok2
}

func positions(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "#" + strconv.Itoa(i+1)
	}
	return out
}

// flatten lists an item's values by path: "GATE", "@GTNO", "#text",
// "X.Y" for a nested child, "X[1]" for a repeated one.
func flatten(it sis.Item) map[string]string {
	out := map[string]string{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch v := v.(type) {
		case nil:
		case string:
			out[prefix] = v
		case map[string]any:
			for k, c := range v {
				p := k
				if prefix != "" {
					p = prefix + "." + k
				}
				walk(p, c)
			}
		case []any:
			for i, c := range v {
				walk(prefix+"["+strconv.Itoa(i)+"]", c)
			}
		default: // json.Number, bool
			out[prefix] = fmt.Sprint(v)
		}
	}
	walk("", map[string]any(it))
	return out
}

// leafName is the SIS name a path ends with ("X[1].@CODE" → "CODE").
func leafName(p string) string {
	if i := strings.LastIndexByte(p, '.'); i >= 0 {
		p = p[i+1:]
	}
	if i := strings.IndexByte(p, '['); i >= 0 {
		p = p[:i]
	}
	return strings.TrimPrefix(p, "@")
}

// itemJSON is an item as its JSON (keys sorted).
func itemJSON(it sis.Item) *string {
	b, err := json.Marshal(it)
	if err != nil {
		s := fmt.Sprint(it)
		return &s
	}
	s := string(b)
	return &s
}
