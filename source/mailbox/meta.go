package mailbox

import (
	"bytes"
	"encoding/xml"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// metaScanLimit bounds how far into a message MetaOf looks for its header.
const metaScanLimit = 64 << 10

// The sizes of the subsystem columns (VARCHAR(4), MEDIUMINT): a value that
// does not fit is left NULL rather than fail the insert of the message.
const (
	maxMetaText = 4
	maxMetaSeq  = 1<<23 - 1
)

// MetaOf reads the subsystem columns a legacy sender fills from the
// message's header (<MSG><META>): SNDR, SEQN, DTTM (yyyyMMddHHmmss, airport
// time in the table's zone), TYPE and STYP. It looks at the first 64 KiB
// only and never fails: what is missing, unreadable or larger than its
// column (over 4 characters, a SEQN above 8388607) stays zero (NULL), and
// the message is stored as it is either way.
func (t *Table) MetaOf(doc []byte) Meta {
	var m Meta
	d := xml.NewDecoder(bytes.NewReader(doc[:min(len(doc), metaScanLimit)]))
	d.Strict = false
	// The text is UTF-8 whatever its declaration says (TextEncoding).
	d.CharsetReader = func(_ string, r io.Reader) (io.Reader, error) { return r, nil }
	var path []string
	var text strings.Builder
	for {
		tok, err := d.Token()
		if err != nil {
			return m
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			path = append(path, tok.Name.Local)
			text.Reset()
			// The header comes first: any other child of MSG ends the search.
			if len(path) == 2 && (path[0] != "MSG" || tok.Name.Local != "META") {
				return m
			}
		case xml.CharData:
			text.Write(tok)
		case xml.EndElement:
			if len(path) == 3 {
				t.setMeta(&m, path[2], strings.TrimSpace(text.String()))
			}
			if len(path) == 2 {
				return m // </META>
			}
			if len(path) > 0 {
				path = path[:len(path)-1]
			}
		}
	}
}

func (t *Table) setMeta(m *Meta, field, v string) {
	fits := utf8.RuneCountInString(v) <= maxMetaText
	switch field {
	case "SNDR":
		if fits {
			m.Subsystem = v
		}
	case "SEQN":
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 && n <= maxMetaSeq {
			m.Sequence = n
		}
	case "DTTM":
		if at, err := time.ParseInLocation("20060102150405", v, t.zone); err == nil {
			m.DateSent = at
		}
	case "TYPE":
		if fits {
			m.Type = v
		}
	case "STYP":
		if fits {
			m.Subtype = v
		}
	}
}
