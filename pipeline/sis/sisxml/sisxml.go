// Package sisxml decodes and encodes the XML messages of the Unisys AODB "SIS"
// interface: a META header (SNDR, SEQN, DTTM, TYPE, STYP) followed by a body
// whose shape depends on TYPE/STYP.
//
// The body is kept as a generic, ordered element tree rather than one Go struct
// per message type: SIS carries hundreds of optional fields and installations
// add their own, and nothing a sender wrote may be dropped (unknown elements
// travel in the events). Processors read the fields they know by name.
//
// # What is accepted
//
// Decode accepts any well-formed XML 1.0 document whose root is <MSG>, in the
// forms SIS senders and the layers between them produce:
//
//   - Encodings: UTF-8 with or without a byte order mark and with or without
//     a declaration; UTF-16 LE/BE with a byte order mark (or, without one,
//     recognised from the first characters "<?"); any encoding the XML
//     declaration names that golang.org/x/text knows, in particular GBK,
//     GB2312 and GB18030 (all read as GB18030, which contains the other two).
//     A byte order mark decides the encoding and the declaration is then not
//     consulted; so does Options.AlreadyUTF8. A UTF-16 declaration on a
//     payload that is not UTF-16 is read as UTF-8: a layer transcoded the
//     text and kept the declaration. Element text and attribute values are
//     always UTF-8 after decoding.
//   - Layout: CRLF or LF, any indentation, comments and processing
//     instructions (ignored), CDATA sections, the predefined entities and
//     character references, spaces around '=' (RTNO = "1"), single or double
//     quotes, elements with attributes and text (<TRML MVIN="A">T1</TRML>).
//   - Names are kept as written, without namespace processing: the
//     attributes of <MSG> come out as "xmlns:xsi" and
//     "xsi:noNamespaceSchemaLocation", an element a:B as "a:B".
//   - Order: META may stand anywhere among MSG's children and its fields in
//     any order; the body is every other child of MSG, in document order.
//     Elements nobody defined are kept, in META (Message.MetaExtra) as in
//     the body.
//   - Text: an element's character data, all pieces joined, with XML white
//     space (space, tab, CR, LF) trimmed at both ends; line ends read as LF.
//   - A repeated </MSG> after the root element is tolerated: real traffic
//     carries one.
//
// # What is rejected
//
// Every failure is an *Error. MALFORMED: not well-formed XML (including
// bytes invalid in the encoding, undefined entities, an attribute given
// twice in one element and an XML declaration anywhere but before the root
// element); a root other
// than <MSG>; anything but white space, comments and processing
// instructions after the root; no META or more than one; a META field
// (SNDR, SEQN, DTTM, TYPE, STYP) missing, empty, given twice or with
// attributes or children; SEQN not decimal digits fitting an int64; DTTM not
// a real yyyyMMddHHmmss time; no body element; text directly inside MSG or
// META (nothing in a Message could hold it, and it is not dropped
// silently). Any DOCTYPE is rejected: internal entity declarations are how
// entity-expansion ("billion laughs") attacks start, external ones read
// files, and SIS uses neither. The limits in Options (size, depth, element
// count, attribute and text length) are checked token by token while the
// tree is built, and the attribute count before parsing, so a hostile
// payload stops early and decoding one allocates at most about 100 MiB at
// the defaults (TestDecodeMemoryBounded). CODEC_ERROR: a declared encoding this codec does not
// know, or UTF-32; the payload may be fine and a newer codec may read it.
//
// Errors name what was wrong and where: the line and the element path
// ("line 12, in MSG/FLOP/REMK: text is over the limit of 1048576 bytes").
package sisxml

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
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
// character data (CDATA included, all pieces joined, XML white space trimmed
// at both ends) and its child elements in document order.
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
	// MetaAttrs are the attributes of <META>, if a sender wrote any.
	MetaAttrs []Attr
	// MetaExtra are the children of <META> other than SNDR, SEQN, DTTM,
	// TYPE and STYP, in order: installations add their own, and nothing a
	// sender wrote is dropped.
	MetaExtra []*Element
}

// Options bound decoding.
type Options struct {
	// Location is the airport time zone for DTTM and body times
	// (default Asia/Shanghai).
	Location *time.Location
	// MaxBytes (the payload as received), MaxDepth (element nesting, MSG
	// being 1), MaxElements, MaxAttrLen (one attribute value, in bytes),
	// MaxTextLen (one element's character data, in bytes) and MaxAttrs
	// bound the work a payload may cause; zero values take the Default...
	// constants. MaxAttrs bounds the '=' characters of the whole payload
	// (the declaration's and the text's count too), for every attribute
	// has one and they must be counted before the parser sees them.
	MaxBytes    int
	MaxDepth    int
	MaxElements int
	MaxAttrLen  int
	MaxTextLen  int
	MaxAttrs    int
	// AlreadyUTF8 says the payload is UTF-8 whatever its XML declaration
	// says, because the transport already transcoded it: text read from a
	// database text column (the mailbox's CLOB) or from a string API.
	// Without it, a payload declaring GBK that is in fact UTF-8 would fail
	// as not valid GBK or, rarely, decode into the wrong characters. A
	// UTF-16 payload (byte order mark, or "<?" in UTF-16) is still read as
	// UTF-16: the option overrides the declaration only.
	AlreadyUTF8 bool
}

// Default limits. They are far above anything real SIS traffic carries (the
// largest message, a daily SCHD download, is about 0.8 MB and 35 000
// elements per 1 000 flights) and low enough that a hostile payload fails
// fast with bounded memory.
const (
	DefaultMaxBytes    = 16 << 20 // 16 MiB
	DefaultMaxDepth    = 32
	DefaultMaxElements = 200_000
	DefaultMaxAttrLen  = 1 << 20 // 1 MiB
	DefaultMaxTextLen  = 1 << 20 // 1 MiB
	DefaultMaxAttrs    = 100_000
)

// withDefaults returns o with every zero (or negative) field replaced by its default.
func (o Options) withDefaults() Options {
	if o.Location == nil {
		o.Location = DefaultLocation()
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.MaxBytes, DefaultMaxBytes)
	def(&o.MaxDepth, DefaultMaxDepth)
	def(&o.MaxElements, DefaultMaxElements)
	def(&o.MaxAttrLen, DefaultMaxAttrLen)
	def(&o.MaxTextLen, DefaultMaxTextLen)
	def(&o.MaxAttrs, DefaultMaxAttrs)
	return o
}

func malformed(format string, args ...any) *Error {
	return classified(Malformed, fmt.Errorf(format, args...))
}

// maxErrorLen bounds an error's message: it quotes names and values from
// the payload, and a hostile payload must not turn into a megabyte
// dead-letter reason.
const maxErrorLen = 300

func classified(class Class, err error) *Error {
	if msg := err.Error(); len(msg) > maxErrorLen {
		err = errors.New(strings.ToValidUTF8(msg[:maxErrorLen], "") + "...")
	}
	return &Error{Class: class, Err: err}
}

// Decode parses a payload. Any failure is an *Error.
func Decode(payload []byte, opts Options) (*Message, error) {
	opts = opts.withDefaults()
	if len(payload) > opts.MaxBytes {
		return nil, malformed("payload is %d bytes, over the limit of %d", len(payload), opts.MaxBytes)
	}
	root, err := parseTree(payload, opts)
	if err != nil {
		return nil, err
	}
	return fromTree(root, opts.Location)
}

// metaFields are the META children read into Meta, in their usual order.
var metaFields = [...]string{"SNDR", "SEQN", "DTTM", "TYPE", "STYP"}

// fromTree checks the envelope (<MSG>, <META>, a body) and reads META.
// Whatever cannot be placed in a Message (text directly inside MSG or
// META, a META field given twice or with structure) is rejected rather
// than dropped.
func fromTree(root *Element, loc *time.Location) (*Message, error) {
	if root.Name != "MSG" {
		return nil, malformed("root element is <%s>, want <MSG>", root.Name)
	}
	if root.Text != "" {
		return nil, malformed("text directly inside <MSG>: %.40q", root.Text)
	}
	m := &Message{RootAttrs: root.Attrs}
	var meta *Element
	for _, c := range root.Children {
		if c.Name != "META" {
			m.Body = append(m.Body, c)
			continue
		}
		if meta != nil {
			return nil, malformed("MSG has more than one <META>")
		}
		meta = c
	}
	if meta == nil {
		return nil, malformed("MSG has no <META>")
	}
	if len(m.Body) == 0 {
		return nil, malformed("MSG has no body element after <META>")
	}
	if meta.Text != "" {
		return nil, malformed("text directly inside <META>: %.40q", meta.Text)
	}
	m.MetaAttrs = meta.Attrs

	var values [len(metaFields)]string
	var seen [len(metaFields)]bool
children:
	for _, c := range meta.Children {
		for i, name := range metaFields {
			if c.Name != name {
				continue
			}
			if seen[i] {
				return nil, malformed("META has more than one <%s>", name)
			}
			if len(c.Attrs) > 0 || len(c.Children) > 0 {
				return nil, malformed("META/%s has attributes or child elements; it must be text only", name)
			}
			seen[i], values[i] = true, c.Text
			continue children
		}
		m.MetaExtra = append(m.MetaExtra, c)
	}
	for i, name := range metaFields {
		if !seen[i] {
			return nil, malformed("META has no <%s>", name)
		}
		if values[i] == "" {
			return nil, malformed("META/%s is empty", name)
		}
	}
	m.Meta.Sender, m.Meta.SentRaw, m.Meta.Type, m.Meta.Subtype = values[0], values[2], values[3], values[4]
	var err error
	if m.Meta.Seq, err = parseSeq(values[1]); err != nil {
		return nil, malformed("META/SEQN %q: %w", values[1], err)
	}
	if m.Meta.Sent, err = ParseDTTM(m.Meta.SentRaw, loc); err != nil {
		return nil, malformed("META/DTTM: %w", err)
	}
	return m, nil
}

// parseSeq reads a SEQN: decimal digits only (no sign), fitting an int64.
func parseSeq(s string) (int64, error) {
	if !allDigits(s) {
		return 0, errors.New("not a non-negative integer")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, errors.New("out of range")
	}
	return n, nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// frame is an element being built, with its character data so far.
type frame struct {
	el *Element
	n  int // bytes of character data so far, leading white space not counted
	// Most elements have one piece of text: it is kept as a string, and
	// only a second piece (mixed content, CDATA next to text) starts a buffer.
	first string
	more  []byte
}

func (f *frame) add(t []byte) {
	switch {
	case f.n == 0:
		f.first = string(t)
	case f.more == nil:
		f.more = append([]byte(f.first), t...)
	default:
		f.more = append(f.more, t...)
	}
	f.n += len(t)
}

func (f *frame) text() string {
	if f.more != nil {
		return string(trimXMLSpace(f.more))
	}
	return strings.Trim(f.first, xmlSpace)
}

// parseTree reads the payload into an element tree, enforcing the limits
// token by token so that hostile input stops early.
func parseTree(payload []byte, opts Options) (*Element, error) {
	body, fromBOM, err := sniff(payload)
	if err != nil {
		return nil, err
	}
	// encoding/xml returns a start tag as one token with all its attributes,
	// some 250 bytes of memory each: a 16 MiB tag of a="" would take a
	// gigabyte before the loop below could count them. Every attribute has
	// an '=', so counting those first bounds the attributes the parser can
	// ever see. (No encoding x/text reads turns other bytes into '='.)
	if n := bytes.Count(body, []byte{'='}); n > opts.MaxAttrs {
		return nil, malformed("payload has %d '=' characters; more than %d attributes are not accepted, and each could be one", n, opts.MaxAttrs)
	}
	cs := &charsets{fixed: fromBOM || opts.AlreadyUTF8}
	d := xml.NewDecoder(bytes.NewReader(body))
	d.Strict = true
	d.CharsetReader = cs.reader

	var (
		stack    []frame
		root     *Element
		elements int
		declared bool
	)
	path := func() string {
		names := make([]string, len(stack))
		for i, f := range stack {
			names[i] = f.el.Name
		}
		return strings.Join(names, "/")
	}
	fail := func(format string, args ...any) *Error {
		line, _ := d.InputPos()
		where := path()
		if where == "" {
			return malformed("line %d: "+format, append([]any{line}, args...)...)
		}
		return malformed("line %d, in %s: "+format, append([]any{line, where}, args...)...)
	}
	for {
		tok, err := d.RawToken()
		if err == io.EOF {
			break
		}
		if err != nil {
			if cs.err != nil {
				return nil, cs.err
			}
			var se *xml.SyntaxError
			if errors.As(err, &se) {
				return nil, fail("%s", se.Msg) // fail names the line already
			}
			return nil, fail("%w", err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			if root != nil && len(stack) == 0 {
				return nil, fail("content after the root element: <%s>", qname(t.Name))
			}
			if len(stack) >= opts.MaxDepth {
				return nil, fail("elements nested deeper than %d", opts.MaxDepth)
			}
			if elements++; elements > opts.MaxElements {
				return nil, fail("more than %d elements", opts.MaxElements)
			}
			el := &Element{Name: qname(t.Name)}
			if len(t.Attr) > 0 {
				el.Attrs = make([]Attr, len(t.Attr))
				for i, a := range t.Attr {
					if len(a.Value) > opts.MaxAttrLen {
						return nil, fail("attribute %s of <%s> is %d bytes, over the limit of %d", qname(a.Name), el.Name, len(a.Value), opts.MaxAttrLen)
					}
					el.Attrs[i] = Attr{Name: qname(a.Name), Value: a.Value}
				}
				if name, dup := duplicateAttr(el.Attrs); dup {
					// XML forbids it and Attr would see only the first.
					return nil, fail("attribute %s given twice in <%s>", name, el.Name)
				}
			}
			if len(stack) == 0 {
				root = el
			} else {
				parent := stack[len(stack)-1].el
				parent.Children = append(parent.Children, el)
			}
			stack = append(stack, frame{el: el})
		case xml.EndElement:
			// RawToken does not match end tags to start tags; do it here.
			if len(stack) == 0 {
				if root != nil && qname(t.Name) == root.Name {
					// Real traffic (ABNR_ADD_1) closes the root twice;
					// nothing is lost by tolerating the repeat.
					continue
				}
				return nil, fail("unexpected end tag </%s>", qname(t.Name))
			}
			top := &stack[len(stack)-1]
			if name := qname(t.Name); name != top.el.Name {
				return nil, fail("end tag </%s> does not match <%s>", name, top.el.Name)
			}
			top.el.Text = top.text()
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) == 0 {
				if len(trimXMLSpace(t)) != 0 {
					if root == nil {
						return nil, fail("text before the root element")
					}
					return nil, fail("text after the root element")
				}
				continue
			}
			top := &stack[len(stack)-1]
			if top.n == 0 && len(trimXMLSpace(t)) == 0 {
				continue // leading white space is trimmed anyway
			}
			if top.n+len(t) > opts.MaxTextLen {
				return nil, fail("text is over the limit of %d bytes", opts.MaxTextLen)
			}
			top.add(t)
		case xml.Directive:
			return nil, fail("<!%s...> rejected: DOCTYPE and entity declarations are not accepted (they are how entity-expansion attacks start)", directiveWord(t))
		case xml.ProcInst:
			// encoding/xml switches encodings at any <?xml ...?>; only one
			// before the root element is a declaration.
			if strings.EqualFold(t.Target, "xml") {
				if root != nil || declared {
					return nil, fail("an XML declaration may only open the document")
				}
				declared = true
			}
		case xml.Comment:
		}
	}
	if len(stack) != 0 {
		return nil, fail("document ends inside <%s>", stack[len(stack)-1].el.Name)
	}
	if root == nil {
		return nil, malformed("no root element")
	}
	return root, nil
}

// duplicateAttr reports an attribute name that occurs twice.
func duplicateAttr(attrs []Attr) (string, bool) {
	if len(attrs) <= 8 {
		for i := range attrs {
			for j := range i {
				if attrs[i].Name == attrs[j].Name {
					return attrs[i].Name, true
				}
			}
		}
		return "", false
	}
	seen := make(map[string]bool, len(attrs))
	for _, a := range attrs {
		if seen[a.Name] {
			return a.Name, true
		}
		seen[a.Name] = true
	}
	return "", false
}

// trimXMLSpace trims XML white space (space, tab, CR, LF) only: an
// ideographic space or a no-break space is text.
func trimXMLSpace(b []byte) []byte { return bytes.Trim(b, xmlSpace) }

const xmlSpace = " \t\r\n"

// qname is a name as written: prefix:local, no namespace processing.
func qname(n xml.Name) string {
	if n.Space == "" {
		return n.Local
	}
	return n.Space + ":" + n.Local
}

// directiveWord returns the first word of a directive (DOCTYPE, ENTITY...),
// short enough to quote in an error.
func directiveWord(d xml.Directive) string {
	w := bytes.Fields(d)
	if len(w) == 0 {
		return ""
	}
	if len(w[0]) > 20 {
		return string(w[0][:20])
	}
	return string(w[0])
}

// Child returns the first child named name, or nil.
func (e *Element) Child(name string) *Element {
	if e == nil {
		return nil
	}
	for _, c := range e.Children {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// ChildText returns the text of the first child named name, or "".
func (e *Element) ChildText(name string) string {
	if c := e.Child(name); c != nil {
		return c.Text
	}
	return ""
}

// All returns the children named name, in order.
func (e *Element) All(name string) []*Element {
	if e == nil {
		return nil
	}
	var out []*Element
	for _, c := range e.Children {
		if c.Name == name {
			out = append(out, c)
		}
	}
	return out
}

// Attr returns the value of the attribute named name, or "".
func (e *Element) Attr(name string) string {
	if e == nil {
		return ""
	}
	for _, a := range e.Attrs {
		if a.Name == name {
			return a.Value
		}
	}
	return ""
}
