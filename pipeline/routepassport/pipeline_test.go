package routepassport

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// Records in, both events out per valid record, refused records on the
// dead-letter topic with their reason, route_passports holding each route's
// newest passport, the five counters, logs without payloads.
func TestEndToEnd(t *testing.T) {
	e := newEnv(t, 3)
	db := storetest.NewPostgres(t, store.WithMigrate(Schema()))
	reg := prometheus.NewRegistry()
	logs := &testkit.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	p := newPipeline(t, db, e.broker(testkit.Quiet()), e.options(reg, log)...)
	startPipeline(t, p)
	in, geo, dlq := e.reader(e.routeIn), e.reader(e.georef), e.reader(e.dlq)

	spec := []byte(`{ "routeId": "R-2024-000123", "routeNameFull": "Survey route Kazan–Zelenodolsk, segment 3",
	  "requestId": "SR-88", "traceId": "tr-1", "correlationId": "co-1", "createdAt": "2024-05-01T10:00:00Z",
	  "geometry": { "type": "LineString", "coordinates": [[49.1, 55.8], [48.5, 55.85]] },
	  "properties": { "any": "json", "marker": "payload-marker-7f3e" }, "vendorField": 42 }`)
	var valid [][]byte
	// A lone surrogate escape (which jsonb refuses as written) is stored.
	lone := []byte(`{"routeId":"R-lone","routeNameFull":"lone \ud800 surrogate","geometry":{"type":"Point","coordinates":[1,2]}}`)
	valid = append(valid, spec, lone)
	for i := range 30 {
		valid = append(valid, record(fmt.Sprintf("R-%d", i%10), fmt.Sprintf("route %d v%d", i%10, i/10), line(i)))
	}
	invalid := map[string][3]string{ // routeId -> class, path, message part
		"":             {ClassJSON, "", "not valid JSON"}, // unparseable: produced without a key
		"bad-schema":   {ClassSchema, "routeNameFull", "missing"},
		"bad-geometry": {ClassGeometry, "geometry.coordinates[0]", "not closed"},
		"bad-dims":     {ClassGeometry, "geometry.coordinates[1]", "mixed dimensions"},
	}
	bad := [][]byte{
		[]byte(`{"routeId":"bad-json","routeNameFull":"x","geometry":{`),
		[]byte(`{"routeId":"bad-schema","geometry":{"type":"Point","coordinates":[1,2]}}`),
		record("bad-geometry", "n", `{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1]]]}`),
		record("bad-dims", "n", `{"type":"LineString","coordinates":[[0,0],[1,1,1]]}`),
	}
	e.produce(append(append([][]byte{}, valid[:16]...), append(bad, valid[16:]...)...)...)

	const wait = 60 * time.Second
	in.waitFor(t, len(valid), wait)
	geo.waitFor(t, len(valid), wait)
	dlq.waitFor(t, len(bad), wait)
	// Then whatever else arrives: nothing should.
	ins, geos, dead := in.drain(300*time.Millisecond), geo.drain(300*time.Millisecond), dlq.drain(100*time.Millisecond)
	if len(ins) != len(valid) || len(geos) != len(valid) || len(dead) != len(bad) {
		t.Fatalf("got %d route-in, %d georeference, %d dead; want %d, %d, %d", len(ins), len(geos), len(dead), len(valid), len(valid), len(bad))
	}
	for _, recs := range [][]*kgo.Record{ins, geos} {
		ids := map[string]bool{}
		for _, r := range recs {
			id := header(r, "msgx-event-id")
			if id == "" || ids[id] {
				t.Fatalf("event id %q missing or repeated", id)
			}
			ids[id] = true
			var ev RouteInEvent
			if err := json.Unmarshal(r.Value, &ev); err != nil {
				t.Fatal(err)
			}
			if string(r.Key) != ev.RouteID || ev.EventID != id || ev.RouteStatus != "PROCESSED" || ev.Source.Offset == nil {
				t.Fatalf("event %s: key %q, body %+v", id, r.Key, ev)
			}
		}
	}

	// The spec's example, field by field.
	var got map[string]any
	for _, r := range geos {
		if string(r.Key) == "R-2024-000123" {
			if err := json.Unmarshal(r.Value, &got); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := map[string]any{"eventType": TypeGeoreference, "routeId": "R-2024-000123", "routeNameFull": "Survey route Kazan–Zelenodolsk, segment 3",
		"requestId": "SR-88", "traceId": "tr-1", "correlationId": "co-1", "createdAt": "2024-05-01T10:00:00Z", "routeStatus": "PROCESSED",
		"geometryType": "LineString", "geometryWkt": "LINESTRING (49.1 55.8, 48.5 55.85)"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("georeference event %s = %v, want %v", k, got[k], v)
		}
	}
	if g, _ := json.Marshal(got["geometry"]); string(g) != `{"coordinates":[[49.1,55.8],[48.5,55.85]],"type":"LineString"}` {
		t.Errorf("georeference geometry %s", g)
	}
	if src, _ := got["source"].(map[string]any); src["topic"] != e.input || src["partition"] == nil || src["key"] != "R-2024-000123" {
		t.Errorf("source %v", got["source"])
	}

	for _, r := range dead {
		w, ok := invalid[string(r.Key)]
		if !ok {
			t.Fatalf("unexpected dead letter key %q", r.Key)
		}
		if header(r, HeaderErrorClass) != w[0] || header(r, HeaderErrorPath) != w[1] || !strings.Contains(header(r, HeaderErrorMessage), w[2]) {
			t.Errorf("%s: headers class %q path %q message %q, want %v", r.Key, header(r, HeaderErrorClass), header(r, HeaderErrorPath), header(r, HeaderErrorMessage), w)
		}
		if header(r, HeaderSourceTopic) != e.input || header(r, HeaderSourceOffset) == "" {
			t.Errorf("%s: source headers missing", r.Key)
		}
	}

	// Each route's newest passport; the stored record keeps unknown members.
	if n := countRows(t, db, `SELECT count(*) FROM route_passports`); n != 12 {
		t.Fatalf("%d route passports, want 12", n)
	}
	if n := countRows(t, db, `SELECT count(*) FROM route_passports WHERE route_id = 'R-3' AND route_name_full = 'route 3 v2' AND geometry_wkt = 'LINESTRING (23.5 55.8, 48.5 55.85)'`); n != 1 {
		t.Fatalf("R-3 is not its newest record")
	}
	if n := countRows(t, db, `SELECT count(*) FROM route_passports WHERE route_id = 'R-2024-000123' AND document->>'vendorField' = '42' AND source_topic = '`+e.input+`' AND source_offset IS NOT NULL AND payload_bytes > 0`); n != 1 {
		t.Fatalf("spec record not stored with its unknown member and source")
	}
	// json, not jsonb: the record's text as received, spacing and member
	// order included.
	var doc string
	if err := db.QueryRow(t.Context(), `SELECT document::text FROM route_passports WHERE route_id = 'R-2024-000123'`).Scan(&doc); err != nil {
		t.Fatal(err)
	} else if doc != string(spec) {
		t.Errorf("stored document %s, want the record as received", doc)
	}

	if v := counter(t, reg, "route_passport_ingest_success_total", nil); v != float64(len(valid)) {
		t.Errorf("ingest success %v", v)
	}
	for class, n := range map[string]float64{ClassJSON: 1, ClassSchema: 1, ClassGeometry: 2} {
		if v := counter(t, reg, "route_passport_ingest_failure_total", map[string]string{"class": class}); v != n {
			t.Errorf("ingest failure %s = %v, want %v", class, v, n)
		}
	}
	// The relay counts after the broker confirmed; poll briefly for the
	// sent marks that trail the sends.
	deadline := time.Now().Add(10 * time.Second)
	for counter(t, reg, "route_passport_outbox_published_total", nil) < float64(2*len(valid)) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if v := counter(t, reg, "route_passport_outbox_published_total", map[string]string{"topic": e.routeIn}); v != float64(len(valid)) {
		t.Errorf("outbox published to %s = %v", e.routeIn, v)
	}
	for _, name := range []string{"route_passport_outbox_retry_total", "route_passport_outbox_failed_total"} {
		if v := counter(t, reg, name, nil); v != 0 {
			t.Errorf("%s = %v", name, v)
		}
	}

	out := logs.String()
	for _, field := range []string{`"source_topic"`, `"source_partition"`, `"source_offset"`, `"source_key"`, `"payload_size"`,
		`"route_id"`, `"route_name_full"`, `"trace_id"`, `"correlation_id"`, `"exception_class"`, `"exception_message"`} {
		if !strings.Contains(out, field) {
			t.Errorf("logs lack %s", field)
		}
	}
	if strings.Contains(out, "payload-marker-7f3e") || strings.Contains(out, "55.85") {
		t.Errorf("a payload reached the logs")
	}
}
