package sis

import (
	"encoding/json"
	"maps"
	"strings"
	"testing"

	"github.com/msgx/msgx/pipeline/sis/sisxml"
	"github.com/msgx/msgx/pipeline/sis/traffic"
)

// busyFlight is a flight every FLOP fixture (but FDEL) has updated, the
// state of a flight late in its day.
func busyFlight(t testing.TB) *Flight {
	t.Helper()
	f := &Flight{FLID: "1", Fields: map[string]string{"FFID": "CA-CA101-A-15DEC031345-D", "ALCD": "CA", "FLNO": "CA101", "MVIN": "A", "SODT": "15DEC031345"},
		Collections: map[string][]Item{}}
	for _, name := range traffic.Names() {
		if !strings.HasPrefix(name, "FLOP_") || strings.HasPrefix(name, "FLOP_FDEL") {
			continue
		}
		payload, err := traffic.Read(name)
		if err != nil {
			t.Fatal(err)
		}
		m, err := sisxml.Decode(payload, sisxml.Options{})
		if err != nil {
			t.Fatal(err)
		}
		b, _, err := flopBody(m)
		if err != nil {
			t.Fatal(err)
		}
		applyFlop(f, m.Meta.Subtype, b)
	}
	return f
}

// stateDocs are states as stateJSON writes them, with what makes a reader
// trip: escapes, HTML characters, non-ASCII text, brackets and quotes
// inside strings, nesting, empty parts.
func stateDocs(t testing.TB) [][]byte {
	flights := []*Flight{
		{Fields: map[string]string{}, Collections: map[string][]Item{}},
		{Fields: map[string]string{"FFID": "CA-CA101-A-12DEC031345-D", "STND": "101"}, Collections: map[string][]Item{}},
		{Fields: map[string]string{"REMC": `a "quoted" \ back\slash`, "X<Y": "a&b>c", "NOTE": "延误 原因\u2028", "CTRL": "tab\there\nline"},
			Collections: map[string][]Item{
				"GTDT": {{"@GTNO": "1", "GATE": "G28"}, {"@GTNO": "2", "GATE": "]}{[\"", "#text": "x\\"}},
				"SRVT": {{"SRVC": []any{"a", map[string]any{"@K": "v", "IN": "}"}}, "E": map[string]any{}}},
			}},
		{Fields: map[string]string{"A": ""}, Collections: map[string][]Item{"DELY": {{"@CODE": "81", "#text": "天气"}}}},
	}
	var out [][]byte
	for _, f := range append(flights, busyFlight(t)) {
		b, err := f.stateJSON()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

func TestParseStateMatchesEncodingJSON(t *testing.T) {
	for _, doc := range stateDocs(t) {
		fields, colls, ok := parseCanonicalState(doc)
		if !ok {
			t.Fatalf("canonical document not read by the fast path: %s", doc)
		}
		var want storedState
		if err := json.Unmarshal(doc, &want); err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(fields, want.Fields) {
			t.Errorf("fields %v, want %v (%s)", fields, want.Fields, doc)
		}
		if !maps.EqualFunc(colls, want.Collections, func(a, b json.RawMessage) bool { return string(a) == string(b) }) {
			t.Errorf("collections %s, want %s", colls, want.Collections)
		}
		// And what the document decodes to encodes back to it.
		f := &Flight{Fields: fields, Collections: map[string][]Item{}, raw: colls}
		again, err := f.stateJSON()
		if err != nil || string(again) != string(doc) {
			t.Errorf("re-encoded %s, want %s (%v)", again, doc, err)
		}
	}
}

func TestParseStateOtherLayouts(t *testing.T) {
	for _, doc := range []string{
		`{ "fields": {"A": "1"}, "collections": {"GTDT": [{"GATE": "G1"}]} }`,
		`{"collections":{"GTDT":[{"GATE":"G1"}]},"fields":{"A":"1"}}`,
		`{"fields":{"A":"1"},"collections":{"GTDT":[{"GATE":"G1"}]},"x":1}`,
	} {
		if _, _, ok := parseCanonicalState([]byte(doc)); ok {
			t.Errorf("fast path took a non-canonical document: %s", doc)
		}
		fields, colls, err := parseState([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		if fields["A"] != "1" || string(colls["GTDT"]) != `[{"GATE": "G1"}]` && string(colls["GTDT"]) != `[{"GATE":"G1"}]` {
			t.Errorf("%s read as %v %s", doc, fields, colls)
		}
	}
	for _, doc := range []string{``, `{`, `{"fields":{"A":1},"collections":{}}`, `{"fields":{"A":"1"},"collections":{"B":[}}`, `null x`} {
		if _, _, err := parseState([]byte(doc)); err == nil {
			t.Errorf("%q read without error", doc)
		}
	}
}

// FuzzParseState: on a valid JSON document the fast path, when it applies,
// reads what encoding/json reads; on anything it never panics.
func FuzzParseState(f *testing.F) {
	for _, doc := range stateDocs(f) {
		f.Add(doc)
	}
	f.Add([]byte(`{"fields":{"A":"\u00e9\""},"collections":{"B":["\"]"]}}`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		fields, colls, ok := parseCanonicalState(doc)
		if !ok || !json.Valid(doc) {
			return
		}
		var want storedState
		if err := json.Unmarshal(doc, &want); err != nil {
			// Valid JSON of another shape (a field that is not a string):
			// the fast path must not have taken it either.
			t.Fatalf("fast path read %q, encoding/json fails: %v", doc, err)
		}
		if !maps.Equal(fields, want.Fields) {
			t.Fatalf("fields %v, want %v", fields, want.Fields)
		}
		if !maps.EqualFunc(colls, want.Collections, func(a, b json.RawMessage) bool { return string(a) == string(b) }) {
			t.Fatalf("collections %s, want %s", colls, want.Collections)
		}
	})
}

func BenchmarkParseState(b *testing.B) {
	doc, err := busyFlight(b).stateJSON()
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(doc)))
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, ok := parseCanonicalState(doc); !ok {
				b.Fatal("not read")
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var st storedState
			if err := json.Unmarshal(doc, &st); err != nil {
				b.Fatal(err)
			}
		}
	})
}
