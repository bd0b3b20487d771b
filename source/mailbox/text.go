package mailbox

import (
	"bytes"
	"regexp"
	"unicode/utf8"
)

// xmlDeclEncoding finds the encoding pseudo-attribute of a leading XML
// declaration.
var xmlDeclEncoding = regexp.MustCompile(`^(\s*<\?xml\s[^>]*?\bencoding\s*=\s*)(["'])([A-Za-z0-9._:-]*)(["'])`)

// DeclaredEncoding returns the encoding named by a leading XML declaration
// ("" without one).
func DeclaredEncoding(doc []byte) string {
	m := xmlDeclEncoding.FindSubmatch(doc)
	if m == nil {
		return ""
	}
	return string(m[3])
}

// TextEncoding is the one rule by which a document without another label
// (an HTTP charset, a byte-order mark) is read, on every path into the
// mailbox: valid UTF-8 is UTF-8 ("utf-8") whatever its declaration says —
// a GBK message that went through a text column is UTF-8 declaring GBK, and
// GBK text is practically never valid UTF-8 — and anything else is in the
// encoding its declaration names ("" without a declaration).
func TextEncoding(doc []byte) string {
	if utf8.Valid(doc) {
		return "utf-8"
	}
	return DeclaredEncoding(doc)
}

// DeclareUTF8 returns doc with the encoding of its XML declaration set to
// UTF-8, when it names another. The mailbox column is text, so what is read
// from it is UTF-8 whatever the writer's declaration said; a parser that
// trusted a declaration of GBK would decode it twice.
func DeclareUTF8(doc []byte) []byte {
	m := xmlDeclEncoding.FindSubmatchIndex(doc)
	if m == nil || bytes.EqualFold(doc[m[6]:m[7]], []byte("UTF-8")) {
		return doc
	}
	out := make([]byte, 0, len(doc)+5)
	out = append(out, doc[:m[6]]...)
	out = append(out, "UTF-8"...)
	return append(out, doc[m[7]:]...)
}
