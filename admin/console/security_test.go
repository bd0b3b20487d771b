package console

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/msgx/msgx/admin"
	"github.com/msgx/msgx/clock"
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
