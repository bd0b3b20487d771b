package sisxml

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/text/encoding/simplifiedchinese"
	"golang.org/x/text/encoding/unicode"

	"github.com/msgx/msgx/pipeline/sis/traffic"
)

// FuzzDecode: no input makes Decode panic or fail with anything but an
// *Error of a known class, and whatever decodes survives Encode and Decode
// unchanged. The seed corpus (every captured message, its GBK and UTF-16
// forms, hostile shapes) runs as a normal test.
func FuzzDecode(f *testing.F) {
	for _, name := range traffic.Names() {
		p, _ := traffic.Read(name)
		f.Add(p)
	}
	small := string(testMsg(`<FLOP><FLID>1</FLID><TRML MVIN="A">T1</TRML></FLOP>`))
	gbk, _ := simplifiedchinese.GBK.NewEncoder().Bytes([]byte(strings.Replace(small, `encoding="UTF-8"`, `encoding="GBK"`, 1) + "中文"))
	utf16, _ := unicode.UTF16(unicode.LittleEndian, unicode.UseBOM).NewEncoder().Bytes([]byte(strings.Replace(small, `encoding="UTF-8"`, `encoding="UTF-16"`, 1)))
	f.Add(gbk)
	f.Add(utf16)
	for _, s := range []string{
		``,
		`<`,
		`<MSG/>`,
		`<?xml version="1.1"?><MSG/>`,
		`<!DOCTYPE MSG [<!ENTITY a "&b;&b;"><!ENTITY b "x">]><MSG>&a;</MSG>`,
		`<MSG>` + strings.Repeat(`<A>`, 40) + strings.Repeat(`</A>`, 40) + `</MSG>`,
		small + `</MSG></MSG>`,
		small + `<MSG/>`,
		strings.Replace(small, "<FLID>1</FLID>", "<FLID><![CDATA[1]]></FLID><!-- c --><?pi x?>", 1),
		strings.Replace(small, `encoding="UTF-8"`, `encoding="X-NONE"`, 1),
		"\xef\xbb\xbf" + small,
		"\xff\xfe\x00\x00" + small,
		`<a:MSG xmlns:a="u"><a:META/></a:MSG>`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		m, err := Decode(payload, Options{})
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || (e.Class != Malformed && e.Class != CodecError) || e.Err == nil {
				t.Fatalf("error %v (%T) is not a classified *Error", err, err)
			}
			return
		}
		out := Encode(m)
		back, err := Decode(out, Options{})
		if err != nil {
			t.Fatalf("encoded message does not decode: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(back, m) {
			t.Fatalf("round trip changed the message:\n%s", out)
		}
	})
}
