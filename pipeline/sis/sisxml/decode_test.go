package sisxml

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/msgx/msgx/pipeline/sis/traffic"
)

// TestDecodeTraffic decodes every captured message and checks its META
// against the file name (TYPE_STYP_n.xml) and that it has a body.
func TestDecodeTraffic(t *testing.T) {
	names := traffic.Names()
	if len(names) != 172 {
		t.Fatalf("traffic has %d messages, want 172", len(names))
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			m := decodeFixture(t, name)
			parts := strings.Split(strings.TrimSuffix(name, ".xml"), "_")
			if got, want := m.Meta.Type+"_"+m.Meta.Subtype, parts[0]+"_"+parts[1]; got != want {
				// FDEL_FDEL_n may carry TYPE=FDEL or FLOP; the name says what was captured.
				t.Errorf("TYPE_STYP = %s, file name says %s", got, want)
			}
			if m.Meta.Sender == "" || m.Meta.SentRaw == "" || m.Meta.Sent.IsZero() {
				t.Errorf("META incomplete: %+v", m.Meta)
			}
			if m.Meta.Sent.Format("20060102150405") != m.Meta.SentRaw {
				t.Errorf("Sent %v does not format back to %s", m.Meta.Sent, m.Meta.SentRaw)
			}
			if len(m.Body) == 0 {
				t.Fatal("no body")
			}
		})
	}
}

func decodeFixture(t testing.TB, name string) *Message {
	t.Helper()
	p, err := traffic.Read(name)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Decode(p, Options{})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return m
}

// TestDecodeFLOPGTDT checks one message's tree in full detail: META, root
// attributes as written, repeated elements with attributes, accessors.
func TestDecodeFLOPGTDT(t *testing.T) {
	m := decodeFixture(t, "FLOP_GTDT_1.xml")
	sh := DefaultLocation()
	want := Meta{Sender: "AODB", Seq: 1243, Sent: time.Date(2002, 10, 10, 9, 3, 11, 0, sh), SentRaw: "20021010090311", Type: "FLOP", Subtype: "GTDT"}
	if m.Meta != want {
		t.Errorf("Meta = %+v, want %+v", m.Meta, want)
	}
	if m.Meta.Kind() != "FLOP/GTDT" {
		t.Errorf("Kind = %q", m.Meta.Kind())
	}
	wantRoot := []Attr{
		{"xmlns:xsi", "http://www.w3.org/2001/XMLSchema-instance"},
		{"xsi:noNamespaceSchemaLocation", "unisysaodbsis.xsd"},
	}
	if len(m.RootAttrs) != 2 || m.RootAttrs[0] != wantRoot[0] || m.RootAttrs[1] != wantRoot[1] {
		t.Errorf("RootAttrs = %+v, want %+v", m.RootAttrs, wantRoot)
	}
	if len(m.Body) != 1 || m.Body[0].Name != "FLOP" {
		t.Fatalf("Body = %+v", m.Body)
	}
	flop := m.Body[0]
	if flop.Text != "" {
		t.Errorf("FLOP text = %q, want empty (indentation only)", flop.Text)
	}
	if got := flop.ChildText("FLID"); got != "121112312" {
		t.Errorf("FLID = %q", got)
	}
	gates := flop.All("GTDT")
	if len(gates) != 3 {
		t.Fatalf("%d GTDT, want 3", len(gates))
	}
	for i, g := range gates {
		if got, want := g.Attr("GTNO"), string(rune('1'+i)); got != want {
			t.Errorf("GTDT[%d] GTNO = %q, want %q", i, got, want)
		}
	}
	if got := gates[0].ChildText("GOTM"); got != "15DEC031825" {
		t.Errorf("GTDT[0]/GOTM = %q", got)
	}
	if gates[1].Child("GOTM") != nil || gates[1].ChildText("GOTM") != "" {
		t.Error("GTDT[1] has no GOTM; Child must be nil and ChildText empty")
	}
	if flop.Attr("NOPE") != "" || flop.Child("NOPE") != nil || flop.All("NOPE") != nil {
		t.Error("missing names must give zero values")
	}
	var nilEl *Element
	if nilEl.Child("X") != nil || nilEl.ChildText("X") != "" || nilEl.All("X") != nil || nilEl.Attr("X") != "" {
		t.Error("accessors on a nil *Element must give zero values")
	}
}

func TestDecodeMalformed(t *testing.T) {
	const meta = `<META><SNDR>AODB</SNDR><SEQN>1</SEQN><DTTM>20211005120000</DTTM><TYPE>FLOP</TYPE><STYP>GTDT</STYP></META>`
	cases := []struct {
		name, payload, want string
	}{
		{"empty", ``, "no root element"},
		{"not xml", `hello`, "text before the root element"},
		{"unclosed", `<MSG>` + meta + `<FLOP>`, "ends inside"},
		{"mismatched", `<MSG>` + meta + `<FLOP></FLIP></MSG>`, "does not match"},
		{"root not MSG", `<MESSAGE>` + meta + `<FLOP/></MESSAGE>`, "root element is <MESSAGE>"},
		{"no META", `<MSG><FLOP/></MSG>`, "no <META>"},
		{"two META", `<MSG>` + meta + meta + `<FLOP/></MSG>`, "more than one <META>"},
		{"no body", `<MSG>` + meta + `</MSG>`, "no body"},
		{"no SNDR", `<MSG><META><SEQN>1</SEQN><DTTM>20211005120000</DTTM><TYPE>FLOP</TYPE><STYP>GTDT</STYP></META><FLOP/></MSG>`, "META has no <SNDR>"},
		{"empty STYP", strings.Replace(`<MSG>`+meta+`<FLOP/></MSG>`, "<STYP>GTDT</STYP>", "<STYP> </STYP>", 1), "META/STYP is empty"},
		{"SEQN letters", strings.Replace(`<MSG>`+meta+`<FLOP/></MSG>`, "<SEQN>1<", "<SEQN>12a<", 1), "META/SEQN"},
		{"SEQN negative", strings.Replace(`<MSG>`+meta+`<FLOP/></MSG>`, "<SEQN>1<", "<SEQN>-1<", 1), "META/SEQN"},
		{"SEQN overflow", strings.Replace(`<MSG>`+meta+`<FLOP/></MSG>`, "<SEQN>1<", "<SEQN>99999999999999999999<", 1), "META/SEQN"},
		{"DTTM short", strings.Replace(`<MSG>`+meta+`<FLOP/></MSG>`, "20211005120000", "202110051200", 1), "META/DTTM"},
		{"DTTM 31 Feb", strings.Replace(`<MSG>`+meta+`<FLOP/></MSG>`, "20211005120000", "20210231120000", 1), "META/DTTM"},
		{"SEQN twice", `<MSG>` + strings.Replace(meta, "</META>", "<SEQN>2</SEQN></META>", 1) + `<FLOP/></MSG>`, "more than one <SEQN>"},
		{"SEQN with structure", `<MSG>` + strings.Replace(meta, "<SEQN>1</SEQN>", "<SEQN>1<X/></SEQN>", 1) + `<FLOP/></MSG>`, "META/SEQN has attributes or child elements"},
		{"SNDR with attribute", `<MSG>` + strings.Replace(meta, "<SNDR>", `<SNDR a="1">`, 1) + `<FLOP/></MSG>`, "META/SNDR has attributes"},
		{"text in MSG", `<MSG>` + meta + `<FLOP/>stray</MSG>`, "text directly inside <MSG>"},
		{"text in META", `<MSG>` + strings.Replace(meta, "</META>", "stray</META>", 1) + `<FLOP/></MSG>`, "text directly inside <META>"},
		{"second declaration", `<?xml version="1.0"?><?xml version="1.0" encoding="GBK"?><MSG>` + meta + `<FLOP/></MSG>`, "XML declaration may only open"},
		{"declaration inside", `<MSG><?xml version="1.0" encoding="GBK"?>` + meta + `<FLOP/></MSG>`, "XML declaration may only open"},
		{"attribute twice", `<MSG>` + meta + `<FLOP><ROUT RTNO="1" RTNO="2"/></FLOP></MSG>`, "attribute RTNO given twice in <ROUT>"},
		{"attribute twice, many", `<MSG>` + meta + `<FLOP><X a="" b="" c="" d="" e="" f="" g="" h="" i="" j="" c=""/></FLOP></MSG>`, "attribute c given twice in <X>"},
		{"trailing element", `<MSG>` + meta + `<FLOP/></MSG><MSG/>`, "after the root element"},
		{"stray end tag", `<MSG>` + meta + `<FLOP/></MSG></FLOP>`, "unexpected end tag </FLOP>"},
		{"trailing text", `<MSG>` + meta + `<FLOP/></MSG>garbage`, "after the root element"},
		{"undefined entity", `<MSG>` + meta + `<FLOP>&bogus;</FLOP></MSG>`, "entity"},
		{"doctype", `<!DOCTYPE MSG []><MSG>` + meta + `<FLOP/></MSG>`, "DOCTYPE"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			requireClass(t, []byte(c.payload), Options{}, Malformed, c.want)
		})
	}
}

func requireClass(t *testing.T, payload []byte, opts Options, class Class, contains string) {
	t.Helper()
	m, err := Decode(payload, opts)
	if err == nil {
		t.Fatalf("decoded %+v, want a %s error", m, class)
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not an *Error", err, err)
	}
	if e.Class != class {
		t.Errorf("class %s, want %s (%v)", e.Class, class, err)
	}
	t.Log(err)
	if !strings.Contains(err.Error(), contains) {
		t.Errorf("error %q does not mention %q", err, contains)
	}
}
