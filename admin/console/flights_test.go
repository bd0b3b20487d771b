package console

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/msgx/msgx/admin"
	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/pipeline/sis"
	"github.com/msgx/msgx/pipeline/sis/sistest"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

var trafficStart = time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)

// flightConsole is the console over a store holding the bundled traffic,
// processed, with the SIS pipeline's queries; its clock 10 minutes after
// the last message.
func flightConsole(t *testing.T, db *store.DB) *fixture {
	t.Helper()
	sistest.ProcessTraffic(t, db, trafficStart)
	adm, err := admin.New(admin.Config{DB: db, ReadToken: readTok, Hosts: []string{"example.com"}, Streams: []admin.Stream{{Name: "sis"}},
		Queries: map[string]admin.QueryFunc{"flights": sis.FlightsQuery(db), "flight-history": sis.FlightHistoryQuery(db),
			"message-effects": sis.MessageEffectsQuery(db)}})
	if err != nil {
		t.Fatal(err)
	}
	con, err := New(adm, WithClock(clock.NewFake(trafficStart.Add(3*time.Hour))))
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{con: con, db: db}
}

// An operator finds flight 15 by flight number, sees it DELETED at version
// 40, reads a field with its label and its routes as a table, opens its
// history and follows the deleting version to its message, whose page
// links back to the flight; the raw JSON is one link away, escaped.
func TestFlightPages(t *testing.T) {
	db := storetest.NewPostgres(t, store.WithMigrate(sis.Schema(), admin.Schema()))
	f := flightConsole(t, db)
	ck := f.login(t, readTok)

	r := f.do(t, "GET", "/console/flights?flno=YG9028&status=DELETED", ck, nil)
	if r.code != 200 || !strings.Contains(r.body, `<a href="/console/flights/15">15</a>`) || !strings.Contains(r.body, ">DELETED</span>") ||
		strings.Contains(r.body, `href="/console/flights/16"`) {
		t.Fatalf("search by flight number: %d\n%s", r.code, r.body)
	}
	if r := f.do(t, "GET", "/console/flights?day=2021-01-23", ck, nil); !strings.Contains(r.body, `href="/console/flights/16"`) {
		t.Errorf("search by day:\n%s", r.body)
	}
	if r := f.do(t, "GET", "/console/flights?day=23JAN21", ck, nil); r.code != 400 || !strings.Contains(r.body, "want yyyy-mm-dd") {
		t.Errorf("a bad day: %d", r.code)
	}

	r = f.do(t, "GET", "/console/flights/15", ck, nil)
	for _, want := range []string{`<b id="flight-status" class="status status-DELETED">DELETED</b>`, `<dd id="flight-version">40</dd>`,
		`<tr data-field="FLNO"><td><code>FLNO</code></td><td>Flight number</td><td class="value">YG9028</td></tr>`,
		`<h2 id="coll-ROUT">Route`, `<table class="collection" data-collection="ROUT">`, `<th title="APCD">Airport <span class="muted">APCD</span></th>`,
		`href="/console/flights/15/history"`, `href="/console/flights/15/json"`} {
		if !strings.Contains(r.body, want) {
			t.Errorf("flight 15 lacks %q", want)
		}
	}
	if t.Failed() {
		t.Fatalf("flight 15:\n%s", r.body)
	}
	if r := f.do(t, "GET", "/console/flights/NOSUCH", ck, nil); r.code != 404 {
		t.Errorf("an unknown flight: %d", r.code)
	}
	r = f.do(t, "GET", "/console/flights/15/json", ck, nil)
	if r.code != 200 || !strings.Contains(r.body, `&#34;stateVersion&#34;: 40`) {
		t.Errorf("raw JSON, escaped: %d\n%.2000s", r.code, r.body)
	}

	r = f.do(t, "GET", "/console/flights/15/history", ck, nil)
	del := regexp.MustCompile(`(?s)<section class="card version" id="v15-40" data-version="40">.*?message <a class="msg-link" href="/console/messages/sis/(\d+)">sis/\d+</a> ·\s*SEQN \d+ · FLOP/FDEL · from AODB</p>\s*<p>Status: ACTIVE → <b>DELETED</b></p>`)
	m := del.FindStringSubmatch(r.body)
	if r.code != 200 || m == nil || !strings.Contains(r.body, "(2 h ") {
		t.Fatalf("history of 15: %d\n%s", r.code, r.body)
	}
	if !strings.Contains(r.body, `<div class="collchange" data-collection="ROUT">`) || !strings.Contains(r.body, `tombstone on`) {
		t.Errorf("the history lacks the routes of the first version or the tombstone:\n%s", r.body)
	}

	// The message page (any status) lists what the message changed and
	// links back to the flight.
	id, _ := strconv.ParseInt(m[1], 10, 64)
	if _, err := db.Exec(context.Background(), `INSERT INTO msgx_inbox (stream, msg_id, identity, kind, payload, status, received_at, attempts)
		VALUES ('sis', $1, 'AODB|FLOP|FDEL|x', 'FLOP/FDEL', '<MSG/>', 'SUCCEEDED', now(), 1)`, id); err != nil {
		t.Fatal(err)
	}
	r = f.do(t, "GET", "/console/messages/sis/"+m[1], ck, nil)
	if r.code != 200 || !strings.Contains(r.body, `Flight <a href="/console/flights/15">15</a>, version 40`) || !strings.Contains(r.body, "SUCCEEDED") ||
		strings.Contains(r.body, "← dead letters") {
		t.Errorf("the message page: %d\n%s", r.code, r.body)
	}
}
