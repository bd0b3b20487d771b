package geowkt

import (
	"errors"
	"regexp"
	"testing"

	"github.com/twpayne/go-geom/encoding/wkt"
)

var exponent = regexp.MustCompile(`[0-9.][eE]|\+`)

// FuzzConvert: no input panics; an error is a contract *Error; a success is
// WKT without exponent notation that a WKT reader accepts, and its size is
// bounded by the input's (a number of n characters is written in at most
// about 330: "1e308" is 309 digits).
func FuzzConvert(f *testing.F) {
	for _, s := range []string{
		`{"type":"Point","coordinates":[100.0,0.0]}`,
		`{"type":"LineString","coordinates":[[49.1,55.8],[48.5,55.85]]}`,
		`{"type":"Polygon","coordinates":[[[100.0,0.0],[101.0,0.0],[101.0,1.0],[100.0,1.0],[100.0,0.0]]]}`,
		`{"type":"MultiPolygon","coordinates":[[[[0,0,1],[1,0,1],[1,1,1],[0,0,1]]],[]]}`,
		`{"type":"GeometryCollection","geometries":[{"type":"Point","coordinates":[1e6,2.5e-3,3]},{"type":"Point","coordinates":[]}]}`,
		`{"type":"MultiLineString","coordinates":[[],[[1,2],[3,4]]]}`,
		`{"type":"MultiPoint","coordinates":[[1,2],[3,4,5]]}`,
		`{"type":"Point","coordinates":[1e400,0]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) > 1<<16 {
			return
		}
		g, err := Convert(in, "geometry", Limits{MaxPositions: 10_000})
		if err != nil {
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("not a contract error: %v", err)
			}
			return
		}
		if exponent.MatchString(g.WKT) {
			t.Fatalf("exponent in %q", g.WKT)
		}
		if len(g.WKT) > 400*len(in)+64 {
			t.Fatalf("WKT of %d bytes from %d bytes of input", len(g.WKT), len(in))
		}
		if _, err := wkt.Unmarshal(g.WKT); err != nil {
			t.Fatalf("WKT %q does not parse: %v", g.WKT, err)
		}
	})
}
