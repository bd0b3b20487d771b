package geowkt

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/twpayne/go-geom/encoding/wkt"
)

func convert(t *testing.T, in string) (Geometry, error) {
	t.Helper()
	return Convert([]byte(in), "geometry", Limits{})
}

// The examples of RFC 7946 appendix A, and the same shapes in 3D, projected
// metres and empty.
func TestConvert(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"A.1 Point", `{"type":"Point","coordinates":[100.0,0.0]}`, "POINT (100 0)"},
		{"A.2 LineString", `{"type":"LineString","coordinates":[[100.0,0.0],[101.0,1.0]]}`, "LINESTRING (100 0, 101 1)"},
		{"A.3 Polygon without holes", `{"type":"Polygon","coordinates":[[[100.0,0.0],[101.0,0.0],[101.0,1.0],[100.0,1.0],[100.0,0.0]]]}`,
			"POLYGON ((100 0, 101 0, 101 1, 100 1, 100 0))"},
		{"A.3 Polygon with holes", `{"type":"Polygon","coordinates":[
			[[100.0,0.0],[101.0,0.0],[101.0,1.0],[100.0,1.0],[100.0,0.0]],
			[[100.8,0.8],[100.8,0.2],[100.2,0.2],[100.2,0.8],[100.8,0.8]]]}`,
			"POLYGON ((100 0, 101 0, 101 1, 100 1, 100 0), (100.8 0.8, 100.8 0.2, 100.2 0.2, 100.2 0.8, 100.8 0.8))"},
		{"A.4 MultiPoint", `{"type":"MultiPoint","coordinates":[[100.0,0.0],[101.0,1.0]]}`, "MULTIPOINT (100 0, 101 1)"},
		{"A.5 MultiLineString", `{"type":"MultiLineString","coordinates":[[[100.0,0.0],[101.0,1.0]],[[102.0,2.0],[103.0,3.0]]]}`,
			"MULTILINESTRING ((100 0, 101 1), (102 2, 103 3))"},
		{"A.6 MultiPolygon", `{"type":"MultiPolygon","coordinates":[
			[[[102.0,2.0],[103.0,2.0],[103.0,3.0],[102.0,3.0],[102.0,2.0]]],
			[[[100.0,0.0],[101.0,0.0],[101.0,1.0],[100.0,1.0],[100.0,0.0]],
			 [[100.2,0.2],[100.2,0.8],[100.8,0.8],[100.8,0.2],[100.2,0.2]]]]}`,
			"MULTIPOLYGON (((102 2, 103 2, 103 3, 102 3, 102 2)), ((100 0, 101 0, 101 1, 100 1, 100 0), (100.2 0.2, 100.2 0.8, 100.8 0.8, 100.8 0.2, 100.2 0.2)))"},
		{"A.7 GeometryCollection", `{"type":"GeometryCollection","geometries":[
			{"type":"Point","coordinates":[100.0,0.0]},
			{"type":"LineString","coordinates":[[101.0,0.0],[102.0,1.0]]}]}`,
			"GEOMETRYCOLLECTION (POINT (100 0), LINESTRING (101 0, 102 1))"},
		{"spec example", `{"type":"LineString","coordinates":[[49.1,55.8],[48.5,55.85]]}`, "LINESTRING (49.1 55.8, 48.5 55.85)"},

		{"Point Z", `{"type":"Point","coordinates":[100.0,0.0,12.5]}`, "POINT Z (100 0 12.5)"},
		{"LineString Z", `{"type":"LineString","coordinates":[[1,2,3],[4,5,6]]}`, "LINESTRING Z (1 2 3, 4 5 6)"},
		{"Polygon Z", `{"type":"Polygon","coordinates":[[[0,0,1],[1,0,1],[1,1,1],[0,0,1]]]}`, "POLYGON Z ((0 0 1, 1 0 1, 1 1 1, 0 0 1))"},
		{"MultiPoint Z", `{"type":"MultiPoint","coordinates":[[1,2,3]]}`, "MULTIPOINT Z (1 2 3)"},
		{"MultiLineString Z", `{"type":"MultiLineString","coordinates":[[[1,2,3],[4,5,6]]]}`, "MULTILINESTRING Z ((1 2 3, 4 5 6))"},
		{"MultiPolygon Z", `{"type":"MultiPolygon","coordinates":[[[[0,0,0],[1,0,0],[1,1,0],[0,0,0]]]]}`, "MULTIPOLYGON Z (((0 0 0, 1 0 0, 1 1 0, 0 0 0)))"},
		{"GeometryCollection Z", `{"type":"GeometryCollection","geometries":[{"type":"Point","coordinates":[1,2,3]},{"type":"Point","coordinates":[]}]}`,
			"GEOMETRYCOLLECTION Z (POINT Z (1 2 3), POINT Z EMPTY)"},
		{"nested GeometryCollection", `{"type":"GeometryCollection","geometries":[{"type":"GeometryCollection","geometries":[{"type":"Point","coordinates":[1,2]}]}]}`,
			"GEOMETRYCOLLECTION (GEOMETRYCOLLECTION (POINT (1 2)))"},

		{"projected metres", `{"type":"Point","coordinates":[1234567.891,7654321.125,-12.75]}`, "POINT Z (1234567.891 7654321.125 -12.75)"},
		{"large and small", `{"type":"LineString","coordinates":[[1e7,1.5e-7],[123456789012.5,-0.000001]]}`,
			"LINESTRING (10000000 0.00000015, 123456789012.5 -0.000001)"},
		{"shortest exact", `{"type":"Point","coordinates":[0.1,0.30000000000000004]}`, "POINT (0.1 0.30000000000000004)"},
		{"bbox and foreign members ignored", `{"type":"Point","coordinates":[1,2],"bbox":[1,2,1,2],"crs":null}`, "POINT (1 2)"},

		{"Point EMPTY", `{"type":"Point","coordinates":[]}`, "POINT EMPTY"},
		{"LineString EMPTY", `{"type":"LineString","coordinates":[]}`, "LINESTRING EMPTY"},
		{"Polygon EMPTY", `{"type":"Polygon","coordinates":[]}`, "POLYGON EMPTY"},
		{"MultiPoint EMPTY", `{"type":"MultiPoint","coordinates":[]}`, "MULTIPOINT EMPTY"},
		{"MultiLineString EMPTY", `{"type":"MultiLineString","coordinates":[]}`, "MULTILINESTRING EMPTY"},
		{"MultiPolygon EMPTY", `{"type":"MultiPolygon","coordinates":[]}`, "MULTIPOLYGON EMPTY"},
		{"GeometryCollection EMPTY", `{"type":"GeometryCollection","geometries":[]}`, "GEOMETRYCOLLECTION EMPTY"},
		{"empty member line", `{"type":"MultiLineString","coordinates":[[],[[1,2],[3,4]]]}`, "MULTILINESTRING (EMPTY, (1 2, 3 4))"},
		{"empty member polygon", `{"type":"MultiPolygon","coordinates":[[],[[[0,0],[1,0],[1,1],[0,0]]]]}`, "MULTIPOLYGON (EMPTY, ((0 0, 1 0, 1 1, 0 0)))"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g, err := convert(t, c.in)
			if err != nil {
				t.Fatalf("Convert: %v", err)
			}
			if g.WKT != c.want {
				t.Fatalf("WKT\n got %s\nwant %s", g.WKT, c.want)
			}
			// Whatever we write, a WKT reader reads back to the same text.
			back, err := wkt.Unmarshal(g.WKT)
			if err != nil {
				t.Fatalf("WKT %q does not parse back: %v", g.WKT, err)
			}
			if again, _ := wkt.Marshal(back); again != g.WKT {
				t.Fatalf("round trip: %q became %q", g.WKT, again)
			}
		})
	}
}

func TestConvertErrors(t *testing.T) {
	cases := []struct{ name, in, path, reason string }{
		{"not an object", `[1,2]`, "geometry", "want a GeoJSON geometry object"},
		{"missing type", `{"coordinates":[1,2]}`, "geometry.type", "missing"},
		{"type not a string", `{"type":7,"coordinates":[1,2]}`, "geometry.type", "want a string"},
		{"unknown type", `{"type":"Circle","coordinates":[1,2]}`, "geometry.type", `unknown geometry type "Circle"`},
		{"type is case sensitive", `{"type":"point","coordinates":[1,2]}`, "geometry.type", "unknown geometry type"},
		{"Feature is not a geometry", `{"type":"Feature","geometry":null}`, "geometry.type", "unknown geometry type"},
		{"missing coordinates", `{"type":"Point"}`, "geometry.coordinates", "missing"},
		{"null coordinates", `{"type":"Point","coordinates":null}`, "geometry.coordinates", "want an array, got null"},
		{"coordinates not array", `{"type":"LineString","coordinates":"1 2, 3 4"}`, "geometry.coordinates", "want an array, got a string"},
		{"non-numeric coordinate", `{"type":"Point","coordinates":[1,"2"]}`, "geometry.coordinates[1]", "want a number, got a string"},
		{"null coordinate", `{"type":"LineString","coordinates":[[1,2],[3,null]]}`, "geometry.coordinates[1][1]", "want a number, got null"},
		{"boolean coordinate", `{"type":"Point","coordinates":[true,2]}`, "geometry.coordinates[0]", "want a number, got a boolean"},
		{"overflow to Inf", `{"type":"Point","coordinates":[1e400,2]}`, "geometry.coordinates[0]", "outside the float64 range"},
		{"negative overflow", `{"type":"Point","coordinates":[1,-1e309]}`, "geometry.coordinates[1]", "outside the float64 range"},
		{"one number", `{"type":"Point","coordinates":[1]}`, "geometry.coordinates", "2 or 3 numbers"},
		{"four numbers", `{"type":"Point","coordinates":[1,2,3,4]}`, "geometry.coordinates", "got 4"},
		{"position not array", `{"type":"MultiPoint","coordinates":[5]}`, "geometry.coordinates[0]", "want an array, got a number"},
		{"one-position line", `{"type":"LineString","coordinates":[[1,2]]}`, "geometry.coordinates", "at least 2 positions, got 1"},
		{"mixed dimensions", `{"type":"LineString","coordinates":[[1,2],[3,4,5]]}`, "geometry.coordinates[1]", "mixed dimensions"},
		{"mixed dimensions across parts", `{"type":"MultiLineString","coordinates":[[[1,2,0],[3,4,0]],[[1,2],[3,4]]]}`, "geometry.coordinates[1][0]", "mixed dimensions"},
		{"mixed dimensions in collection", `{"type":"GeometryCollection","geometries":[{"type":"Point","coordinates":[1,2]},{"type":"Point","coordinates":[1,2,3]}]}`,
			"geometry.geometries[1].coordinates", "mixed dimensions"},
		{"unclosed ring", `{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1]]]}`, "geometry.coordinates[0]", "not closed"},
		{"unclosed in Z only", `{"type":"Polygon","coordinates":[[[0,0,0],[1,0,0],[1,1,0],[0,0,1]]]}`, "geometry.coordinates[0]", "not closed"},
		{"ring of 3", `{"type":"Polygon","coordinates":[[[0,0],[1,0],[0,0]]]}`, "geometry.coordinates[0]", "at least 4 positions, got 3"},
		{"empty ring", `{"type":"Polygon","coordinates":[[]]}`, "geometry.coordinates[0]", "at least 4 positions, got 0"},
		{"hole unclosed", `{"type":"MultiPolygon","coordinates":[[[[0,0],[4,0],[4,4],[0,0]],[[1,1],[2,1],[2,2],[1,2]]]]}`, "geometry.coordinates[0][1]", "not closed"},
		{"collection without geometries", `{"type":"GeometryCollection"}`, "geometry.geometries", "missing"},
		{"collection member not object", `{"type":"GeometryCollection","geometries":[1]}`, "geometry.geometries[0]", "want a GeoJSON geometry object"},
		{"bad member", `{"type":"GeometryCollection","geometries":[{"type":"Point","coordinates":[1,2]},{"type":"LineString","coordinates":[[1,2]]}]}`,
			"geometry.geometries[1].coordinates", "at least 2 positions"},
		{"too deep", strings.Repeat(`{"type":"GeometryCollection","geometries":[`, 9) + strings.Repeat(`]}`, 9), "geometry" + strings.Repeat(".geometries[0]", 8), "nested deeper than 8"},
		{"not JSON", `{"type":"Point",`, "geometry", "not valid JSON"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g, err := convert(t, c.in)
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("want a contract error, got %v (WKT %q)", err, g.WKT)
			}
			if ce.Path != c.path || !strings.Contains(ce.Reason, c.reason) {
				t.Fatalf("got %s: %s\nwant %s: …%s…", ce.Path, ce.Reason, c.path, c.reason)
			}
		})
	}
}

func TestMaxPositions(t *testing.T) {
	_, err := Convert([]byte(`{"type":"MultiPoint","coordinates":[[1,2],[3,4],[5,6]]}`), "g", Limits{MaxPositions: 2})
	var ce *Error
	if !errors.As(err, &ce) || ce.Path != "g.coordinates[2]" || !strings.Contains(ce.Reason, "more than 2 positions") {
		t.Fatalf("got %v", err)
	}
}

// Every float64 the encoder writes is a plain decimal that parses back to
// the same bits.
func TestNumbersRoundTrip(t *testing.T) {
	vals := []float64{0, math.Copysign(0, -1), 1, -1, 0.1, 1.0 / 3, 1234567.891, 1e6 + 0.5, 9007199254740993, 1e21, 1e22, 1.7976931348623157e308,
		5e-324, 2.2250738585072014e-308, 123456.789e3, -98765.4321}
	for _, v := range vals {
		in := `{"type":"Point","coordinates":[` + strconv.FormatFloat(v, 'g', -1, 64) + `,0]}`
		g, err := convert(t, in)
		if err != nil {
			t.Fatalf("%v: %v", v, err)
		}
		num := strings.TrimSuffix(strings.TrimPrefix(g.WKT, "POINT ("), " 0)")
		if strings.ContainsAny(num, "eE") {
			t.Fatalf("%v written in exponent notation: %s", v, g.WKT)
		}
		back, err := strconv.ParseFloat(num, 64)
		if err != nil || math.Float64bits(back) != math.Float64bits(v) {
			t.Fatalf("%v written as %s, reads back as %v (%v)", v, num, back, err)
		}
	}
}
