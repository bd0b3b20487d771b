package sisxml

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/msgx/msgx/pipeline/sis/traffic"
)

// TestEncodeRoundTripTraffic: every captured message, encoded and decoded
// again, gives the same Message.
func TestEncodeRoundTripTraffic(t *testing.T) {
	for _, name := range traffic.Names() {
		m := decodeFixture(t, name)
		out := Encode(m)
		if !bytes.HasPrefix(out, []byte(`<?xml version="1.0" encoding="UTF-8"?>`)) {
			t.Fatalf("%s: no declaration: %.60s", name, out)
		}
		back, err := Decode(out, Options{})
		if err != nil {
			t.Fatalf("%s: decoding the encoded message: %v\n%s", name, err, out)
		}
		if !reflect.DeepEqual(back, m) {
			t.Fatalf("%s: round trip changed the message:\n%s", name, out)
		}
	}
}

func TestEncodeEscapes(t *testing.T) {
	nasty := "a<b>&c\"d'e\tf\ng\rh 中文 ]]>"
	sh := DefaultLocation()
	m := &Message{
		Meta:      Meta{Sender: "MSGX", Seq: 12, Sent: time.Date(2021, 10, 5, 12, 0, 1, 0, sh), Type: "RQFD", Subtype: "NONE"},
		RootAttrs: []Attr{{"xmlns:xsi", "http://www.w3.org/2001/XMLSchema-instance"}, {"note", nasty}},
		MetaAttrs: []Attr{{"v", "2"}},
		MetaExtra: []*Element{{Name: "PRIO", Text: "1"}},
		Body: []*Element{{Name: "RQFD", Children: []*Element{
			{Name: "STDB", Text: "05OCT21"},
			{Name: "STDE", Text: "06OCT21"},
			{Name: "NOTE", Attrs: []Attr{{"k", nasty}}, Text: nasty},
			{Name: "EMPTY"},
		}}},
	}
	out := Encode(m)
	for _, want := range []string{
		"<DTTM>20211005120001</DTTM>", // from Sent, SentRaw being empty
		`<META v="2">`,
		"<PRIO>1</PRIO>",
		"<EMPTY/>",
		"a&lt;b&gt;&amp;c&#34;d&#39;e&#x9;f&#xA;g&#xD;h 中文 ]]&gt;",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	back, err := Decode(out, Options{})
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	m.Meta.SentRaw = "20211005120001" // what decoding fills in
	if !reflect.DeepEqual(back, m) {
		t.Errorf("round trip:\ngot  %+v\nwant %+v", back, m)
	}
}

// TestDecodeMetaExtra: attributes of META and children nobody defined are
// kept, not dropped.
func TestDecodeMetaExtra(t *testing.T) {
	m, err := Decode([]byte(`<MSG><META ver="2"><SNDR>AODB</SNDR><PRIO>1</PRIO><SEQN>3</SEQN><DTTM>20211005120000</DTTM><TYPE>FLOP</TYPE><STYP>GTDT</STYP><ORIG><HOST>a</HOST></ORIG></META><FLOP/></MSG>`), Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []*Element{{Name: "PRIO", Text: "1"}, {Name: "ORIG", Children: []*Element{{Name: "HOST", Text: "a"}}}}
	if !reflect.DeepEqual(m.MetaExtra, want) || !reflect.DeepEqual(m.MetaAttrs, []Attr{{"ver", "2"}}) {
		t.Errorf("MetaExtra %+v, MetaAttrs %+v", m.MetaExtra, m.MetaAttrs)
	}
}
