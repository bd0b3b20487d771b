package routepassport

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/msgx/msgx/pipeline/routepassport/geowkt"
	"github.com/msgx/msgx/pipeline/routepassport/schema"
)

// Error classes of a ContractError.
const (
	ClassSize     = "size"     // the record is larger than the limit
	ClassJSON     = "json"     // not well-formed JSON (or not UTF-8)
	ClassSchema   = "schema"   // well-formed, but violates route-passport.schema.json
	ClassGeometry = "geometry" // the geometry violates RFC 7946 or a limit
)

// ContractError says why a record was refused. It is never retried: the
// record goes to the dead-letter topic with these three fields in headers.
type ContractError struct {
	Class string
	// Path is the field path, e.g. "geometry.coordinates[0][3]"; "" is the
	// record as a whole.
	Path    string
	Message string
}

func (e *ContractError) Error() string {
	if e.Path == "" {
		return e.Class + ": " + e.Message
	}
	return e.Class + ": " + e.Path + ": " + e.Message
}

// Record is a parsed, valid input record.
type Record struct {
	RouteID       string
	RouteNameFull string
	RequestID     string
	TraceID       string
	CorrelationID string
	// CreatedAt is the producer's time, if it gave one.
	CreatedAt *time.Time
	Geometry  geowkt.Geometry
	// GeometryJSON is the record's geometry member as received.
	GeometryJSON json.RawMessage
	// Properties is the record's properties member (nil when absent or null).
	Properties json.RawMessage
	// Document is the whole record, unknown members included, as stored.
	Document json.RawMessage
}

// Parser validates records against the schema and converts their geometry.
type Parser struct {
	schema   *jsonschema.Schema
	maxBytes int
	limits   geowkt.Limits
}

var english = message.NewPrinter(language.English)

// NewParser compiles the embedded schema. maxBytes bounds a record (0: no
// bound); limits bound its geometry.
func NewParser(maxBytes int, limits geowkt.Limits) (*Parser, error) {
	s, err := compileSchema(false)
	if err != nil {
		return nil, err
	}
	return &Parser{schema: s, maxBytes: maxBytes, limits: limits}, nil
}

// compileSchema compiles the embedded schema. Unless full, its geometry
// subschema is reduced to the geometry's type: geowkt checks everything the
// full subschema says about coordinates (and more: ring closure, one
// dimension), with the same field paths, so validating positions twice would
// only cost time (half of the schema validation's). TestGeowktIsStricter
// keeps the two in step.
func compileSchema(full bool) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema.JSON))
	if err != nil {
		return nil, fmt.Errorf("routepassport: schema: %w", err)
	}
	if !full {
		defs, _ := doc.(map[string]any)["$defs"].(map[string]any)
		g, _ := defs["geometry"].(map[string]any)
		if g == nil {
			return nil, errors.New("routepassport: schema: no $defs.geometry")
		}
		delete(g, "allOf")
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	const url = "https://msgx.dev/schema/route-passport.schema.json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, fmt.Errorf("routepassport: schema: %w", err)
	}
	s, err := c.Compile(url)
	if err != nil {
		return nil, fmt.Errorf("routepassport: schema: %w", err)
	}
	return s, nil
}

// Parse validates payload and returns the record, or a *ContractError.
func (p *Parser) Parse(payload []byte) (*Record, error) {
	if p.maxBytes > 0 && len(payload) > p.maxBytes {
		return nil, &ContractError{Class: ClassSize, Message: fmt.Sprintf("record of %d bytes exceeds the limit of %d", len(payload), p.maxBytes)}
	}
	if !utf8.Valid(payload) {
		return nil, &ContractError{Class: ClassJSON, Message: "not valid UTF-8"}
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(payload))
	if err != nil {
		return nil, &ContractError{Class: ClassJSON, Message: "not valid JSON: " + err.Error()}
	}
	if err := p.schema.Validate(inst); err != nil {
		var ve *jsonschema.ValidationError
		if !errors.As(err, &ve) {
			return nil, fmt.Errorf("routepassport: validate: %w", err)
		}
		return nil, schemaError(ve)
	}
	obj := inst.(map[string]any) // the schema requires an object
	gv := obj["geometry"]
	g, err := geowkt.ConvertValue(gv, "geometry", p.limits)
	if err != nil {
		var ge *geowkt.Error
		if errors.As(err, &ge) {
			return nil, &ContractError{Class: ClassGeometry, Path: ge.Path, Message: ge.Reason}
		}
		return nil, err
	}
	// The database stores text and json: text refuses NUL characters, as
	// do ->> and a cast to jsonb of a json \u0000 escape, and
	// numbers beyond float64 are refused here for every member alike.
	if err := storable(inst, "", 0); err != nil {
		return nil, err
	}
	geometry, err := json.Marshal(gv)
	if err != nil {
		return nil, fmt.Errorf("routepassport: re-encode geometry: %w", err)
	}
	r := &Record{
		RouteID: str(obj["routeId"]), RouteNameFull: str(obj["routeNameFull"]),
		RequestID: str(obj["requestId"]), TraceID: str(obj["traceId"]), CorrelationID: str(obj["correlationId"]),
		Geometry: g, GeometryJSON: geometry,
		Document: payload,
	}
	// Stored as received: valid UTF-8 JSON whose strings and numbers
	// PostgreSQL's JSON functions accept (checked above). With escapes it is
	// encoded anew: json stores a lone surrogate escape, which
	// encoding/json reads as U+FFFD, but ->> and jsonb refuse it.
	if bytes.Contains(payload, []byte(`\u`)) {
		if r.Document, err = json.Marshal(inst); err != nil {
			return nil, fmt.Errorf("routepassport: re-encode record: %w", err)
		}
	}
	if props, ok := obj["properties"].(map[string]any); ok {
		if r.Properties, err = json.Marshal(props); err != nil {
			return nil, fmt.Errorf("routepassport: re-encode properties: %w", err)
		}
	}
	if s, ok := obj["createdAt"].(string); ok {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return nil, &ContractError{Class: ClassSchema, Path: "createdAt", Message: "not an RFC 3339 date-time: " + err.Error()}
		}
		r.CreatedAt = &t
	}
	return r, nil
}

// str is a member the schema made a string or null.
func str(v any) string {
	s, _ := v.(string)
	return s
}

// schemaError reports the deepest cause of a validation error: the member
// that actually failed, not the keywords that contain it.
func schemaError(ve *jsonschema.ValidationError) *ContractError {
	leaf := ve
	for len(leaf.Causes) > 0 {
		next := leaf.Causes[0]
		for _, c := range leaf.Causes[1:] {
			if len(c.InstanceLocation) > len(next.InstanceLocation) {
				next = c
			}
		}
		leaf = next
	}
	loc := leaf.InstanceLocation
	if req, ok := leaf.ErrorKind.(*kind.Required); ok && len(req.Missing) > 0 {
		loc = append(append([]string(nil), loc...), req.Missing[0])
		return &ContractError{Class: ClassSchema, Path: fieldPath(loc), Message: "missing"}
	}
	return &ContractError{Class: ClassSchema, Path: fieldPath(loc), Message: leaf.ErrorKind.LocalizedString(english)}
}

// fieldPath writes an instance location as "a.b[2].c".
func fieldPath(loc []string) string {
	var sb strings.Builder
	for _, tok := range loc {
		if _, err := strconv.Atoi(tok); err == nil {
			sb.WriteString("[" + tok + "]")
			continue
		}
		if sb.Len() > 0 {
			sb.WriteByte('.')
		}
		sb.WriteString(tok)
	}
	return sb.String()
}

// maxNesting bounds the nesting of a record's arrays and objects (PostgreSQL's
// JSON parser recurses on it).
const maxNesting = 64

// storable refuses what PostgreSQL's text (and json, when read) cannot hold: NUL
// characters in strings or member names, numbers outside float64, deeper
// nesting than maxNesting.
func storable(v any, path string, depth int) error {
	if depth > maxNesting {
		return &ContractError{Class: ClassSchema, Path: path, Message: fmt.Sprintf("nested deeper than %d levels", maxNesting)}
	}
	switch v := v.(type) {
	case string:
		if strings.IndexByte(v, 0) >= 0 {
			return &ContractError{Class: ClassSchema, Path: path, Message: "string contains a NUL character"}
		}
	case json.Number:
		_, err := strconv.ParseFloat(string(v), 64)
		if err != nil {
			return &ContractError{Class: ClassSchema, Path: path, Message: "number outside the float64 range"}
		}
	case []any:
		for i, e := range v {
			if err := storable(e, path+"["+strconv.Itoa(i)+"]", depth+1); err != nil {
				return err
			}
		}
	case map[string]any:
		for k, e := range v {
			p := k
			if path != "" {
				p = path + "." + k
			}
			if strings.IndexByte(k, 0) >= 0 {
				return &ContractError{Class: ClassSchema, Path: path, Message: "member name contains a NUL character"}
			}
			if err := storable(e, p, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}
