package sis

import (
	"encoding/json"
	"unicode/utf8"
)

// parseState reads a state document as stored: the fields decoded, the
// collections left encoded (a message decodes only those it changes).
//
// Every flight a message touches is read this way, and encoding/json spends
// most of its time on reflection and on checking the whole document. The
// document is one stateJSON wrote, so it is read here in that layout with
// one pass over its bytes; a document in any other layout (written by
// another version, or edited by hand) is read by encoding/json instead, so
// the result never depends on the fast path applying.
func parseState(doc []byte) (map[string]string, map[string]json.RawMessage, error) {
	if fields, colls, ok := parseCanonicalState(doc); ok {
		return fields, colls, nil
	}
	var st storedState
	if err := json.Unmarshal(doc, &st); err != nil {
		return nil, nil, err
	}
	return st.Fields, st.Collections, nil
}

// parseCanonicalState reads {"fields":{"K":"V",…},"collections":{"N":<JSON>,…}}
// exactly as stateJSON writes it (no white space, fields as strings);
// ok is false on anything else.
func parseCanonicalState(doc []byte) (fields map[string]string, colls map[string]json.RawMessage, ok bool) {
	const head, mid, tail = `{"fields":{`, `,"collections":{`, `}}`
	s := scanner{b: doc}
	if !s.literal(head) {
		return nil, nil, false
	}
	fields = make(map[string]string, 48)
	if !s.literal("}") {
		for {
			k, ok := s.str()
			if !ok || !s.literal(":") {
				return nil, nil, false
			}
			v, ok := s.str()
			if !ok {
				return nil, nil, false
			}
			fields[k] = v
			if s.literal("}") {
				break
			}
			if !s.literal(",") {
				return nil, nil, false
			}
		}
	}
	if !s.literal(mid) {
		return nil, nil, false
	}
	colls = map[string]json.RawMessage{}
	if !s.literal("}") {
		for {
			k, ok := s.str()
			if !ok || !s.literal(":") {
				return nil, nil, false
			}
			v, ok := s.composite()
			if !ok {
				return nil, nil, false
			}
			colls[k] = v
			if s.literal("}") {
				break
			}
			if !s.literal(",") {
				return nil, nil, false
			}
		}
	}
	if !s.literal("}") || s.i != len(s.b) {
		return nil, nil, false
	}
	return fields, colls, true
}

// scanner walks a JSON document written without white space.
type scanner struct {
	b []byte
	i int
}

// literal consumes lit if the document continues with it.
func (s *scanner) literal(lit string) bool {
	if len(s.b)-s.i < len(lit) || string(s.b[s.i:s.i+len(lit)]) != lit {
		return false
	}
	s.i += len(lit)
	return true
}

// str consumes a JSON string and returns its value. A string with escapes
// (rare: stateJSON writes text as it is, escaping only quotes, backslashes,
// control and HTML characters) or with invalid UTF-8 (which encoding/json
// reads as U+FFFD) is decoded by encoding/json.
func (s *scanner) str() (string, bool) {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return "", false
	}
	start := s.i
	escaped, ascii := false, true
	for j := s.i + 1; j < len(s.b); j++ {
		switch c := s.b[j]; {
		case c == '\\':
			escaped = true
			j++ // the escaped character is not the closing quote
		case c >= utf8.RuneSelf:
			ascii = false
		case c == '"':
			s.i = j + 1
			if !escaped && (ascii || utf8.Valid(s.b[start+1:j])) {
				return string(s.b[start+1 : j]), true
			}
			var v string
			if err := json.Unmarshal(s.b[start:s.i], &v); err != nil {
				return "", false
			}
			return v, true
		case c < 0x20:
			return "", false
		}
	}
	return "", false
}

// composite consumes a JSON array or object and returns its bytes. It
// matches brackets and skips strings; whether the rest is valid JSON is
// the database's business (the column is json, checked on every write).
func (s *scanner) composite() (json.RawMessage, bool) {
	if s.i >= len(s.b) || (s.b[s.i] != '[' && s.b[s.i] != '{') {
		return nil, false
	}
	start, depth := s.i, 0
	for j := s.i; j < len(s.b); j++ {
		switch s.b[j] {
		case '[', '{':
			depth++
		case ']', '}':
			if depth--; depth == 0 {
				s.i = j + 1
				return s.b[start:s.i:s.i], true
			}
		case '"':
			for j++; j < len(s.b) && s.b[j] != '"'; j++ {
				if s.b[j] == '\\' {
					j++
				}
			}
		}
	}
	return nil, false
}
