package sisxml

import (
	"runtime"
	"strings"
	"testing"
)

const testMeta = `<META><SNDR>AODB</SNDR><SEQN>1</SEQN><DTTM>20211005120000</DTTM><TYPE>FLOP</TYPE><STYP>REMK</STYP></META>`

func testMsg(body string) []byte {
	return []byte(`<?xml version="1.0" encoding="UTF-8"?><MSG>` + testMeta + body + `</MSG>`)
}

// TestDecodeHostile: inputs built to exhaust a parser fail as MALFORMED
// with a message that says why.
func TestDecodeHostile(t *testing.T) {
	t.Run("billion laughs", func(t *testing.T) {
		var b strings.Builder
		b.WriteString(`<?xml version="1.0"?><!DOCTYPE MSG [<!ENTITY lol "lol">`)
		b.WriteString(`<!ENTITY lol1 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">`)
		for i := 2; i <= 9; i++ {
			prev := "&lol" + string(rune('0'+i-1)) + ";"
			b.WriteString(`<!ENTITY lol` + string(rune('0'+i)) + ` "` + strings.Repeat(prev, 10) + `">`)
		}
		b.WriteString(`]><MSG>` + testMeta + `<FLOP><REMK>&lol9;</REMK></FLOP></MSG>`)
		requireClass(t, []byte(b.String()), Options{}, Malformed, "DOCTYPE")
	})
	t.Run("external entity", func(t *testing.T) {
		requireClass(t, []byte(`<?xml version="1.0"?><!DOCTYPE MSG [<!ENTITY xxe SYSTEM "file:///etc/passwd">]><MSG>`+testMeta+`<FLOP>&xxe;</FLOP></MSG>`), Options{}, Malformed, "DOCTYPE")
	})
	t.Run("entity use without declaration", func(t *testing.T) {
		requireClass(t, testMsg(`<FLOP>&lol9;</FLOP>`), Options{}, Malformed, "&lol9;")
	})
	t.Run("10000-deep nesting", func(t *testing.T) {
		p := testMsg(strings.Repeat("<A>", 10000) + strings.Repeat("</A>", 10000))
		requireClass(t, p, Options{}, Malformed, "deeper than 32")
	})
	t.Run("20 MiB attribute", func(t *testing.T) {
		p := testMsg(`<FLOP A="` + strings.Repeat("x", 20<<20) + `"/>`)
		requireClass(t, p, Options{}, Malformed, "over the limit of 16777216")
	})
	t.Run("1 MiB + 1 attribute", func(t *testing.T) {
		p := testMsg(`<FLOP><REMK A="` + strings.Repeat("x", 1<<20+1) + `"/></FLOP>`)
		requireClass(t, p, Options{}, Malformed, "attribute A of <REMK> is 1048577 bytes, over the limit of 1048576")
	})
	t.Run("1 MiB + 1 text", func(t *testing.T) {
		p := testMsg(`<FLOP><REMK>` + strings.Repeat("x", 1<<20+1) + `</REMK></FLOP>`)
		requireClass(t, p, Options{}, Malformed, "in MSG/FLOP/REMK: text is over the limit of 1048576")
	})
	t.Run("1 MiB + 1 text in CDATA pieces", func(t *testing.T) {
		piece := `<![CDATA[` + strings.Repeat("x", 64<<10) + `]]>`
		p := testMsg(`<FLOP><REMK>` + strings.Repeat(piece, 16) + "y" + `</REMK></FLOP>`)
		requireClass(t, p, Options{}, Malformed, "text is over the limit")
	})
	t.Run("100 001 attributes", func(t *testing.T) {
		p := testMsg(`<FLOP ` + strings.Repeat(`a="" `, 100_001) + `/>`)
		requireClass(t, p, Options{}, Malformed, "payload has 100003 '=' characters; more than 100000 attributes")
	})
	t.Run("200 001 elements", func(t *testing.T) {
		p := testMsg(`<FLOP>` + strings.Repeat("<A/>", 200_001) + `</FLOP>`)
		requireClass(t, p, Options{}, Malformed, "more than 200000 elements")
	})
}

func TestDecodeCustomLimits(t *testing.T) {
	p := testMsg(`<FLOP><REMK A="12345">12345678901234567890</REMK><X B=""><Y/></X></FLOP>`)
	if _, err := Decode(p, Options{}); err != nil {
		t.Fatalf("within default limits: %v", err)
	}
	requireClass(t, p, Options{MaxBytes: len(p) - 1}, Malformed, "over the limit")
	requireClass(t, p, Options{MaxDepth: 3}, Malformed, "deeper than 3")
	requireClass(t, p, Options{MaxElements: 10}, Malformed, "more than 10 elements")
	requireClass(t, p, Options{MaxAttrLen: 4}, Malformed, "attribute A of <REMK> is 5 bytes")
	requireClass(t, p, Options{MaxTextLen: 19}, Malformed, "in MSG/FLOP/REMK: text is over the limit of 19")
	requireClass(t, p, Options{MaxAttrs: 3}, Malformed, "payload has 4 '=' characters; more than 3 attributes")
	if _, err := Decode(p, Options{MaxBytes: len(p), MaxDepth: 4, MaxElements: 11, MaxAttrLen: 5, MaxTextLen: 20, MaxAttrs: 4}); err != nil {
		t.Fatalf("exactly at the limits: %v", err)
	}
}

// TestDecodeErrorLength: error messages quote the payload, but never much
// of it.
func TestDecodeErrorLength(t *testing.T) {
	long := strings.Repeat("N", 100_000)
	for name, p := range map[string][]byte{
		"root name":      []byte(`<` + long + `/>`),
		"end tag":        testMsg(`<FLOP></` + long + `>`),
		"SEQN":           []byte(strings.Replace(string(testMsg(`<FLOP/>`)), "<SEQN>1<", "<SEQN>"+long+"<", 1)),
		"DTTM":           []byte(strings.Replace(string(testMsg(`<FLOP/>`)), "20211005120000", long, 1)),
		"encoding label": []byte(`<?xml version="1.0" encoding="` + long + `"?><MSG/>`),
		"entity":         testMsg(`<FLOP>&` + long + `;</FLOP>`),
		"deep path":      testMsg(strings.Repeat("<"+long+">", 40)),
	} {
		_, err := Decode(p, Options{})
		if err == nil {
			t.Errorf("%s: decoded", name)
			continue
		}
		if n := len(err.Error()); n > 400 {
			t.Errorf("%s: error message is %d bytes: %.100s...", name, n, err)
		}
	}
}

// TestDecodeMemoryBounded: the payloads that make a parser allocate most
// per input byte, with as many elements and attributes as the defaults
// allow, allocate a bounded amount. A 3 MB tag of a="" attributes took
// 208 MiB (a 14 MB one 879 MiB) before the '=' count.
func TestDecodeMemoryBounded(t *testing.T) {
	for name, body := range map[string]string{
		"attributes in one tag": `<FLOP ` + strings.Repeat(`a="" `, 600_000) + `/>`,
		"allowed attributes":    `<FLOP ` + strings.Repeat(`a="" `, 99_000) + `/>`,
		"allowed elements":      `<FLOP>` + strings.Repeat(`<A b=""/>`, 99_000) + strings.Repeat(`<A/>`, 100_000) + `</FLOP>`,
		"text":                  `<FLOP>` + strings.Repeat(`<A>`+strings.Repeat("x", 1000)+`</A>`, 4_000) + `</FLOP>`,
		"comments":              `<FLOP>` + strings.Repeat(`<!---->`, 500_000) + `</FLOP>`,
	} {
		p := testMsg(body)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, _ = Decode(p, Options{})
		runtime.ReadMemStats(&after)
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 128<<20 {
			t.Errorf("%s: a %d-byte payload allocated %d MiB", name, len(p), alloc>>20)
		}
	}
}
