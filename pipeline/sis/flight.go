package sis

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/msgx/msgx/pipeline/sis/sisxml"
)

// Flight statuses.
const (
	StatusActive  = "ACTIVE"
	StatusDeleted = "DELETED"
)

// Flight is the full state of one flight (a FLIGHT_SCHD row with its
// details).
type Flight struct {
	FLID string
	// OperationDay is the local date of SODT, yyyy-mm-dd; never changed once set.
	OperationDay string
	Status       string
	// Version grows by one with every message that changed the flight.
	Version   int64
	LastMsgID int64
	// Fields are the scalar fields as the wire carries them, by element name;
	// an attribute of a scalar element is the field ELEM_ATTR (FDIV_DDES). A
	// cleared field is absent. Fields msgx has no column for are kept too.
	Fields map[string]string
	// Collections are the variable-length collections by element name (ROUT,
	// ERUT, GTDT, ...), each item in message order (see Item).
	Collections map[string][]Item

	// raw holds collections as stored, still encoded: a message decodes only
	// the collections it changes. A name is in Collections or in raw, never
	// both.
	raw map[string]json.RawMessage
	// doc is the canonical encoding of Fields and Collections (stateJSON)
	// as stored.
	doc []byte
}

// Item is one element of a collection in the generic JSON shape msgx uses
// for message bodies: attributes as "@NAME", the element's own text as
// "#text", each child by name — a string for a plain child, an object for a
// child with attributes or children, an array when the name repeats.
type Item = map[string]any

// storedState is what the state column holds, read with the collections
// left encoded.
type storedState struct {
	Fields      map[string]string          `json:"fields"`
	Collections map[string]json.RawMessage `json:"collections"`
}

// stateJSON is the canonical encoding of the flight's fields and collections:
// {"fields":{…},"collections":{…}}, keys in order (encoding/json sorts map
// keys), so equal states encode equally. Collections still encoded are
// copied as they are: they were written by this same encoding.
func (f *Flight) stateJSON() ([]byte, error) {
	out := make([]byte, 0, 1024+len(f.doc))
	out = append(out, `{"fields":{`...)
	for i, k := range sortedKeys(f.Fields) {
		if i > 0 {
			out = append(out, ',')
		}
		out = appendJSONString(out, k)
		out = append(out, ':')
		out = appendJSONString(out, f.Fields[k])
	}
	out = append(out, `},"collections":{`...)
	names := make([]string, 0, len(f.Collections)+len(f.raw))
	for n := range f.Collections {
		names = append(names, n)
	}
	for n := range f.raw {
		names = append(names, n)
	}
	slices.Sort(names)
	for i, n := range names {
		if i > 0 {
			out = append(out, ',')
		}
		out = appendJSONString(out, n)
		out = append(out, ':')
		cb, err := f.collectionJSON(n)
		if err != nil {
			return nil, err
		}
		out = append(out, cb...)
	}
	return append(out, "}}"...), nil
}

// appendJSONString appends s as a JSON string exactly as encoding/json
// writes it (HTML characters and U+2028/U+2029 escaped, invalid UTF-8 as
// U+FFFD), without its reflection: the fields of every changed flight are
// encoded this way.
func appendJSONString(out []byte, s string) []byte {
	plain := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' || c >= 0x80 {
			plain = false
			break
		}
	}
	if plain {
		out = append(out, '"')
		out = append(out, s...)
		return append(out, '"')
	}
	b, _ := json.Marshal(s) // a string always marshals
	return append(out, b...)
}

// collectionJSON is the canonical encoding of one collection, nil when the
// flight has none of that name.
func (f *Flight) collectionJSON(name string) ([]byte, error) {
	if r, ok := f.raw[name]; ok {
		return r, nil
	}
	its, ok := f.Collections[name]
	if !ok {
		return nil, nil
	}
	return marshalJSON(its)
}

// field is the value of a scalar field, "" when f is nil or has none.
func (f *Flight) field(name string) string {
	if f == nil {
		return ""
	}
	return f.Fields[name]
}

func (f *Flight) clone() *Flight {
	c := *f
	c.Fields = maps.Clone(f.Fields)
	if c.Fields == nil {
		c.Fields = map[string]string{}
	}
	c.Collections = maps.Clone(f.Collections)
	if c.Collections == nil {
		c.Collections = map[string][]Item{}
	}
	c.raw = maps.Clone(f.raw)
	c.doc = nil
	return &c
}

// encode sets doc from the fields and collections.
func (f *Flight) encode() error {
	doc, err := f.stateJSON()
	if err != nil {
		return fmt.Errorf("sis: flight %s: %w", f.FLID, err)
	}
	f.doc = doc
	return nil
}

// unchanged reports whether f, encoded, has the state of old.
func unchanged(old, f *Flight) bool {
	return old != nil && old.Status == f.Status && bytes.Equal(old.doc, f.doc)
}

// collectionSeq names the sequence attribute of the known collections
// (GTDT GTNO="1"); collections without one are ordered by position only.
var collectionSeq = map[string]string{
	"ROUT": "RTNO", "ERUT": "RTNO", "GTDT": "GTNO", "PSDT": "PSNO", "CKDT": "CKNO",
	"CLDT": "CLNO", "CHDT": "CHNO", "ABTM": "ASNO", "CHOT": "CSNO",
	"DELY": "", "SRVT": "", "PSHT": "PSHN", "TIPT": "", "PORT": "", "VIPF": "",
}

// SequenceAttr names the sequence attribute of a known collection's items
// (GTDT: "GTNO"), "" for a collection ordered by position only or not known.
// Tools that match items of two versions of a collection key them by it.
func SequenceAttr(coll string) string { return collectionSeq[coll] }

// IsCollection reports whether an element named name is a known collection
// (one of the dictionary's collections).
func IsCollection(name string) bool { return isCollection(name) }

// isCollection reports whether an element named name is a known collection.
func isCollection(name string) bool {
	_, ok := collectionSeq[name]
	return ok
}

// value is the generic JSON shape of an element (see Item): its text when it
// has neither attributes nor children, an object otherwise.
func value(e *sisxml.Element) any {
	if len(e.Attrs) == 0 && len(e.Children) == 0 {
		return e.Text
	}
	return object(e)
}

// object is the generic JSON object of an element, whatever it holds.
func object(e *sisxml.Element) map[string]any {
	m := make(map[string]any, len(e.Attrs)+len(e.Children)+1)
	for _, a := range e.Attrs {
		m["@"+a.Name] = a.Value
	}
	if e.Text != "" {
		m["#text"] = e.Text
	}
	rep := repeatedNames(e)
	for _, c := range e.Children {
		if _, ok := rep[c.Name]; ok {
			arr, _ := m[c.Name].([]any)
			m[c.Name] = append(arr, value(c))
			continue
		}
		m[c.Name] = value(c)
	}
	return m
}

// repeatedNames returns the child names that occur more than once.
func repeatedNames(e *sisxml.Element) map[string]struct{} {
	if len(e.Children) < 2 {
		return nil
	}
	seen := map[string]int{}
	for _, c := range e.Children {
		seen[c.Name]++
	}
	out := map[string]struct{}{}
	for n, k := range seen {
		if k > 1 {
			out[n] = struct{}{}
		}
	}
	return out
}

// emptyElement reports whether an element carries nothing: no text, no
// attribute with a value, no children. <DELY></DELY> clears the collection.
func emptyElement(e *sisxml.Element) bool {
	if e.Text != "" || len(e.Children) > 0 {
		return false
	}
	for _, a := range e.Attrs {
		if a.Value != "" {
			return false
		}
	}
	return true
}

// items is the collection the elements make, empty elements left out.
func items(elems []*sisxml.Element) []Item {
	var out []Item
	for _, e := range elems {
		if emptyElement(e) {
			continue
		}
		out = append(out, object(e))
	}
	return out
}

// setScalar sets (or, when empty, clears) a scalar field from its element:
// its text under its name and each attribute as NAME_ATTR. A nil element
// clears the field and its attributes.
func setScalar(fields map[string]string, name string, e *sisxml.Element) {
	delete(fields, name)
	for k := range fields {
		if strings.HasPrefix(k, name+"_") {
			delete(fields, k)
		}
	}
	if e == nil {
		return
	}
	if e.Text != "" {
		fields[name] = e.Text
	}
	for _, a := range e.Attrs {
		if a.Value != "" {
			fields[name+"_"+a.Name] = a.Value
		}
	}
}

// setCollection replaces a collection; an empty one is removed.
func (f *Flight) setCollection(name string, its []Item) {
	delete(f.raw, name)
	if len(its) == 0 {
		delete(f.Collections, name)
		return
	}
	f.Collections[name] = its
}

// mergeRecord applies a schedule record (FLTR) to the flight: every element
// it carries replaces the field or collection of that name; what it does not
// carry is kept (a schedule message merges, it does not delete). FLID is the
// key, not a field. An element msgx does not know is kept: a plain one as a
// field, one that repeats or has children as a collection. It returns the
// collections the record carried.
func mergeRecord(f *Flight, rec *sisxml.Element) (colls []string) {
	byName := map[string][]*sisxml.Element{}
	var order []string
	for _, c := range rec.Children {
		if c.Name == "FLID" {
			continue
		}
		if _, ok := byName[c.Name]; !ok {
			order = append(order, c.Name)
		}
		byName[c.Name] = append(byName[c.Name], c)
	}
	for _, name := range order {
		elems := byName[name]
		if isCollection(name) || len(elems) > 1 || len(elems[0].Children) > 0 {
			f.setCollection(name, items(elems))
			colls = append(colls, name)
			continue
		}
		setScalar(f.Fields, name, elems[0])
	}
	return colls
}

// operationDay derives the local operation day (yyyy-mm-dd) of a schedule
// record: the date of SODT, or failing that of the SODT part of FFID
// (ALCD-FLNO-MVIN-SODT-FLIN).
func (p *Processor) operationDay(rec *sisxml.Element) (string, error) {
	sodt := rec.ChildText("SODT")
	if sodt == "" {
		if parts := strings.Split(rec.ChildText("FFID"), "-"); len(parts) == 5 {
			sodt = parts[3]
		}
	}
	if sodt == "" {
		return "", fmt.Errorf("no SODT (nor FFID) to derive the operation day from")
	}
	t, _, err := sisxml.ParseBodyTime(sodt, p.cfg.Location)
	if err != nil {
		return "", fmt.Errorf("SODT %q: %w", sodt, err)
	}
	return t.Format("2006-01-02"), nil
}

// sortedKeys returns a map's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
