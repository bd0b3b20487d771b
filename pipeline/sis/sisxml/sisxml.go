// Package sisxml decodes and encodes the XML messages of the Unisys AODB "SIS"
// interface: a META header (SNDR, SEQN, DTTM, TYPE, STYP) followed by a body
// whose shape depends on TYPE/STYP.
//
// The body is kept as a generic, ordered element tree rather than one Go struct
// per message type: SIS carries hundreds of optional fields and installations
// add their own, and nothing a sender wrote may be dropped (unknown elements
// travel in the events). Processors read the fields they know by name.
package sisxml

import (
	"time"
)

// Class says why a payload could not be decoded. It maps one to one onto the
// inbox failure classes of the same name.
type Class string

// Decode failure classes.
const (
	// Malformed: not XML, no <MSG> root, no META, a META field missing or
	// unparsable (SEQN not an integer, DTTM not yyyyMMddHHmmss), no body, or
	// hostile input (entity expansion, depth or size limits exceeded).
	Malformed Class = "MALFORMED"
	// CodecError: well-formed, but something this codec cannot handle yet
	// (e.g. a declared encoding it does not know).
	CodecError Class = "CODEC_ERROR"
)

// Error is a classified decode failure.
type Error struct {
	Class Class
	Err   error
}

func (e *Error) Error() string { return string(e.Class) + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Attr is an attribute as written (no namespace processing on names).
type Attr struct {
	Name  string
	Value string
}

// Element is one XML element: its name, attributes in document order, its
// character data (CDATA included, surrounding white space trimmed) and its
// child elements in document order.
type Element struct {
	Name     string
	Attrs    []Attr
	Text     string
	Children []*Element
}

// Meta is the message header.
type Meta struct {
	Sender string // SNDR
	Seq    int64  // SEQN
	// Sent is DTTM (yyyyMMddHHmmss) read in the airport time zone.
	Sent    time.Time
	SentRaw string
	Type    string // TYPE
	Subtype string // STYP
}

// Kind is the dispatch key "TYPE/STYP", e.g. "FLOP/GTDT".
func (m Meta) Kind() string { return m.Type + "/" + m.Subtype }

// Message is a decoded SIS message.
type Message struct {
	Meta Meta
	// Body holds the children of <MSG> after <META>, in order: for SCHD, FLOP
	// and SCHS one element named after TYPE; for reference data a <RECS>
	// element followed by the records.
	Body []*Element
	// RootAttrs are the attributes of <MSG> (namespace declarations etc.).
	RootAttrs []Attr
}

// Options bound decoding.
type Options struct {
	// Location is the airport time zone for DTTM and body times
	// (default Asia/Shanghai).
	Location *time.Location
	// MaxBytes, MaxDepth, MaxElements and MaxAttrLen bound the work a payload
	// may cause; zero values take safe defaults.
	MaxBytes    int
	MaxDepth    int
	MaxElements int
	MaxAttrLen  int
}

// Decode parses a payload. Any failure is an *Error.
func Decode(payload []byte, opts Options) (*Message, error) {
	panic("sisxml: Decode not implemented yet")
}

// Encode writes m as UTF-8 XML with a declaration (for outbound requests and tests).
func Encode(m *Message) []byte {
	panic("sisxml: Encode not implemented yet")
}

// Child returns the first child named name, or nil.
func (e *Element) Child(name string) *Element {
	panic("sisxml: not implemented yet")
}

// ChildText returns the text of the first child named name, or "".
func (e *Element) ChildText(name string) string {
	panic("sisxml: not implemented yet")
}

// All returns the children named name, in order.
func (e *Element) All(name string) []*Element {
	panic("sisxml: not implemented yet")
}

// Attr returns the value of the attribute named name, or "".
func (e *Element) Attr(name string) string {
	panic("sisxml: not implemented yet")
}

// ParseBodyTime parses a body time, ddMONyyHHmm (23JAN210535) or ddMONyy
// (23JAN21), in loc. Month names are English, case-insensitive.
func ParseBodyTime(s string, loc *time.Location) (t time.Time, dateOnly bool, err error) {
	panic("sisxml: ParseBodyTime not implemented yet")
}
