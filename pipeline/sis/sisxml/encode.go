package sisxml

import (
	"bytes"
	"encoding/xml"
	"strconv"
)

// Encode writes m as UTF-8 XML with a declaration (for outbound requests and tests).
//
// META is written from m.Meta (DTTM as SentRaw when set, else Sent formatted
// as yyyyMMddHHmmss in its own location), then the body; elements are
// indented with tabs, attribute values and text escaped. Decode(Encode(m))
// gives m back for any m that Decode returned. Encode does not check m:
// names must be XML names, characters XML cannot carry are written as
// U+FFFD, and white space around a Text is trimmed when read back.
func Encode(m *Message) []byte {
	var b bytes.Buffer
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>` + "\n<MSG")
	writeAttrs(&b, m.RootAttrs)
	b.WriteString(">\n\t<META")
	writeAttrs(&b, m.MetaAttrs)
	b.WriteString(">\n")
	dttm := m.Meta.SentRaw
	if dttm == "" && !m.Meta.Sent.IsZero() {
		dttm = m.Meta.Sent.Format("20060102150405")
	}
	for _, f := range [...]struct{ name, value string }{
		{"SNDR", m.Meta.Sender},
		{"SEQN", strconv.FormatInt(m.Meta.Seq, 10)},
		{"DTTM", dttm},
		{"TYPE", m.Meta.Type},
		{"STYP", m.Meta.Subtype},
	} {
		b.WriteString("\t\t<" + f.name + ">")
		escape(&b, f.value)
		b.WriteString("</" + f.name + ">\n")
	}
	for _, e := range m.MetaExtra {
		writeElement(&b, e, 2)
	}
	b.WriteString("\t</META>\n")
	for _, e := range m.Body {
		writeElement(&b, e, 1)
	}
	b.WriteString("</MSG>\n")
	return b.Bytes()
}

func writeElement(b *bytes.Buffer, e *Element, depth int) {
	indent(b, depth)
	b.WriteString("<" + e.Name)
	writeAttrs(b, e.Attrs)
	if e.Text == "" && len(e.Children) == 0 {
		b.WriteString("/>\n")
		return
	}
	b.WriteByte('>')
	escape(b, e.Text)
	if len(e.Children) > 0 {
		b.WriteByte('\n')
		for _, c := range e.Children {
			writeElement(b, c, depth+1)
		}
		indent(b, depth)
	}
	b.WriteString("</" + e.Name + ">\n")
}

func writeAttrs(b *bytes.Buffer, attrs []Attr) {
	for _, a := range attrs {
		b.WriteString(" " + a.Name + `="`)
		escape(b, a.Value)
		b.WriteByte('"')
	}
}

func indent(b *bytes.Buffer, depth int) {
	for range depth {
		b.WriteByte('\t')
	}
}

// escape writes s as character data or an attribute value: xml.EscapeText
// escapes the quotes as well as white space other than the space.
func escape(b *bytes.Buffer, s string) {
	_ = xml.EscapeText(b, []byte(s)) // a bytes.Buffer does not fail
}
