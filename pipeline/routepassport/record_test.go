package routepassport

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"path"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/msgx/msgx/pipeline/routepassport/geowkt"
	"github.com/msgx/msgx/pipeline/routepassport/schema"
)

func newParser(t *testing.T) *Parser {
	t.Helper()
	p, err := NewParser(DefaultMaxRecordBytes, geowkt.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestValidExamples(t *testing.T) {
	p := newParser(t)
	files, _ := fs.Glob(schema.Examples, "examples/valid/*.json")
	if len(files) < 5 {
		t.Fatalf("only %d valid examples", len(files))
	}
	for _, f := range files {
		t.Run(path.Base(f), func(t *testing.T) {
			b, _ := fs.ReadFile(schema.Examples, f)
			r, err := p.Parse(b)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if r.RouteID == "" || r.RouteNameFull == "" || r.Geometry.WKT == "" {
				t.Fatalf("incomplete record %+v", r)
			}
		})
	}
}

func TestInvalidExamples(t *testing.T) {
	p := newParser(t)
	var want map[string]struct{ Class, Path string }
	b, _ := fs.ReadFile(schema.Examples, "examples/expected-errors.json")
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	files, _ := fs.Glob(schema.Examples, "examples/invalid/*.json")
	if len(files) != len(want) {
		t.Fatalf("%d invalid examples, %d expectations", len(files), len(want))
	}
	for _, f := range files {
		t.Run(path.Base(f), func(t *testing.T) {
			w, ok := want[path.Base(f)]
			if !ok {
				t.Fatalf("no expectation for %s", f)
			}
			b, _ := fs.ReadFile(schema.Examples, f)
			_, err := p.Parse(b)
			var ce *ContractError
			if !errors.As(err, &ce) {
				t.Fatalf("want a contract error, got %v", err)
			}
			if ce.Class != w.Class || ce.Path != w.Path || ce.Message == "" {
				t.Fatalf("got %q %q %q, want class %q path %q", ce.Class, ce.Path, ce.Message, w.Class, w.Path)
			}
			t.Logf("%s", ce)
		})
	}
}

func TestParseKeepsUnknownMembers(t *testing.T) {
	p := newParser(t)
	r, err := p.Parse([]byte(`{"routeId":"R-1","routeNameFull":"n","vendor":{"x":[1,2.50]},"geometry":{"type":"Point","coordinates":[1234567.891,2]},"properties":{"a":1}}`))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(r.Document, &doc); err != nil {
		t.Fatal(err)
	}
	if string(doc["vendor"]) != `{"x":[1,2.50]}` {
		t.Fatalf("vendor member: %s", doc["vendor"])
	}
	if r.Geometry.WKT != "POINT (1234567.891 2)" || r.Geometry.Type != "Point" || string(r.Properties) != `{"a":1}` {
		t.Fatalf("record %+v", r)
	}
}

func TestParseRefusals(t *testing.T) {
	p, err := NewParser(300, geowkt.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct{ name, in, class, path string }{
		{"too large", `{"routeId":"R","routeNameFull":"` + strings.Repeat("x", 400) + `","geometry":{"type":"Point","coordinates":[1,2]}}`, ClassSize, ""},
		{"not UTF-8", "{\"routeId\":\"R\xff\",\"routeNameFull\":\"n\",\"geometry\":{\"type\":\"Point\",\"coordinates\":[1,2]}}", ClassJSON, ""},
		{"NUL in unknown member", `{"routeId":"R","routeNameFull":"n","x":"a\u0000b","geometry":{"type":"Point","coordinates":[1,2]}}`, ClassSchema, "x"},
		{"huge number in properties", `{"routeId":"R","routeNameFull":"n","properties":{"v":[1e999]},"geometry":{"type":"Point","coordinates":[1,2]}}`, ClassSchema, "properties.v[0]"},
		{"huge coordinate", `{"routeId":"R","routeNameFull":"n","geometry":{"type":"Point","coordinates":[1e999,2]}}`, ClassGeometry, "geometry.coordinates[0]"},
		{"control character in routeId", `{"routeId":"R\n1","routeNameFull":"n","geometry":{"type":"Point","coordinates":[1,2]}}`, ClassSchema, "routeId"},
		{"geometry null", `{"routeId":"R","routeNameFull":"n","geometry":null}`, ClassSchema, "geometry"},
		{"nested too deep", `{"routeId":"R","routeNameFull":"n","x":` + strings.Repeat("[", 70) + strings.Repeat("]", 70) + `,"geometry":{"type":"Point","coordinates":[1,2]}}`, ClassSchema, "x" + strings.Repeat("[0]", 64)},
		{"ring of three", `{"routeId":"R","routeNameFull":"n","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[0,0]]]}}`, ClassGeometry, "geometry.coordinates[0]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := p.Parse([]byte(c.in))
			var ce *ContractError
			if !errors.As(err, &ce) || ce.Class != c.class || ce.Path != c.path {
				t.Fatalf("got %v, want class %s path %q", err, c.class, c.path)
			}
		})
	}
}

// The parser validates geometries with geowkt instead of the schema's
// geometry subschema: whatever geowkt accepts, the full schema accepts too.
func TestGeowktIsStricter(t *testing.T) {
	full, err := compileSchema(true)
	if err != nil {
		t.Fatal(err)
	}
	p := newParser(t)
	geometries := []string{
		`{"type":"Point","coordinates":[1,2]}`, `{"type":"Point","coordinates":[1,2,3]}`, `{"type":"Point","coordinates":[]}`,
		`{"type":"Point","coordinates":[1]}`, `{"type":"Point","coordinates":[1,2,3,4]}`, `{"type":"Point","coordinates":[1,"2"]}`,
		`{"type":"Point"}`, `{"type":"Point","coordinates":null}`, `{"type":"Point","coordinates":[[1,2]]}`,
		`{"type":"MultiPoint","coordinates":[[1,2],[3,4]]}`, `{"type":"MultiPoint","coordinates":[1,2]}`,
		`{"type":"LineString","coordinates":[[1,2],[3,4]]}`, `{"type":"LineString","coordinates":[[1,2]]}`, `{"type":"LineString","coordinates":[1,2]}`,
		`{"type":"LineString","coordinates":[[1,2],[3,true]]}`,
		`{"type":"MultiLineString","coordinates":[[[1,2],[3,4]],[]]}`, `{"type":"MultiLineString","coordinates":[[1,2]]}`,
		`{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,0]]]}`, `{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1]]]}`,
		`{"type":"Polygon","coordinates":[[0,0]]}`, `{"type":"Polygon","coordinates":[]}`,
		`{"type":"MultiPolygon","coordinates":[[[[0,0],[1,0],[1,1],[0,0]]]]}`, `{"type":"MultiPolygon","coordinates":[[[0,0],[1,0],[1,1],[0,0]]]}`,
		`{"type":"MultiPolygon","coordinates":[[]]}`,
		`{"type":"GeometryCollection","geometries":[{"type":"Point","coordinates":[1,2]}]}`, `{"type":"GeometryCollection","geometries":[]}`,
		`{"type":"GeometryCollection","geometries":[{"type":"Circle"}]}`, `{"type":"GeometryCollection"}`,
		`{"type":"GeometryCollection","geometries":[{"type":"GeometryCollection","geometries":[{"type":"LineString","coordinates":[[1,2]]}]}]}`,
		`{"type":"Circle","coordinates":[1,2]}`, `{"coordinates":[1,2]}`,
	}
	accepted := 0
	for _, g := range geometries {
		rec := []byte(`{"routeId":"R","routeNameFull":"n","geometry":` + g + `}`)
		_, perr := p.Parse(rec)
		inst, _ := jsonschema.UnmarshalJSON(bytes.NewReader(rec))
		serr := full.Validate(inst)
		if perr == nil {
			accepted++
			if serr != nil {
				t.Errorf("%s: accepted by the parser, refused by the full schema: %v", g, serr)
			}
		}
		if serr != nil && perr == nil {
			t.Errorf("%s: refused by the full schema only", g)
		}
	}
	if accepted < 10 {
		t.Fatalf("only %d geometries accepted: the test says little", accepted)
	}
}
