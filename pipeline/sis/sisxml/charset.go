package sisxml

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/encoding"
	"golang.org/x/text/encoding/htmlindex"
	"golang.org/x/text/encoding/simplifiedchinese"
	"golang.org/x/text/encoding/unicode"
)

// sniff looks at the first bytes for a byte order mark, or for the UTF-16
// form of "<?" (XML 1.0, appendix F), and returns the payload as UTF-8.
// fromBOM reports that the encoding was decided here, so the declaration's
// encoding is then not consulted.
func sniff(p []byte) (text []byte, fromBOM bool, err error) {
	switch {
	case bytes.HasPrefix(p, []byte{0xEF, 0xBB, 0xBF}):
		return p[3:], true, nil
	case bytes.HasPrefix(p, []byte{0x00, 0x00, 0xFE, 0xFF}), bytes.HasPrefix(p, []byte{0xFF, 0xFE, 0x00, 0x00}):
		return nil, false, classified(CodecError, errors.New("UTF-32 payloads are not supported"))
	case bytes.HasPrefix(p, []byte{0xFF, 0xFE}):
		return fromUTF16(p[2:], unicode.LittleEndian)
	case bytes.HasPrefix(p, []byte{0xFE, 0xFF}):
		return fromUTF16(p[2:], unicode.BigEndian)
	case bytes.HasPrefix(p, []byte{'<', 0, '?', 0}):
		return fromUTF16(p, unicode.LittleEndian)
	case bytes.HasPrefix(p, []byte{0, '<', 0, '?'}):
		return fromUTF16(p, unicode.BigEndian)
	}
	return p, false, nil
}

func fromUTF16(p []byte, order unicode.Endianness) ([]byte, bool, error) {
	// The byte order is the one sniffed; the caller removed the BOM.
	out, err := toUTF8(p, unicode.UTF16(order, unicode.IgnoreBOM))
	if err != nil {
		return nil, false, malformed("not valid UTF-16: %w", err)
	}
	return out, true, nil
}

// charsets answers encoding/xml's CharsetReader for the encoding named in
// the XML declaration. It remembers its failure so Decode can classify it.
type charsets struct {
	fixed bool // a byte order mark or Options.AlreadyUTF8 decided: UTF-8
	err   *Error
}

func (c *charsets) reader(label string, r io.Reader) (io.Reader, error) {
	if c.fixed {
		return r, nil
	}
	enc, err := lookup(label)
	if err != nil {
		c.err = classified(CodecError, err)
		return nil, err
	}
	if enc == nil {
		return r, nil
	}
	// The rest of the payload is in memory already (and within MaxBytes):
	// transcode it at once, so that bytes invalid in the declared encoding
	// can be told from text.
	rest, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	out, err := toUTF8(rest, enc)
	if err != nil {
		c.err = malformed("payload is not valid %s: %w", label, err)
		return nil, c.err
	}
	return bytes.NewReader(out), nil
}

// toUTF8 decodes p from enc to UTF-8. x/text decoders write U+FFFD for
// bytes invalid in their encoding rather than failing; more U+FFFD out than
// encoded U+FFFD in means the payload was not in enc, and its text would be
// silently lost.
func toUTF8(p []byte, enc encoding.Encoding) ([]byte, error) {
	out, err := enc.NewDecoder().Bytes(p)
	if err != nil {
		return nil, err
	}
	replaced := bytes.Count(out, []byte(string(utf8.RuneError)))
	if replaced == 0 {
		return out, nil
	}
	literal := 0
	if seq, err := enc.NewEncoder().Bytes([]byte(string(utf8.RuneError))); err == nil {
		literal = bytes.Count(p, seq)
	}
	if replaced > literal {
		i := bytes.Index(out, []byte(string(utf8.RuneError)))
		before := strings.ToValidUTF8(string(out[max(0, i-30):i]), "")
		return nil, fmt.Errorf("%d invalid byte sequence(s), the first after %q", replaced-literal, before)
	}
	return out, nil
}

// lookup maps a declared encoding label onto a decoder; nil means the bytes
// are UTF-8 already.
func lookup(label string) (encoding.Encoding, error) {
	switch strings.ToLower(strings.TrimSpace(label)) {
	case "utf-8", "utf8":
		return nil, nil
	case "utf-16", "utf-16le", "utf-16be", "ucs-2", "unicode":
		// A UTF-16 declaration on a payload that is not UTF-16 (no byte
		// order mark, "<?xml" in single bytes) was written by a layer that
		// transcoded the text and kept the declaration: it is UTF-8 now.
		return nil, nil
	case "gbk", "gb2312", "gb18030", "gb_2312-80", "csgb2312", "x-gbk", "cp936", "ms936", "windows-936", "euc-cn", "chinese", "iso-ir-58":
		// GB18030 is a superset of GBK, which is a superset of GB2312.
		return simplifiedchinese.GB18030, nil
	}
	enc, err := htmlindex.Get(label)
	if err != nil || enc == encoding.Replacement {
		return nil, fmt.Errorf("declared encoding %q is not supported", label)
	}
	return enc, nil
}
