// Package geowkt turns an RFC 7946 GeoJSON geometry into Well-Known Text.
//
// Decoding is strict, because a route passport's geometry is a contract: every
// violation is an *Error naming the JSON path of the offending member and the
// reason (unknown type, missing or non-numeric coordinates, numbers outside
// float64, positions of fewer than 2 or more than 3 numbers, mixed 2D and 3D
// positions within one geometry, line strings of one position, rings that are
// not closed or have fewer than 4 positions, collections nested too deep, too
// many positions). The geometry is built with github.com/twpayne/go-geom and
// written by its WKT encoder, whose numbers are the shortest plain decimals
// that parse back to the same float64 (strconv's 'f' format with precision
// -1): never exponent notation, exact round trip. 3D positions keep Z
// ("POINT Z (…)"); empty coordinate arrays give the EMPTY forms.
package geowkt

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/twpayne/go-geom"
	"github.com/twpayne/go-geom/encoding/wkt"
)

// Error is a contract violation of the input geometry.
type Error struct {
	// Path is the JSON path of the offending member, e.g.
	// "geometry.coordinates[0][3]".
	Path string
	// Reason says what is wrong with it.
	Reason string
}

func (e *Error) Error() string { return e.Path + ": " + e.Reason }

// Limits bound the work one geometry may cause.
type Limits struct {
	// MaxDepth bounds the nesting of GeometryCollections (default 8).
	MaxDepth int
	// MaxPositions bounds the positions of the whole geometry (default 1 000 000).
	MaxPositions int
}

// Default limits.
const (
	DefaultMaxDepth     = 8
	DefaultMaxPositions = 1_000_000
)

// Geometry is a converted geometry.
type Geometry struct {
	// Type is the GeoJSON type, e.g. "LineString".
	Type string
	// WKT is the geometry as Well-Known Text, e.g. "LINESTRING (49.1 55.8, 48.5 55.85)".
	WKT string
	// Dims is 2 or 3 (Z), or 0 for a geometry without any position.
	Dims int
}

// Convert decodes the GeoJSON geometry object raw and returns it as WKT.
// path names raw in errors (e.g. "geometry").
func Convert(raw []byte, path string, lim Limits) (Geometry, error) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return Geometry{}, &Error{Path: path, Reason: "not valid JSON: " + err.Error()}
	}
	return ConvertValue(v, path, lim)
}

// ConvertValue is Convert of an already decoded geometry: the value
// encoding/json gives with UseNumber (objects as map[string]any, arrays as
// []any, numbers as json.Number).
func ConvertValue(v any, path string, lim Limits) (Geometry, error) {
	if lim.MaxDepth <= 0 {
		lim.MaxDepth = DefaultMaxDepth
	}
	if lim.MaxPositions <= 0 {
		lim.MaxPositions = DefaultMaxPositions
	}
	d := decoder{lim: lim}
	g, typ, err := d.geometry(v, path, 0)
	if err != nil {
		return Geometry{}, err
	}
	s, err := wkt.Marshal(g)
	if err != nil {
		// Every geometry built here is one the encoder writes.
		return Geometry{}, fmt.Errorf("geowkt: encode %s: %w", typ, err)
	}
	return Geometry{Type: typ, WKT: s, Dims: d.dims}, nil
}

type decoder struct {
	lim       Limits
	positions int
	dims      int // of the first position seen in the current top-level geometry part
}

// Types lists the geometry types of RFC 7946 section 3.1.
var Types = []string{"Point", "MultiPoint", "LineString", "MultiLineString", "Polygon", "MultiPolygon", "GeometryCollection"}

func (d *decoder) geometry(v any, path string, depth int) (geom.T, string, error) {
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, "", &Error{Path: path, Reason: "want a GeoJSON geometry object, got " + kind(v)}
	}
	tv, ok := obj["type"]
	if !ok {
		return nil, "", &Error{Path: path + ".type", Reason: "missing"}
	}
	typ, ok := tv.(string)
	if !ok {
		return nil, "", &Error{Path: path + ".type", Reason: "want a string, got " + kind(tv)}
	}
	if typ == "GeometryCollection" {
		g, err := d.collection(obj, path, depth)
		return g, typ, err
	}
	switch typ {
	case "Point", "MultiPoint", "LineString", "MultiLineString", "Polygon", "MultiPolygon":
	default:
		return nil, "", &Error{Path: path + ".type", Reason: fmt.Sprintf("unknown geometry type %q (want one of %s)", typ, strings.Join(Types, ", "))}
	}
	cv, ok := obj["coordinates"]
	if !ok {
		return nil, "", &Error{Path: path + ".coordinates", Reason: "missing"}
	}
	cpath := path + ".coordinates"
	var flat []float64
	switch typ {
	case "Point":
		arr, err := array(cv, cpath)
		if err != nil {
			return nil, "", err
		}
		if len(arr) == 0 {
			return geom.NewPointEmpty(geom.XY), typ, nil
		}
		if flat, err = d.position(arr, cpath, flat); err != nil {
			return nil, "", err
		}
		return geom.NewPointFlat(layout(d.dims), flat), typ, nil
	case "MultiPoint":
		ps, err := array(cv, cpath)
		if err != nil {
			return nil, "", err
		}
		for i, p := range ps {
			pp := index(cpath, i)
			pa, err := array(p, pp)
			if err != nil {
				return nil, "", err
			}
			if flat, err = d.position(pa, pp, flat); err != nil {
				return nil, "", err
			}
		}
		return geom.NewMultiPointFlat(layout(d.dims), flat), typ, nil
	case "LineString":
		flat, err := d.line(cv, cpath, 2, nil)
		if err != nil {
			return nil, "", err
		}
		return geom.NewLineStringFlat(layout(d.dims), flat), typ, nil
	case "MultiLineString":
		ls, err := array(cv, cpath)
		if err != nil {
			return nil, "", err
		}
		ends := make([]int, 0, len(ls))
		for i, l := range ls {
			if flat, err = d.line(l, index(cpath, i), 2, flat); err != nil {
				return nil, "", err
			}
			ends = append(ends, len(flat))
		}
		return geom.NewMultiLineStringFlat(layout(d.dims), flat, ends), typ, nil
	case "Polygon":
		flat, ends, err := d.polygon(cv, cpath, nil)
		if err != nil {
			return nil, "", err
		}
		return geom.NewPolygonFlat(layout(d.dims), flat, ends), typ, nil
	case "MultiPolygon":
		ps, err := array(cv, cpath)
		if err != nil {
			return nil, "", err
		}
		endss := make([][]int, 0, len(ps))
		for i, p := range ps {
			var ends []int
			if flat, ends, err = d.polygon(p, index(cpath, i), flat); err != nil {
				return nil, "", err
			}
			endss = append(endss, ends)
		}
		return geom.NewMultiPolygonFlat(layout(d.dims), flat, endss), typ, nil
	}
	panic("unreachable: " + typ)
}

func (d *decoder) collection(obj map[string]any, path string, depth int) (geom.T, error) {
	if depth >= d.lim.MaxDepth {
		return nil, &Error{Path: path, Reason: fmt.Sprintf("GeometryCollection nested deeper than %d levels", d.lim.MaxDepth)}
	}
	gv, ok := obj["geometries"]
	if !ok {
		return nil, &Error{Path: path + ".geometries", Reason: "missing"}
	}
	gpath := path + ".geometries"
	members, err := array(gv, gpath)
	if err != nil {
		return nil, err
	}
	gc := geom.NewGeometryCollection()
	if len(members) == 0 {
		return gc, nil
	}
	parts := make([]geom.T, 0, len(members))
	for i, m := range members {
		g, _, err := d.geometry(m, index(gpath, i), depth+1)
		if err != nil {
			return nil, err
		}
		parts = append(parts, g)
	}
	// Members were built with the dimension known when each was decoded;
	// the collection has one dimension (d.dims, checked on every position),
	// so empty members decoded before the first position take it too.
	l := layout(d.dims)
	for i, g := range parts {
		parts[i] = relayout(g, l)
	}
	if err := gc.SetLayout(l); err != nil {
		return nil, fmt.Errorf("geowkt: %w", err)
	}
	if err := gc.Push(parts...); err != nil {
		return nil, fmt.Errorf("geowkt: %w", err)
	}
	return gc, nil
}

// relayout gives an empty geometry (whose layout was a guess) the layout l;
// non-empty geometries already have it.
func relayout(g geom.T, l geom.Layout) geom.T {
	if g.Layout() == l {
		return g
	}
	switch g := g.(type) {
	case *geom.Point:
		return geom.NewPointEmpty(l)
	case *geom.MultiPoint:
		return geom.NewMultiPoint(l)
	case *geom.LineString:
		return geom.NewLineString(l)
	case *geom.MultiLineString:
		return geom.NewMultiLineStringFlat(l, nil, g.Ends())
	case *geom.Polygon:
		return geom.NewPolygon(l)
	case *geom.MultiPolygon:
		return geom.NewMultiPolygonFlat(l, nil, g.Endss())
	case *geom.GeometryCollection:
		parts := g.Geoms()
		out := geom.NewGeometryCollection()
		if len(parts) == 0 {
			return out
		}
		for i, p := range parts {
			parts[i] = relayout(p, l)
		}
		_ = out.SetLayout(l)
		_ = out.Push(parts...)
		return out
	}
	return g
}

// line decodes a LineString's positions (at least min of them unless empty)
// and appends them to flat.
func (d *decoder) line(v any, path string, min int, flat []float64) ([]float64, error) {
	ps, err := array(v, path)
	if err != nil {
		return nil, err
	}
	if len(ps) > 0 && len(ps) < min {
		return nil, &Error{Path: path, Reason: fmt.Sprintf("a LineString needs at least %d positions, got %d", min, len(ps))}
	}
	for i, p := range ps {
		pp := index(path, i)
		pa, err := array(p, pp)
		if err != nil {
			return nil, err
		}
		if flat, err = d.position(pa, pp, flat); err != nil {
			return nil, err
		}
	}
	return flat, nil
}

// polygon decodes a Polygon's linear rings, appending their positions to flat
// and returning the end offset of each ring.
func (d *decoder) polygon(v any, path string, flat []float64) ([]float64, []int, error) {
	rings, err := array(v, path)
	if err != nil {
		return nil, nil, err
	}
	ends := make([]int, 0, len(rings))
	for i, r := range rings {
		rp := index(path, i)
		ps, err := array(r, rp)
		if err != nil {
			return nil, nil, err
		}
		if len(ps) < 4 {
			return nil, nil, &Error{Path: rp, Reason: fmt.Sprintf("a linear ring needs at least 4 positions, got %d", len(ps))}
		}
		start := len(flat)
		if flat, err = d.line(ps, rp, 4, flat); err != nil {
			return nil, nil, err
		}
		stride := d.dims
		first, last := flat[start:start+stride], flat[len(flat)-stride:]
		for k := range stride {
			if first[k] != last[k] {
				return nil, nil, &Error{Path: rp, Reason: "linear ring is not closed: its last position differs from its first"}
			}
		}
		ends = append(ends, len(flat))
	}
	return flat, ends, nil
}

// position decodes one position of 2 or 3 numbers and appends it to flat.
func (d *decoder) position(p []any, path string, flat []float64) ([]float64, error) {
	if len(p) < 2 || len(p) > 3 {
		return nil, &Error{Path: path, Reason: fmt.Sprintf("a position has 2 or 3 numbers (x, y[, z]), got %d", len(p))}
	}
	if d.dims == 0 {
		d.dims = len(p)
	} else if len(p) != d.dims {
		return nil, &Error{Path: path, Reason: fmt.Sprintf("mixed dimensions: position has %d numbers, the geometry's first position has %d", len(p), d.dims)}
	}
	d.positions++
	if d.positions > d.lim.MaxPositions {
		return nil, &Error{Path: path, Reason: fmt.Sprintf("more than %d positions", d.lim.MaxPositions)}
	}
	for i, e := range p {
		n, ok := e.(json.Number)
		if !ok {
			return nil, &Error{Path: index(path, i), Reason: "want a number, got " + kind(e)}
		}
		f, err := strconv.ParseFloat(string(n), 64)
		if err != nil {
			if errors.Is(err, strconv.ErrRange) {
				return nil, &Error{Path: index(path, i), Reason: fmt.Sprintf("number %s is outside the float64 range", truncate(string(n), 40))}
			}
			return nil, &Error{Path: index(path, i), Reason: "not a number: " + truncate(string(n), 40)}
		}
		flat = append(flat, f)
	}
	return flat, nil
}

func layout(dims int) geom.Layout {
	if dims == 3 {
		return geom.XYZ
	}
	return geom.XY
}

func array(v any, path string) ([]any, error) {
	a, ok := v.([]any)
	if !ok {
		return nil, &Error{Path: path, Reason: "want an array, got " + kind(v)}
	}
	return a, nil
}

func index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

func kind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
