package httpingress

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/encoding"
	"golang.org/x/text/encoding/htmlindex"
	"golang.org/x/text/encoding/unicode"

	"github.com/msgx/msgx/source/mailbox"
)

// errUnknownCharset: the request names a charset with no decoder (415).
var errUnknownCharset = errors.New("unsupported charset")

// decoded is a request body as the mailbox stores it.
type decoded struct {
	// text is UTF-8, its XML declaration (if any) saying so.
	text []byte
	// charset names what the body was transcoded from ("" when it was UTF-8).
	charset string
}

var (
	bomUTF8    = []byte{0xEF, 0xBB, 0xBF}
	bomUTF16LE = []byte{0xFF, 0xFE}
	bomUTF16BE = []byte{0xFE, 0xFF}
)

// isUTF8Label reports whether a charset label means UTF-8 or its ASCII subset.
func isUTF8Label(label string) bool {
	switch strings.ToLower(strings.TrimSpace(label)) {
	case "", "utf-8", "utf8", "us-ascii", "ascii":
		return true
	}
	return false
}

// lookupCharset finds the encoding of a label (WHATWG names: GB2312 is read
// as GBK, its superset).
func lookupCharset(label string) (encoding.Encoding, error) {
	enc, err := htmlindex.Get(strings.TrimSpace(label))
	if err != nil {
		return nil, fmt.Errorf("%w %q", errUnknownCharset, label)
	}
	return enc, nil
}

// toUTF8 reads body in the charset the Content-Type names, else the one its
// byte-order mark names, else by the mailbox's text rule
// (mailbox.TextEncoding: valid UTF-8 is UTF-8 whatever its XML declaration
// says, anything else is read as declared), else UTF-8. A body in another
// charset is transcoded losslessly — it must encode back to the same bytes —
// and its XML declaration is rewritten to say UTF-8.
func toUTF8(body []byte, ctCharset string) (decoded, error) {
	label := ctCharset
	if label == "" {
		switch {
		case bytes.HasPrefix(body, bomUTF16LE):
			label = "utf-16le"
		case bytes.HasPrefix(body, bomUTF16BE):
			label = "utf-16be"
		case bytes.HasPrefix(body, bomUTF8):
			label = "utf-8"
		default:
			// The mailbox's rule: valid UTF-8 is UTF-8, whatever its
			// declaration says; anything else is read as declared.
			label = mailbox.TextEncoding(body)
		}
	}
	if isUTF8Label(label) {
		if !utf8.Valid(body) {
			return decoded{}, errors.New("body is not UTF-8 text")
		}
		return decoded{text: mailbox.DeclareUTF8(body)}, nil
	}
	enc, err := lookupCharset(label)
	if err != nil {
		return decoded{}, err
	}
	raw := body
	if u16 := strings.HasPrefix(strings.ToLower(label), "utf-16"); u16 && (bytes.HasPrefix(raw, bomUTF16LE) || bytes.HasPrefix(raw, bomUTF16BE)) {
		// The mark decides the byte order, whatever the label says.
		if bytes.HasPrefix(raw, bomUTF16LE) {
			enc = unicode.UTF16(unicode.LittleEndian, unicode.IgnoreBOM)
		} else {
			enc = unicode.UTF16(unicode.BigEndian, unicode.IgnoreBOM)
		}
		raw = raw[2:]
	}
	text, err := enc.NewDecoder().Bytes(raw)
	if err != nil {
		return decoded{}, fmt.Errorf("body is not %s text: %w", label, err)
	}
	// Decoders replace what they cannot read; a body that does not encode
	// back to its bytes was not in that charset.
	if back, err := enc.NewEncoder().Bytes(text); err != nil || !bytes.Equal(back, raw) {
		return decoded{}, fmt.Errorf("body is not %s text", label)
	}
	name, _ := htmlindex.Name(enc)
	if name == "" {
		name = strings.ToLower(label)
	}
	return decoded{text: mailbox.DeclareUTF8(text), charset: name}, nil
}
