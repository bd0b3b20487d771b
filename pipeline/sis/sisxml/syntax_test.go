package sisxml

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestDecodeSyntaxVariants decodes one message written with every liberty
// XML allows and real senders take: CRLF, comments, odd indentation, META
// fields in another order with white space around them, spaces around '=',
// single quotes, attributes split over lines, namespace declarations and
// prefixed attributes on <MSG>, an element with attributes and text,
// CDATA, entity and character references, an empty element, mixed content
// and elements nobody defined.
func TestDecodeSyntaxVariants(t *testing.T) {
	payload := strings.Join([]string{
		`<?xml version="1.0" encoding="UTF-8"?>`,
		`<!-- captured 2021-10-05 -->`,
		`<MSG xmlns:xsi = "http://www.w3.org/2001/XMLSchema-instance" xsi:noNamespaceSchemaLocation='unisysaodbsis.xsd' xmlns="urn:sis">`,
		`  <META>`,
		`   <STYP>TRML</STYP><TYPE>FLOP</TYPE>  <DTTM> 20211005120000 </DTTM>`,
		"\t<SEQN>\t7\t</SEQN><!-- note --><SNDR>AODB</SNDR>",
		`  </META>`,
		`<FLOP>`,
		`    <FLID>42</FLID>`,
		`    <TRML MVIN="A" FLIN="I">T1</TRML>`,
		`    <REMK><![CDATA[a < b & "c"]]></REMK>`,
		`    <ROUT RTNO = "1" ><PORT>PEK</PORT></ROUT>`,
		`    <ROUT`,
		`       RTNO="2"`,
		`    ><PORT>SHA</PORT></ROUT>`,
		`    <XTRA unknown="yes"><DEEP>kept</DEEP></XTRA>`,
		`    <EMPT/>`,
		`    <MIX>  a <B/> b  </MIX>`,
		`    <ENT>&lt;&amp;&gt;&quot;&apos;&#x4E2D;&#25991;</ENT>`,
		"    <WIDE>\u3000\u00a0x\u00a0\u3000</WIDE>",
		`    <LINES>line1`,
		`line2</LINES>`,
		`</FLOP>`,
		`</MSG>`,
		``,
	}, "\r\n")
	m, err := Decode([]byte(payload), Options{})
	if err != nil {
		t.Fatal(err)
	}
	sh := DefaultLocation()
	want := &Message{
		Meta: Meta{Sender: "AODB", Seq: 7, Sent: time.Date(2021, 10, 5, 12, 0, 0, 0, sh), SentRaw: "20211005120000", Type: "FLOP", Subtype: "TRML"},
		RootAttrs: []Attr{
			{"xmlns:xsi", "http://www.w3.org/2001/XMLSchema-instance"},
			{"xsi:noNamespaceSchemaLocation", "unisysaodbsis.xsd"},
			{"xmlns", "urn:sis"},
		},
		Body: []*Element{{Name: "FLOP", Children: []*Element{
			{Name: "FLID", Text: "42"},
			{Name: "TRML", Attrs: []Attr{{"MVIN", "A"}, {"FLIN", "I"}}, Text: "T1"},
			{Name: "REMK", Text: `a < b & "c"`},
			{Name: "ROUT", Attrs: []Attr{{"RTNO", "1"}}, Children: []*Element{{Name: "PORT", Text: "PEK"}}},
			{Name: "ROUT", Attrs: []Attr{{"RTNO", "2"}}, Children: []*Element{{Name: "PORT", Text: "SHA"}}},
			{Name: "XTRA", Attrs: []Attr{{"unknown", "yes"}}, Children: []*Element{{Name: "DEEP", Text: "kept"}}},
			{Name: "EMPT"},
			{Name: "MIX", Text: "a  b", Children: []*Element{{Name: "B"}}},
			{Name: "ENT", Text: `<&>"'中文`},
			{Name: "WIDE", Text: "\u3000\u00a0x\u00a0\u3000"}, // not XML white space: kept
			{Name: "LINES", Text: "line1\nline2"},             // CRLF read as LF, as XML requires
		}}},
	}
	if !reflect.DeepEqual(m, want) {
		t.Errorf("got\n%s\nwant\n%s", Encode(m), Encode(want))
	}
	if m.Body[0].Child("TRML").Attr("FLIN") != "I" {
		t.Error("TRML FLIN")
	}
}

// TestDecodeMetaAfterBody: META is found wherever it is among MSG's
// children; the body is every other child, in order.
func TestDecodeMetaAfterBody(t *testing.T) {
	m, err := Decode([]byte(`<MSG><RECS>1</RECS><AIRL><ITOP>CA</ITOP></AIRL><META><SNDR>AODB</SNDR><SEQN>0</SEQN><DTTM>20211005120000</DTTM><TYPE>AIRL</TYPE><STYP>ADD</STYP></META></MSG>`), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Body) != 2 || m.Body[0].Name != "RECS" || m.Body[1].Name != "AIRL" || m.Meta.Kind() != "AIRL/ADD" || m.Meta.Seq != 0 {
		t.Errorf("got %+v", m)
	}
}

func TestDecodeLocation(t *testing.T) {
	msg := []byte(`<MSG><META><SNDR>AODB</SNDR><SEQN>1</SEQN><DTTM>20211005120000</DTTM><TYPE>FLOP</TYPE><STYP>GTDT</STYP></META><FLOP/></MSG>`)
	m, err := Decode(msg, Options{Location: time.UTC})
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2021, 10, 5, 12, 0, 0, 0, time.UTC); m.Meta.Sent != want {
		t.Errorf("Sent = %v, want %v", m.Meta.Sent, want)
	}
	m, err = Decode(msg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2021, 10, 5, 4, 0, 0, 0, time.UTC); !m.Meta.Sent.Equal(want) {
		t.Errorf("Sent = %v, want %v (UTC+8 by default)", m.Meta.Sent, want)
	}
}
