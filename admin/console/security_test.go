package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/msgx/msgx/admin"
	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/pipeline/sis"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// A logout ends the session on the server: a copy of the cookie taken
// before is no session any more. A session unused for the idle time ends;
// the overview's automatic refreshes do not keep it alive.
func TestLogoutRevokesAndIdleSessionsEnd(t *testing.T) {
	f := setup(t, storetest.NewPostgres(t, store.WithMigrate(sis.Schema(), admin.Schema())))
	ck := f.login(t, opTok)
	copied := ck
	if r := f.do(t, "POST", "/console/logout", ck, url.Values{"csrf": {f.con.csrf(mustDecode(t, f.con, ck))}}); r.code != http.StatusSeeOther {
		t.Fatalf("logout: %d", r.code)
	}
	if r := f.do(t, "GET", "/console/", copied, nil); r.code != http.StatusSeeOther || r.hdr.Get("Location") != "/console/login" {
		t.Errorf("the cookie copied before the logout: %d %q", r.code, r.hdr.Get("Location"))
	}

	clk := clock.NewFake(time.Now())
	con, err := New(f.con.adm, WithClock(clk), WithSessionIdle(30*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	f.con = con
	ck = f.login(t, readTok)
	clk.Advance(29 * time.Minute)
	if r := f.do(t, "GET", "/console/", ck, nil); r.code != 200 {
		t.Fatalf("a page within the idle time: %d", r.code)
	}
	for range 3 {
		clk.Advance(10 * time.Minute)
		if r := f.do(t, "GET", "/console/fragment/progress?source=inbox&stream=s1&ids=3", ck, nil, "X-Console-Fragment", "1"); r.code != 200 && r.code != http.StatusUnauthorized {
			t.Fatalf("fragment: %d", r.code)
		}
	}
	if r := f.do(t, "GET", "/console/", ck, nil); r.code != http.StatusSeeOther {
		t.Errorf("a session idle for 30 min with only automatic refreshes: %d", r.code)
	}
	// Bounded: beyond the bound a login is refused, not another session ended.
	con, err = New(f.con.adm, WithMaxSessions(1))
	if err != nil {
		t.Fatal(err)
	}
	f.con = con
	first := f.login(t, readTok)
	if r := f.do(t, "POST", "/console/login", "", url.Values{"token": {opTok}}); r.code != http.StatusServiceUnavailable {
		t.Errorf("a login beyond the bound: %d", r.code)
	}
	if r := f.do(t, "GET", "/console/", first, nil); r.code != 200 {
		t.Errorf("the live session after a refused login: %d", r.code)
	}
}

// Wrong console logins are throttled per client like wrong bearer tokens.
func TestLoginThrottle(t *testing.T) {
	f := setup(t, storetest.NewPostgres(t, store.WithMigrate(sis.Schema(), admin.Schema())))
	for i := range admin.DefaultThrottle.Free + 1 {
		if r := f.do(t, "POST", "/console/login", "", url.Values{"token": {"wrong-token-0123456789"}}); r.code != http.StatusUnauthorized {
			t.Fatalf("wrong login %d: %d", i+1, r.code)
		}
	}
	r := f.do(t, "POST", "/console/login", "", url.Values{"token": {opTok}})
	if r.code != http.StatusTooManyRequests || r.hdr.Get("Retry-After") == "" || r.hdr.Get("Set-Cookie") != "" || !strings.Contains(r.body, "Too many failed logins") {
		t.Errorf("a login while throttled: %d %q %s", r.code, r.hdr.Get("Retry-After"), r.body)
	}
}

// The login takes GET (the form) and POST only; the static directory lists
// nothing; every answer forbids framing; a foreign Host is refused; an
// open console serves loopback only.
func TestConsoleHardening(t *testing.T) {
	f := setup(t, storetest.NewPostgres(t, store.WithMigrate(sis.Schema(), admin.Schema())))
	for _, m := range []string{"PUT", "DELETE", "PATCH"} {
		if r := f.do(t, m, "/console/login", "", url.Values{"token": {opTok}}); r.code != http.StatusMethodNotAllowed || r.hdr.Get("Set-Cookie") != "" {
			t.Errorf("%s /console/login: %d", m, r.code)
		}
	}
	for _, p := range []string{"/console/static/", "/console/static"} {
		if r := f.do(t, "GET", p, "", nil); r.code == 200 || strings.Contains(r.body, "console.css") {
			t.Errorf("GET %s: %d %s", p, r.code, r.body)
		}
	}
	if r := f.do(t, "GET", "/console/static/console.css", "", nil); r.code != 200 {
		t.Errorf("an asset: %d", r.code)
	}
	r := f.do(t, "GET", "/console/login", "", nil)
	if r.code != 200 || r.hdr.Get("X-Frame-Options") != "DENY" {
		t.Errorf("login form: %d, X-Frame-Options %q", r.code, r.hdr.Get("X-Frame-Options"))
	}
	if r := f.do(t, "GET", "/console/login", "", nil, "Host", "rebind.attacker.example"); r.code != http.StatusMisdirectedRequest {
		t.Errorf("a foreign Host: %d", r.code)
	}
	// A form posted from another site is refused even with the session's
	// CSRF token (which such a page cannot read anyway).
	ck := f.login(t, opTok)
	form := url.Values{"csrf": {f.con.csrf(mustDecode(t, f.con, ck))}, "source": {"inbox"}, "stream": {"s1"}, "ids": {"3"}, "reason": {"x"}}
	if r := f.do(t, "POST", "/console/replay/run", ck, form, "Sec-Fetch-Site", "cross-site"); r.code != http.StatusForbidden {
		t.Errorf("a cross-site POST with the CSRF token: %d", r.code)
	}

	open, err := admin.New(admin.Config{DB: f.db})
	if err != nil {
		t.Fatal(err)
	}
	con, err := New(open)
	if err != nil {
		t.Fatal(err)
	}
	f.con = con
	if r := f.do(t, "GET", "/console/", "", nil, "Host", "127.0.0.1:8081"); r.code != http.StatusForbidden {
		t.Errorf("an open console from the network: %d", r.code)
	}
}

// A failure of the service shows a reference to the log, not the
// database's text.
func TestConsoleErrorsHideTheDatabase(t *testing.T) {
	db := storetest.NewPostgres(t, store.WithMigrate(sis.Schema(), admin.Schema()))
	f := setup(t, db, map[string]admin.QueryFunc{"flights": func(ctx context.Context, _ map[string][]string) (any, error) {
		var n int
		return n, db.QueryRow(ctx, "SELECT 1/0").Scan(&n)
	}})
	ck := f.login(t, readTok)
	r := f.do(t, "GET", "/console/flights", ck, nil)
	if r.code != 500 || strings.Contains(r.body, "division") || strings.Contains(r.body, "SQLSTATE") || !strings.Contains(r.body, "internal error (ref ") {
		t.Errorf("flights failing: %d %s", r.code, r.body)
	}
	if r := f.do(t, "GET", "/console/fragment/progress?source=outbox&ids=ev%00", ck, nil, "X-Console-Fragment", "1"); r.code != 400 || strings.Contains(r.body, "SQLSTATE") {
		t.Errorf("progress with a NUL id: %d %s", r.code, r.body)
	}
}

// rejectAll is a broker that rejects every event with a hostile error text.
type rejectAll struct{}

func (rejectAll) SendConfirmed(context.Context, string, ...*broker.Message) error {
	return driver.Classify(driver.Rejected, errors.New(scriptValue))
}

// The values pages print from data: markup that closes an attribute and
// opens a script, a script URL, and a value that would add an attribute.
const (
	scriptValue = `"><script>alert(1)</script>`
	scriptURL   = `javascript:alert(1)`
	attrValue   = `x" onmouseover="alert(1)`
)

var urlAttr = regexp.MustCompile(`\s(href|src|action|data-refresh)="([^"]*)"`)

// inert fails unless the page runs no script but the console's own, every
// URL it links or posts to is a path under the console's prefix, and no
// value added an attribute.
func inert(t *testing.T, what, body string, fragment bool) {
	t.Helper()
	scripts := 1
	if fragment {
		scripts = 0
	}
	if n := strings.Count(strings.ToLower(body), "<script"); n != scripts ||
		(!fragment && !strings.Contains(body, `<script src="/console/static/console.js" defer></script>`)) {
		t.Errorf("%s: %d script elements:\n%s", what, n, body)
	}
	for _, m := range urlAttr.FindAllStringSubmatch(body, -1) {
		if !strings.HasPrefix(m[2], Prefix) {
			t.Errorf("%s: %s=%q is not a path under %s", what, m[1], m[2], Prefix)
		}
	}
	if strings.Contains(body, `onmouseover="`) {
		t.Errorf("%s: a value added an attribute:\n%s", what, body)
	}
}

// A stream name, an event id, a target, a flight id, field values,
// collection names, error texts and query answers that carry markup or a
// script URL are shown as text on every page that prints them, and every
// link built from them stays a path under the console that leads back to
// the same value.
func TestHostileValuesAreInert(t *testing.T) {
	db := storetest.NewPostgres(t, store.WithMigrate(sis.Schema(), admin.Schema()))
	ctx := context.Background()
	stream := scriptValue
	if _, err := db.Exec(ctx, `INSERT INTO msgx_inbox (stream, msg_id, identity, kind, payload, status, error_class, reason, received_at, attempts)
		VALUES ($1, 1, $2, $3, $4, 'FAILED', 'INFRA', $5, now(), 1)`, stream, attrValue, scriptURL, []byte(scriptValue), scriptValue); err != nil {
		t.Fatal(err)
	}
	rl, err := outbox.NewRelay(db, outbox.Target(scriptURL, rejectAll{}, outbox.PerKey))
	if err != nil {
		t.Fatal(err)
	}
	defer rl.Close()
	if err := db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		return outbox.Enqueue(ctx, tx, time.Now(),
			outbox.Event{ID: scriptValue, Target: scriptURL, Topic: attrValue, Key: scriptValue, Payload: []byte("{}")},
			outbox.Event{ID: "behind", Target: scriptURL, Topic: "t", Key: scriptValue, Payload: []byte("{}")})
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := rl.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	flid := scriptValue
	ver := sis.Version{FLID: flid, Version: 2, Status: scriptValue, Stream: stream, MsgID: 1, SEQN: 7, TYPE: scriptValue, STYP: scriptURL, SNDR: attrValue,
		Changes: sis.Changes{Status: &sis.FieldChange{Before: scriptURL, After: scriptValue},
			Fields:      []sis.FieldChange{{Name: scriptValue, Before: scriptURL, After: attrValue}},
			Collections: []sis.CollectionChange{{Name: scriptValue, Before: json.RawMessage(`[{"@seq":"1","<b>":"<script>alert(1)</script>"}]`)}}},
		Events: []sis.VersionEvent{{ID: scriptValue, Topic: scriptURL, Type: attrValue}}, At: time.Now()}
	fl := sis.SchdEvent{SchdHead: sis.SchdHead{FLID: flid, OperationDay: scriptURL, Status: scriptValue, StateVersion: 2, LastMsgID: 1},
		Fields:      map[string]string{"FLNO": scriptValue, "MVIN": scriptURL, "SODT": attrValue, scriptValue: scriptValue},
		Collections: map[string][]sis.Item{scriptValue: {{"@seq": scriptValue, scriptURL: attrValue}}}}
	bad := fmt.Errorf("%w: %s", admin.ErrBadParameter, scriptValue)
	queries := map[string]admin.QueryFunc{
		"flights": func(_ context.Context, p map[string][]string) (any, error) {
			switch {
			case len(p["flno"]) > 0:
				return nil, bad
			case len(p["flid"]) > 0 && p["flid"][0] != flid:
				return sis.FlightPage{}, nil
			}
			return sis.FlightPage{Flights: []sis.SchdEvent{fl}, Next: scriptURL}, nil
		},
		"flight-history": func(context.Context, map[string][]string) (any, error) {
			return sis.FlightHistoryPage{FLID: flid, Versions: []sis.Version{ver}, Next: 1}, nil
		},
		"message-effects": func(context.Context, map[string][]string) (any, error) {
			return sis.MessageEffects{Stream: stream, MsgID: 1, Versions: []sis.Version{ver}}, nil
		},
		"requests": func(_ context.Context, p map[string][]string) (any, error) {
			if len(p["status"]) > 0 {
				return nil, bad
			}
			return []map[string]any{{scriptValue: scriptURL, "b": attrValue}}, nil
		},
	}
	f := consoleOver(t, db, admin.Config{Streams: []admin.Stream{{Name: stream}}, Targets: []string{scriptURL}, TargetStates: rl.Targets,
		ReadToken: readTok, OperatorToken: opTok, Hosts: []string{"example.com"}, Queries: queries})
	ck := f.login(t, opTok)
	shown := `&#34;&gt;&lt;script&gt;alert(1)&lt;/script&gt;`
	esc := url.PathEscape
	for _, p := range []struct {
		path string
		code int
		want string
	}{
		{"/console/", 200, shown},
		{"/console/dead", 200, shown},
		{"/console/dead/inbox/" + esc(stream) + "/1", 200, shown},
		{"/console/messages/" + esc(stream) + "/1", 200, "of stream " + shown},
		{"/console/dead/inbox/" + esc(stream) + "/2", 404, "no message 2 in stream " + shown},
		{"/console/dead/outbox/" + esc(scriptValue), 200, "Event " + shown},
		{"/console/dead?since=" + url.QueryEscape(scriptValue), 400, shown},
		{"/console/replay?" + url.Values{"stream": {stream}, "target": {scriptURL}, "ids": {scriptValue}, "reason": {attrValue}}.Encode(), 200, shown},
		{"/console/gaps", 200, shown},
		{"/console/requests", 200, shown},
		{"/console/requests?status=" + url.QueryEscape(scriptValue), 400, "bad parameter: " + shown},
		{"/console/flights", 200, shown},
		{"/console/flights?flno=x", 400, "bad parameter: " + shown},
		{"/console/flights/" + esc(flid), 200, "Flight " + shown},
		{"/console/flights/" + esc(flid) + "/json", 200, shown},
		{"/console/flights/" + esc(flid) + "/history", 200, "History of flight " + shown},
		{"/console/flights/" + esc(scriptURL), 404, "no flight javascript:alert(1)"},
	} {
		r := f.do(t, "GET", p.path, ck, nil)
		if r.code != p.code || !strings.Contains(r.body, p.want) {
			t.Errorf("%s: %d, want %d showing %q:\n%s", p.path, r.code, p.code, p.want, r.body)
		}
		inert(t, p.path, r.body, false)
	}
	frag := f.do(t, "GET", "/console/fragment/overview", ck, nil, "X-Console-Fragment", "1")
	inert(t, "the overview's fragment", frag.body, true)

	// The dry run and the replay carry the values in hidden fields and in
	// the progress fragment's URL.
	form := url.Values{"csrf": {f.con.csrf(mustDecode(t, f.con, ck))}, "source": {"inbox"}, "stream": {stream}, "ids": {"1"}, "reason": {attrValue}}
	r := f.do(t, "POST", "/console/replay/preview", ck, form)
	if r.code != 200 || !strings.Contains(r.body, `<input type="hidden" name="stream" value="`+shown+`">`) {
		t.Errorf("dry run: %d\n%s", r.code, r.body)
	}
	inert(t, "dry run", r.body, false)

	// Every link leads to a page, those built from a value back to it: the
	// message, the event, the dead letters of a stream or target, the
	// flight, its history and the next page.
	for _, page := range []string{"/console/", "/console/dead", "/console/flights", "/console/flights/" + esc(flid) + "/history"} {
		body := f.do(t, "GET", page, ck, nil).body
		for _, m := range urlAttr.FindAllStringSubmatch(body, -1) {
			u := html.UnescapeString(m[2])
			if m[1] != "href" || strings.HasPrefix(u, Prefix+"static/") {
				continue
			}
			if r := f.do(t, "GET", u, ck, nil); r.code != 200 {
				t.Errorf("%s links to %s: %d\n%s", page, u, r.code, r.body)
			}
		}
	}
	next := f.do(t, "GET", "/console/flights", ck, nil).body
	if want := `href="/console/flights?after=javascript%3Aalert%281%29" id="next-page"`; !strings.Contains(next, want) {
		t.Errorf("the next page's link lacks %s:\n%s", want, next)
	}
}
