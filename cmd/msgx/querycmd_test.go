package main

import (
	"bytes"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/msgx/msgx/admin"
	"github.com/msgx/msgx/pipeline/sis"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// msgx flights and msgx requests print tables (the JSON with --json), and
// a bad parameter comes back as the API's 400 and its reason.
func TestQueryCommands(t *testing.T) {
	db := storetest.NewPostgres(t, store.WithMigrate(buildLines()...))
	srv, err := admin.New(admin.Config{DB: db, Queries: map[string]admin.QueryFunc{
		"flights": sis.FlightsQuery(db), "requests": sis.RequestsQuery(db)}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	msgx := func(args ...string) (string, error) { return execute(append(args, "--admin", hs.URL)...) }
	if out, err := msgx("flights", "--param", "day=2003-12-15"); err != nil || !strings.HasPrefix(out, "FLID  DAY  STATUS") || !strings.Contains(out, "(0 flights)") {
		t.Errorf("flights: %v\n%s", err, out)
	}
	if out, err := msgx("flights", "--json"); err != nil || !strings.Contains(out, `"flights": []`) {
		t.Errorf("flights --json: %v\n%s", err, out)
	}
	if out, err := msgx("requests"); err != nil || !strings.HasPrefix(out, "ID  KIND  ANSWER  STATUS") || !strings.Contains(out, "(0 requests)") {
		t.Errorf("requests: %v\n%s", err, out)
	}
	_, err = msgx("flights", "--param", "limit=ten")
	if err == nil || !strings.Contains(err.Error(), `400 Bad Request: bad parameter: limit "ten"`) {
		t.Errorf("a bad limit: %v", err)
	}
	_, err = msgx("requests", "--param", "stauts=DONE")
	if err == nil || !strings.Contains(err.Error(), `400 Bad Request: bad parameter: "stauts" is not a parameter of this query`) {
		t.Errorf("an unknown parameter: %v", err)
	}
}

func TestPrintFlightsAndRequests(t *testing.T) {
	now := time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)
	var b bytes.Buffer
	err := printFlights(&b, []byte(`{"flights":[{"flid":"F1","operationDay":"2003-12-15","status":"ACTIVE","stateVersion":3,"lastMsgId":42,"fields":{"FLNO":"CA1234"}}],"next":"F1"}`), now)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"F1    2003-12-15  ACTIVE  CA1234  3        42", "(1 flights)", "next page: --param after=F1"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("flights lack %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	err = printRequests(&b, []byte(`{"requests":[{"id":7,"kind":"RQFD","answerType":"SCHD","status":"EXPIRED","reason":"no answer",
		"registeredAt":"2026-12-06T02:50:00Z","expiresAt":"2026-12-06T02:55:00Z"}],"next":7}`), now)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"7   RQFD  SCHD    EXPIRED  2026-12-06T02:50:00Z (10 min ago)  2026-12-06T02:55:00Z (5 min ago)  no answer",
		"(1 requests)", "next page: --param before=7"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("requests lack %q:\n%s", want, b.String())
		}
	}
}
