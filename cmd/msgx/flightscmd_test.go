package main

import (
	"bytes"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/msgx/msgx/admin"
	"github.com/msgx/msgx/pipeline/sis"
	"github.com/msgx/msgx/pipeline/sis/sistest"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// With the bundled traffic processed, msgx flights shows flight 15 DELETED
// at version 40 and msgx flights history 15 the FDEL message that deleted
// it, the fields and collections each message changed, and the events.
func TestFlightsHistoryCommand(t *testing.T) {
	db := storetest.NewPostgres(t, store.WithMigrate(buildLines()...))
	sistest.ProcessTraffic(t, db, time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC))
	srv, err := admin.New(admin.Config{DB: db, Queries: map[string]admin.QueryFunc{
		"flights": sis.FlightsQuery(db), "flight-history": sis.FlightHistoryQuery(db)}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	msgx := func(args ...string) (string, error) { return execute(append(args, "--admin", hs.URL)...) }
	out, err := msgx("flights", "--param", "flid=15")
	if err != nil || !strings.Contains(out, "15    2021-01-23  DELETED") || !strings.Contains(out, "  40  ") {
		t.Fatalf("flights: %v\n%s", err, out)
	}
	out, err = msgx("flights", "history", "15", "--limit", "2")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"VERSION  STATUS", "40       DELETED", "FLOP/FDEL", "status  ACTIVE → DELETED",
		"events  sis:", ":schd:15 (tombstone)", "39       ACTIVE", "(2 versions of flight 15)", "next page: --before 39"} {
		if !strings.Contains(out, want) {
			t.Errorf("history lacks %q:\n%s", want, out)
		}
	}
	out, err = msgx("flights", "history", "15", "--before", "2")
	if err != nil || !strings.Contains(out, "SCHD/DNLD") || !strings.Contains(out, "FLNO    - → YG9028") || !strings.Contains(out, "(1 versions of flight 15)") {
		t.Errorf("the first version: %v\n%s", err, out)
	}
	if out, err := msgx("flights", "history", "15", "--json"); err != nil || !strings.Contains(out, `"TYPE": "FLOP"`) {
		t.Errorf("history --json: %v\n%.300s", err, out)
	}
	if out, err := msgx("flights", "history", "NOSUCH"); err != nil || !strings.Contains(out, "no versions of flight NOSUCH") {
		t.Errorf("an unknown flight: %v\n%s", err, out)
	}
}

func TestPrintFlightHistory(t *testing.T) {
	now := time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)
	var b bytes.Buffer
	err := printFlightHistory(&b, []byte(`{"flid":"F1","versions":[{"flid":"F1","version":2,"status":"ACTIVE","stream":"sis","msgId":9,
		"SEQN":77,"TYPE":"FLOP","STYP":"ERUT","SNDR":"AODB","at":"2026-12-06T02:57:00Z",
		"changes":{"fields":[{"name":"STND","before":"12","after":""}],"collections":[{"name":"ERUT","before":null,"after":[{"@RTNO":"1"}]}]},
		"events":[{"id":"sis:9:msg:F1","target":"kafka:msg","topic":"t","type":"upsert"}]}],"next":0}`), now)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"2026-12-06T02:57:00Z (3 min ago)  sis/9    77    FLOP/ERUT  AODB",
		"STND    12 → -", `ERUT    - → [{"@RTNO":"1"}]`, "events  sis:9:msg:F1 (upsert)", "(1 versions of flight F1)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("history lacks %q:\n%s", want, b.String())
		}
	}
}
