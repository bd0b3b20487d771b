package sis

import (
	"encoding/json"
	"testing"

	"github.com/msgx/msgx/pipeline/sis/sisxml"
	"github.com/msgx/msgx/pipeline/sis/traffic"
)

// TestJSONMatchesEncodingJSON: what the events, state documents and detail
// rows are written with is byte for byte encoding/json's output, for every
// bundled message and for the values that make encoders differ.
func TestJSONMatchesEncodingJSON(t *testing.T) {
	same := func(what string, v any, got []byte, err error) {
		t.Helper()
		want, werr := json.Marshal(v)
		if err != nil || werr != nil {
			t.Fatalf("%s: %v / %v", what, err, werr)
		}
		if string(got) != string(want) {
			t.Errorf("%s:\n got %s\nwant %s", what, got, want)
		}
	}
	odd := []string{"", "plain", `"quoted" \ back`, "<html>&amp;", "延误\u2028\u2029", "tab\tnl\n\x01", "bad \xff utf-8", "}]{[,:"}
	values := []any{nil, map[string]any(nil), map[string]any{}, []any(nil), []any{}, []Item(nil), []Item{}, map[string]string(nil),
		map[string]string{}, 42, true, 1.5}
	for _, s := range odd {
		values = append(values, s, map[string]any{s: s, "k": []any{s, map[string]any{s: s}}}, map[string]string{s: s, "a": s}, []Item{{s: s}, nil})
	}
	for i, v := range values {
		got, err := marshalJSON(v)
		same("value "+string(rune('a'+i%26)), v, got, err)
	}
	for _, name := range traffic.Names() {
		payload, err := traffic.Read(name)
		if err != nil {
			t.Fatal(err)
		}
		m, err := sisxml.Decode(payload, sisxml.Options{})
		if err != nil {
			t.Fatal(err)
		}
		records := []*sisxml.Element{nil}
		for _, b := range m.Body {
			records = append(records, b.All("FLTR")...)
			got, err := marshalJSON(object(b))
			same(name+" body object", object(b), got, err)
			its := items(b.Children)
			got, err = marshalJSON(its)
			same(name+" items", its, got, err)
		}
		for _, rec := range records {
			me := MsgEvent{Schema: SchemaMsg, MsgID: 12, Identity: "AODB|" + m.Meta.Kind(), Kind: m.Meta.Kind(),
				Meta: Meta{SNDR: m.Meta.Sender, SEQN: m.Meta.Seq, DTTM: m.Meta.SentRaw, TYPE: m.Meta.Type, STYP: m.Meta.Subtype, Sent: "2003-12-15T13:45:00+08:00"},
				FLID: "121112312", OperationDay: "2003-12-15", Status: StatusActive, StateVersion: 3, Body: msgBody(m, rec)}
			got, err := appendMsgEvent(nil, &me)
			same(name+" msg event", me, got, err)
		}
	}
	for _, s := range odd {
		h := SchdHead{Schema: SchemaSchd, FLID: s, OperationDay: s, Status: s, StateVersion: -1, LastMsgID: 1 << 62}
		same("schd head", h, appendSchdHead(nil, &h), nil)
	}
}

func BenchmarkMsgEvent(b *testing.B) {
	payload, err := traffic.Read("FLOP_GTDT_1.xml")
	if err != nil {
		b.Fatal(err)
	}
	m, err := sisxml.Decode(payload, sisxml.Options{})
	if err != nil {
		b.Fatal(err)
	}
	me := MsgEvent{Schema: SchemaMsg, MsgID: 12, Identity: "AODB|FLOP|GTDT|1243", Kind: m.Meta.Kind(), FLID: "121112312", Body: msgBody(m, nil)}
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := appendMsgEvent(make([]byte, 0, 1024), &me); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(me); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestVersionJSON: a version's changes and events are written byte for
// byte as encoding/json writes them (they are read back with it).
func TestVersionJSON(t *testing.T) {
	odd := []string{"", "plain", `"quoted" \ back`, "<html>&amp;", "延误\u2028\u2029", "tab\tnl\n\x01", "bad \xff utf-8"}
	cases := []Changes{{}, {Status: &FieldChange{After: "ACTIVE"}}}
	for _, s := range odd {
		cases = append(cases,
			Changes{Fields: []FieldChange{{Name: s, Before: s, After: "x"}, {Name: "b", Before: s}}},
			Changes{Status: &FieldChange{Before: s, After: s}, Collections: []CollectionChange{
				{Name: s, Before: json.RawMessage("null"), After: json.RawMessage(`[{"@RTNO":"1"}]`)}}},
			Changes{Collections: []CollectionChange{{Name: "GTDT", Before: json.RawMessage(`[{"a":"b"}]`), After: json.RawMessage("null")},
				{Name: s, Before: json.RawMessage(`[]`), After: json.RawMessage(`[{"k":"` + "v" + `"}]`)}}},
		)
	}
	for i, ch := range cases {
		want, err := json.Marshal(ch)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendChanges(nil, ch); string(got) != string(want) {
			t.Errorf("changes %d:\n got %s\nwant %s", i, got, want)
		}
	}
	for _, s := range odd {
		e := VersionEvent{ID: s, Target: s, Topic: "t", Type: "upsert"}
		want, _ := json.Marshal(e)
		if got := appendVersionEvent(nil, e); string(got) != string(want) {
			t.Errorf("event:\n got %s\nwant %s", got, want)
		}
	}
}
