package sisxml

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/text/encoding"
	"golang.org/x/text/encoding/charmap"
	"golang.org/x/text/encoding/simplifiedchinese"
	"golang.org/x/text/encoding/unicode"

	"github.com/msgx/msgx/pipeline/sis/traffic"
)

const utf8Decl = `<?xml version="1.0" encoding="UTF-8"?>`

// transcode rewrites a captured (UTF-8) message in another encoding: the
// declaration is replaced by decl ("" drops it), then the whole text is
// encoded with enc (nil keeps UTF-8), and bom is put in front.
func transcode(t *testing.T, p []byte, decl string, enc encoding.Encoding, bom []byte) ([]byte, bool) {
	t.Helper()
	if !bytes.HasPrefix(p, []byte(utf8Decl)) {
		t.Fatalf("fixture does not start with %s", utf8Decl)
	}
	text := append([]byte(decl), p[len(utf8Decl):]...)
	if enc != nil {
		out, err := enc.NewEncoder().Bytes(text)
		if err != nil {
			return nil, false // a character the encoding cannot represent
		}
		text = out
	}
	return append(append([]byte{}, bom...), text...), true
}

// TestDecodeEncodings writes every captured message in each encoding real
// traffic carries and checks that it decodes to the same tree as the UTF-8
// original.
func TestDecodeEncodings(t *testing.T) {
	le := unicode.UTF16(unicode.LittleEndian, unicode.IgnoreBOM)
	be := unicode.UTF16(unicode.BigEndian, unicode.IgnoreBOM)
	variants := []struct {
		name string
		decl string
		enc  encoding.Encoding
		bom  []byte
		// all: every fixture is representable, so none may be skipped.
		all bool
	}{
		{"GBK", `<?xml version="1.0" encoding="GBK"?>`, simplifiedchinese.GBK, nil, false},
		{"gbk lower case, single quotes", `<?xml version='1.0' encoding='gbk'?>`, simplifiedchinese.GBK, nil, false},
		{"GB2312", `<?xml version="1.0" encoding="GB2312"?>`, simplifiedchinese.GBK, nil, false},
		{"GB18030", `<?xml version="1.0" encoding="GB18030"?>`, simplifiedchinese.GB18030, nil, true},
		{"UTF-16LE with BOM", `<?xml version="1.0" encoding="UTF-16"?>`, le, []byte{0xFF, 0xFE}, true},
		{"UTF-16BE with BOM", `<?xml version="1.0" encoding="UTF-16"?>`, be, []byte{0xFE, 0xFF}, true},
		{"UTF-16LE without BOM", `<?xml version="1.0" encoding="UTF-16LE"?>`, le, nil, true},
		{"UTF-16BE without BOM", `<?xml version="1.0" encoding="UTF-16BE"?>`, be, nil, true},
		{"UTF-8 with BOM", utf8Decl, nil, []byte{0xEF, 0xBB, 0xBF}, true},
		{"UTF-8 without declaration", ``, nil, nil, true},
		{"utf8 label", `<?xml version="1.0" encoding="utf8"?>`, nil, nil, true},
		// A layer that transcoded the text to UTF-8 but kept the declaration.
		{"UTF-16 declared, UTF-8 bytes", `<?xml version="1.0" encoding="UTF-16"?>`, nil, nil, true},
		// The byte order mark decides; the declaration is not consulted.
		{"UTF-8 BOM, GBK declared", `<?xml version="1.0" encoding="GBK"?>`, nil, []byte{0xEF, 0xBB, 0xBF}, true},
	}
	names := traffic.Names()
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			var done, nonASCII int
			for _, name := range names {
				orig, _ := traffic.Read(name)
				p, ok := transcode(t, orig, v.decl, v.enc, v.bom)
				if !ok {
					if v.all {
						t.Fatalf("%s: cannot be encoded in %s", name, v.name)
					}
					continue
				}
				want := decodeFixture(t, name)
				got, err := Decode(p, Options{})
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("%s: decoded tree differs from the UTF-8 original", name)
				}
				done++
				if !isASCII(orig) {
					nonASCII++
				}
			}
			// AIRL_ADD_1 and most reference data carry Chinese text.
			if nonASCII < 40 {
				t.Errorf("only %d messages with non-ASCII text checked (of %d)", nonASCII, done)
			}
		})
	}
}

func isASCII(p []byte) bool {
	for _, b := range p {
		if b >= 0x80 {
			return false
		}
	}
	return true
}

// TestDecodeGBKText checks the text itself, not just the equality with the
// UTF-8 original.
func TestDecodeGBKText(t *testing.T) {
	orig, _ := traffic.Read("AIRL_ADD_1.xml")
	p, _ := transcode(t, orig, `<?xml version="1.0" encoding="GBK"?>`, simplifiedchinese.GBK, nil)
	if bytes.Equal(p, orig) {
		t.Fatal("transcoding changed nothing")
	}
	m, err := Decode(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var chinese []string
	var walk func(e *Element)
	walk = func(e *Element) {
		if !isASCII([]byte(e.Text)) {
			chinese = append(chinese, e.Text)
		}
		for _, c := range e.Children {
			walk(c)
		}
	}
	for _, e := range m.Body {
		walk(e)
	}
	if len(chinese) == 0 {
		t.Fatal("no non-ASCII text decoded")
	}
	for _, s := range chinese {
		if !strings.Contains(string(orig), s) {
			t.Errorf("decoded text %q is not in the UTF-8 original", s)
		}
	}
}

func TestDecodeOtherDeclaredEncoding(t *testing.T) {
	p, _ := charmap.ISO8859_1.NewEncoder().Bytes([]byte(`<?xml version="1.0" encoding="ISO-8859-1"?><MSG><META><SNDR>AODB</SNDR><SEQN>1</SEQN><DTTM>20211005120000</DTTM><TYPE>AIRL</TYPE><STYP>ADD</STYP></META><AIRL><NAME>Société</NAME></AIRL></MSG>`))
	m, err := Decode(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Body[0].ChildText("NAME"); got != "Société" {
		t.Errorf("NAME = %q", got)
	}
}

func TestDecodeEncodingErrors(t *testing.T) {
	const rest = `<MSG><META><SNDR>A</SNDR><SEQN>1</SEQN><DTTM>20211005120000</DTTM><TYPE>FLOP</TYPE><STYP>GTDT</STYP></META><FLOP/></MSG>`
	t.Run("unknown declared encoding", func(t *testing.T) {
		requireClass(t, []byte(`<?xml version="1.0" encoding="X-MARTIAN"?>`+rest), Options{}, CodecError, `"X-MARTIAN"`)
	})
	t.Run("replacement-only encoding", func(t *testing.T) {
		requireClass(t, []byte(`<?xml version="1.0" encoding="ISO-2022-KR"?>`+rest), Options{}, CodecError, `"ISO-2022-KR"`)
	})
	t.Run("UTF-32", func(t *testing.T) {
		p, _ := unicode.UTF16(unicode.LittleEndian, unicode.IgnoreBOM).NewEncoder().Bytes([]byte(rest))
		requireClass(t, append([]byte{0xFF, 0xFE, 0, 0}, p...), Options{}, CodecError, "UTF-32")
	})
	t.Run("invalid UTF-8", func(t *testing.T) {
		requireClass(t, []byte(strings.Replace(rest, "<SNDR>A<", "<SNDR>\xff\xfe<", 1)), Options{}, Malformed, "UTF-8")
	})
	t.Run("lone surrogate in UTF-16", func(t *testing.T) {
		p, _ := unicode.UTF16(unicode.LittleEndian, unicode.IgnoreBOM).NewEncoder().Bytes([]byte(strings.Replace(rest, "<SNDR>A<", "<SNDR>AB<", 1)))
		i := bytes.Index(p, []byte{'B', 0})
		p[i], p[i+1] = 0x00, 0xD8 // U+D800, a high surrogate with no low one
		requireClass(t, append([]byte{0xFF, 0xFE}, p...), Options{}, Malformed, "not valid UTF-16: 1 invalid byte sequence(s)")
	})
	t.Run("odd UTF-16", func(t *testing.T) {
		p, _ := unicode.UTF16(unicode.BigEndian, unicode.IgnoreBOM).NewEncoder().Bytes([]byte(rest))
		requireClass(t, append([]byte{0xFE, 0xFF}, p[:len(p)-1]...), Options{}, Malformed, "not valid UTF-16")
	})
}

// TestDecodeAlreadyUTF8: a message read from a text column is UTF-8 even
// when its declaration still says GBK; the option says so.
func TestDecodeAlreadyUTF8(t *testing.T) {
	orig, _ := traffic.Read("AIRL_ADD_1.xml")
	p, _ := transcode(t, orig, `<?xml version="1.0" encoding="GBK"?>`, nil, nil)
	want := decodeFixture(t, "AIRL_ADD_1.xml")
	got, err := Decode(p, Options{AlreadyUTF8: true})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Error("AlreadyUTF8: tree differs from the UTF-8 original")
	}
	// Without the option the declaration is believed: here the UTF-8
	// bytes are not valid GBK, which is caught; often they would be, and
	// the text would come out wrong.
	requireClass(t, p, Options{}, Malformed, "payload is not valid GBK")

	// UTF-16, with or without a byte order mark, is still UTF-16.
	for _, bom := range [][]byte{{0xFF, 0xFE}, nil} {
		p, _ := transcode(t, orig, `<?xml version="1.0" encoding="UTF-16"?>`, unicode.UTF16(unicode.LittleEndian, unicode.IgnoreBOM), bom)
		got, err := Decode(p, Options{AlreadyUTF8: true})
		if err != nil {
			t.Fatalf("UTF-16, BOM %x: %v", bom, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("UTF-16, BOM %x: tree differs from the UTF-8 original", bom)
		}
	}
}

// TestDecodeInvalidInDeclaredEncoding: bytes that are not GBK in a
// payload declaring GBK are MALFORMED, not silently replaced; a U+FFFD the
// sender really encoded is text.
func TestDecodeInvalidInDeclaredEncoding(t *testing.T) {
	head := `<?xml version="1.0" encoding="GBK"?><MSG>` + testMeta + `<FLOP><REMK>`
	requireClass(t, []byte(head+"ok \x81\x20 bad</REMK></FLOP></MSG>"), Options{}, Malformed, `not valid GBK: 1 invalid byte sequence(s), the first after "`+`K</STYP></META><FLOP><REMK>ok "`)
	// UTF-8 "中文" read as GBK is valid GBK (the wrong text, as
	// TestDecodeAlreadyUTF8 shows); a lone UTF-8 lead byte at the end is not.
	requireClass(t, []byte(head+"中文\xe4</REMK></FLOP></MSG>"), Options{}, Malformed, "not valid GBK")

	literal, _ := simplifiedchinese.GB18030.NewEncoder().Bytes([]byte("a\uFFFDb"))
	m, err := Decode(append(append([]byte(head), literal...), "</REMK></FLOP></MSG>"...), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Body[0].ChildText("REMK"); got != "a\uFFFDb" {
		t.Errorf("REMK = %q", got)
	}
}
