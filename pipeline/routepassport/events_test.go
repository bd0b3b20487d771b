package routepassport

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/pipeline/routepassport/geowkt"
)

// The georeference payload built from the route-in payload is byte for byte
// what encoding/json makes of the event: members, order, compaction and
// escaping of the geometry and properties as received.
func TestGeoreferencePayloadIsJSONMarshal(t *testing.T) {
	created := time.Date(2024, 5, 1, 10, 0, 0, 123000000, time.FixedZone("", 3*3600))
	part, off := int32(2), int64(41)
	p := &Pipeline{cfg: defaults()}
	cases := []struct {
		name string
		rec  Record
		pos  bool
	}{
		{name: "spec", rec: Record{RouteID: "R-2024-000123", RouteNameFull: "Survey route Kazan–Zelenodolsk, segment 3",
			RequestID: "SR-88", TraceID: "tr", CorrelationID: "co", CreatedAt: &created,
			Geometry:     geowkt.Geometry{Type: "LineString", WKT: "LINESTRING (49.1 55.8, 48.5 55.85)"},
			GeometryJSON: json.RawMessage("{ \"type\": \"LineString\",\n \"coordinates\": [[49.1, 55.8], [48.5, 55.85]] }"),
			Properties:   json.RawMessage(`{ "any": "json", "html": "<a&b>", "sep": "\u2028 x" }`)}, pos: true},
		{name: "bare", rec: Record{RouteID: `R "quoted" <&>`, RouteNameFull: "name\twith\ncontrols \u2029",
			Geometry:     geowkt.Geometry{Type: "Point", WKT: "POINT (1 2)"},
			GeometryJSON: json.RawMessage(`{"type":"Point","coordinates":[1,2]}`)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := &broker.Delivery{Message: broker.Message{Key: c.rec.RouteID}, Topic: "in"}
			it := &item{d: d, sourceID: "in/2/41", rec: &c.rec}
			if c.pos {
				it.partition, it.offset = &part, &off
			}
			received := time.Date(2026, 12, 1, 12, 0, 0, 123456000, time.UTC)
			in, geo, err := p.events(it, received)
			if err != nil {
				t.Fatal(err)
			}
			var base RouteInEvent
			if err := json.Unmarshal(in.Payload, &base); err != nil {
				t.Fatal(err)
			}
			g := GeoreferenceEvent{RouteInEvent: base, Geometry: c.rec.GeometryJSON, Properties: c.rec.Properties}
			g.EventID, g.EventType = geo.ID, TypeGeoreference
			if g.Properties == nil {
				g.Properties = json.RawMessage("null")
			}
			want, err := json.Marshal(g)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(geo.Payload, want) {
				t.Fatalf("georeference payload\n%s\nwant\n%s", geo.Payload, want)
			}
		})
	}
	// A route-in payload of another shape is not spliced.
	g := &GeoreferenceEvent{RouteInEvent: RouteInEvent{EventID: "ab", EventType: TypeGeoreference}, Geometry: json.RawMessage(`{}`)}
	want, _ := json.Marshal(g)
	if got, err := georeferencePayload([]byte(`{"other":1}`), "cd", g); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("fallback: %s, %v; want %s", got, err, want)
	}
}
