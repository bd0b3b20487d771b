package admin

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// call sends a request as a client at remote (host:port) to Host host.
func call(h http.Handler, method, path, host, remote string, body string, hdr ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Host, req.RemoteAddr = host, remote
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

const (
	local  = "127.0.0.1:50000"
	remote = "203.0.113.7:50000"
	self   = "127.0.0.1:8081"
)

func deadInboxRow(t *testing.T, db *store.DB, id int64) {
	t.Helper()
	if err := db.InTx(context.Background(), func(ctx context.Context, tx store.Tx) error {
		_, err := inbox.EnqueueDead(ctx, tx, "s1", time.Now(), inbox.Incoming{ID: id, Payload: []byte("x")}, inbox.Exhausted, "given up")
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

func auditRows(t *testing.T, db *store.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRow(context.Background(), "SELECT COUNT(*) FROM msgx_admin_audit").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Without tokens the API serves loopback clients only, unless told
// otherwise; a Host that is not a name of the listener (a DNS-rebinding
// page's) is refused before anything is served.
func TestOpenAccessIsLoopbackOnlyAndHostIsChecked(t *testing.T) {
	db := storetest.NewSQLite(t, store.WithMigrate(Schema()))
	srv, err := New(Config{DB: db})
	if err != nil {
		t.Fatal(err)
	}
	if rec := call(srv, "GET", "/v1/status", self, local, ""); rec.Code != 200 {
		t.Errorf("open access from loopback: %d %s", rec.Code, rec.Body)
	}
	if rec := call(srv, "GET", "/v1/status", "[::1]:8081", "[::1]:50000", ""); rec.Code != 200 {
		t.Errorf("open access from IPv6 loopback: %d %s", rec.Code, rec.Body)
	}
	if rec := call(srv, "GET", "/v1/status", "192.0.2.10:8081", remote, ""); rec.Code != http.StatusForbidden {
		t.Errorf("open access from the network: %d %s", rec.Code, rec.Body)
	}
	for _, host := range []string{"rebind.attacker.example", "rebind.attacker.example:8081", "localhost.attacker.example"} {
		if rec := call(srv, "GET", "/v1/status", host, local, ""); rec.Code != http.StatusMisdirectedRequest {
			t.Errorf("Host %s: %d %s", host, rec.Code, rec.Body)
		}
	}
	if rec := call(srv, "GET", "/readyz", "rebind.attacker.example", local, ""); rec.Code != http.StatusMisdirectedRequest {
		t.Errorf("/readyz with a foreign Host: %d", rec.Code)
	}
	if rec := call(srv, "GET", "/v1/status", "LocalHost.:8081", local, ""); rec.Code != 200 {
		t.Errorf("Host localhost: %d %s", rec.Code, rec.Body)
	}

	named, err := New(Config{DB: db, OpenNetwork: true, Hosts: []string{"msgx-admin.internal"}})
	if err != nil {
		t.Fatal(err)
	}
	if rec := call(named, "GET", "/v1/status", "msgx-admin.internal:8081", remote, ""); rec.Code != 200 {
		t.Errorf("a configured name, open network: %d %s", rec.Code, rec.Body)
	}
	if rec := call(named, "GET", "/v1/status", "other.internal:8081", remote, ""); rec.Code != http.StatusMisdirectedRequest {
		t.Errorf("a name not configured: %d", rec.Code)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(srv.Collector())
	if n := testutil.ToFloat64(srv.refused.WithLabelValues(RefusedHost)); n != 4 {
		t.Errorf("msgx_admin_refused_total{reason=host}: %v", n)
	}
}

// Every API write must be JSON from the same site: a page of another site
// can post a text/plain or form body without asking, not JSON.
func TestWritesNeedJSONFromTheSameSite(t *testing.T) {
	db := storetest.NewPostgres(t, store.WithMigrate(Schema()))
	f := setup(t, db)
	deadInboxRow(t, db, 9)
	body := `{"source":"inbox","stream":"s1","ids":["9"],"dry_run":true,"reason":"r"}`
	auth := "Bearer " + opTok
	for _, c := range []struct {
		name string
		hdr  []string
		want int
	}{
		{"text/plain", []string{"Content-Type", "text/plain"}, http.StatusUnsupportedMediaType},
		{"a form", []string{"Content-Type", "application/x-www-form-urlencoded"}, http.StatusUnsupportedMediaType},
		{"no type", nil, http.StatusUnsupportedMediaType},
		{"cross-site", []string{"Content-Type", "application/json", "Sec-Fetch-Site", "cross-site"}, http.StatusForbidden},
		{"same-site subdomain", []string{"Content-Type", "application/json", "Sec-Fetch-Site", "same-site"}, http.StatusForbidden},
		{"foreign Origin", []string{"Content-Type", "application/json", "Origin", "http://evil.example"}, http.StatusForbidden},
		{"null Origin", []string{"Content-Type", "application/json", "Origin", "null"}, http.StatusForbidden},
	} {
		// Even with the operator's token (a browser could hold none for a
		// bearer API, but the rule does not depend on it).
		rec := call(f.srv, "POST", "/v1/replay", "example.com", local, body, append([]string{"Authorization", auth}, c.hdr...)...)
		if rec.Code != c.want {
			t.Errorf("%s: %d %s, want %d", c.name, rec.Code, rec.Body, c.want)
		}
	}
	if n := auditRows(t, db); n != 0 {
		t.Fatalf("refused writes left %d audit rows", n)
	}
	for _, ok := range [][]string{
		{"Content-Type", "application/json; charset=utf-8"},
		{"Content-Type", "application/json", "Sec-Fetch-Site", "same-origin", "Origin", "http://example.com"},
	} {
		if rec := call(f.srv, "POST", "/v1/replay", "example.com", local, body, append([]string{"Authorization", auth}, ok...)...); rec.Code != 200 {
			t.Errorf("%v: %d %s", ok, rec.Code, rec.Body)
		}
	}

	// A pipeline's handler behind RequireOperator: the same rules.
	served := 0
	h := f.srv.RequireOperator(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { served++ }))
	if rec := call(h, "POST", "/v1/requests", "example.com", local, `{"kind":"RQRD"}`, "Authorization", auth, "Content-Type", "text/plain"); rec.Code != http.StatusUnsupportedMediaType {
		t.Errorf("pipeline handler, text/plain: %d", rec.Code)
	}
	if rec := call(h, "POST", "/v1/requests", "example.com", local, `{}`, "Authorization", auth, "Content-Type", "application/json", "Sec-Fetch-Site", "cross-site"); rec.Code != http.StatusForbidden {
		t.Errorf("pipeline handler, cross-site: %d", rec.Code)
	}
	if rec := call(h, "POST", "/v1/requests", "rebind.example", local, `{}`, "Authorization", auth, "Content-Type", "application/json"); rec.Code != http.StatusMisdirectedRequest {
		t.Errorf("pipeline handler, foreign Host: %d", rec.Code)
	}
	if served != 0 {
		t.Fatalf("the pipeline handler served %d refused requests", served)
	}
	if rec := call(h, "POST", "/v1/requests", "example.com", local, `{}`, "Authorization", auth, "Content-Type", "application/json"); rec.Code != 200 || served != 1 {
		t.Errorf("pipeline handler: %d, served %d", rec.Code, served)
	}
}

// Named tokens: the audit records the token's name; X-Msgx-Actor is a
// quoted note beside it, never the actor.
func TestNamedTokensInTheAudit(t *testing.T) {
	db := storetest.NewPostgres(t, store.WithMigrate(Schema()))
	deadInboxRow(t, db, 9)
	const aliceTok, ciTok = "alice-Zt8qLw3vR9xK2mN7pB4sD6fH1jG5cY0e", "ci-Qm8sT4vX2nLp9wRk7bJc3yHf6dZg1aEu"
	srv, err := New(Config{DB: db, Streams: []Stream{{Name: "s1"}}, Tokens: []Token{
		{Name: "alice", Scope: Operator, Secret: aliceTok}, {Name: "ci", Scope: Read, Secret: ciTok}}})
	if err != nil {
		t.Fatal(err)
	}
	body := `{"source":"inbox","stream":"s1","ids":["9"],"dry_run":true,"reason":"r"}`
	rec := call(srv, "POST", "/v1/replay", self, local, body, "Authorization", "Bearer "+aliceTok,
		"Content-Type", "application/json", "X-Msgx-Actor", `root") (operator token`)
	if rec.Code != 200 {
		t.Fatalf("replay: %d %s", rec.Code, rec.Body)
	}
	var actor string
	if err := db.QueryRow(context.Background(), "SELECT actor FROM msgx_admin_audit").Scan(&actor); err != nil {
		t.Fatal(err)
	}
	if want := `alice (operator token; note "root\") (operator token")`; actor != want {
		t.Errorf("audit actor %q, want %q", actor, want)
	}
	if rec := call(srv, "POST", "/v1/replay", self, local, body, "Authorization", "Bearer "+ciTok, "Content-Type", "application/json"); rec.Code != http.StatusForbidden {
		t.Errorf("the read token replaying: %d", rec.Code)
	}
	if rec := call(srv, "GET", "/v1/status", self, local, "", "Authorization", "Bearer "+ciTok); rec.Code != 200 {
		t.Errorf("the read token's status: %d", rec.Code)
	}
	for _, bad := range [][]Token{
		{{Name: "a", Scope: Read, Secret: ciTok}, {Name: "b", Scope: Operator, Secret: ciTok}},
		{{Name: "a", Scope: Read, Secret: ciTok}, {Name: "a", Scope: Read, Secret: aliceTok}},
		{{Name: "a", Scope: Anonymous, Secret: ciTok}},
		{{Name: "", Scope: Read, Secret: ciTok}},
	} {
		if _, err := New(Config{DB: db, Tokens: bad}); err == nil {
			t.Errorf("tokens %+v accepted", bad)
		}
	}
}

// Wrong tokens from one client: the first few cost nothing, then each one
// locks the client out for a doubling time (429 with Retry-After, the token
// not even looked at), every failure logged without the token and counted;
// another client is not slowed down.
func TestAuthenticationThrottle(t *testing.T) {
	db := storetest.NewSQLite(t, store.WithMigrate(Schema()))
	clk := clock.NewFake(time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC))
	var logs bytes.Buffer
	srv, err := New(Config{DB: db, ReadToken: readTok, OperatorToken: opTok, HostClock: clk,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	const wrong = "wrong-token-0123456789-secret-guess"
	get := func(tok, from string) *httptest.ResponseRecorder {
		return call(srv, "GET", "/v1/status", self, from, "", "Authorization", "Bearer "+tok)
	}
	for i := range DefaultThrottle.Free + 1 {
		if rec := get(wrong, remote); rec.Code != http.StatusUnauthorized {
			t.Fatalf("wrong token %d: %d", i+1, rec.Code)
		}
	}
	// Locked out for 1 s: even the right token waits.
	rec := get(opTok, remote)
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "1" {
		t.Fatalf("locked out: %d Retry-After %q %s", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
	}
	if rec := get(readTok, "198.51.100.1:4000"); rec.Code != 200 {
		t.Errorf("another client: %d", rec.Code)
	}
	clk.Advance(time.Second)
	if rec := get(opTok, remote); rec.Code != 200 {
		t.Fatalf("after the lock: %d %s", rec.Code, rec.Body)
	}
	// The next failure doubles the lock; a success does not wipe the record.
	get(wrong, remote)
	if rec := get(wrong, remote); rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "2" {
		t.Errorf("second lock: %d Retry-After %q", rec.Code, rec.Header().Get("Retry-After"))
	}
	// An IPv6 client is held by its /64.
	for range DefaultThrottle.Free + 1 {
		get(wrong, "[2001:db8:1:2::10]:4000")
	}
	if rec := get(readTok, "[2001:db8:1:2::99]:4000"); rec.Code != http.StatusTooManyRequests {
		t.Errorf("another address of the same /64: %d", rec.Code)
	}
	// Forgotten after an hour without failures.
	clk.Advance(DefaultThrottle.Forget)
	for range DefaultThrottle.Free {
		if rec := get(wrong, remote); rec.Code != http.StatusUnauthorized {
			t.Fatalf("after the record was forgotten: %d", rec.Code)
		}
	}

	if n := testutil.ToFloat64(srv.authFailures.WithLabelValues("api", authUnknown)); n != 3*float64(DefaultThrottle.Free)+3 {
		t.Errorf("unknown_token failures: %v", n)
	}
	if n := testutil.ToFloat64(srv.authFailures.WithLabelValues("api", authThrottled)); n != 3 {
		t.Errorf("throttled: %v", n)
	}
	if strings.Contains(logs.String(), "wrong-token") || strings.Contains(logs.String(), opTok) {
		t.Errorf("a token is in the log:\n%s", logs.String())
	}
	if c := strings.Count(logs.String(), "authentication failed: unknown token"); c != 3*DefaultThrottle.Free+3 {
		t.Errorf("%d failures logged:\n%s", c, logs.String())
	}
	// The counter is exported with the other admin metrics.
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(srv.Collector())
	if n, err := testutil.GatherAndCount(reg, "msgx_admin_auth_failures_total", "msgx_admin_refused_total"); err != nil || n != 8+6 {
		t.Errorf("msgx_admin_auth_failures_total: %d series, %v", n, err)
	}
}

// The throttle's table is bounded: a full table forgets the client whose
// last failure is oldest, counted and logged.
func TestThrottleTableIsBounded(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC))
	var gone []string
	th := newThrottle(Throttle{Free: 1, Clients: 2}, clk, func(c string) { gone = append(gone, c) })
	th.fail("a")
	th.fail("a")
	clk.Advance(time.Millisecond)
	th.fail("b")
	clk.Advance(time.Millisecond)
	th.fail("c")
	if len(th.clients) != 2 || th.clients["a"] != nil || strings.Join(gone, ",") != "a" {
		t.Fatalf("clients %v, evicted %v", th.clients, gone)
	}
	if th.wait("a") != 0 {
		t.Error("an evicted client is still locked")
	}
	// A lock stops doubling at Max.
	for range 80 {
		th.fail("c")
	}
	if w := th.wait("c"); w != DefaultThrottle.Max {
		t.Errorf("lock after 80 failures: %v", w)
	}
}

// A failure of the service answers 500 with a reference to the log line,
// never the database's text; refusals keep their reason.
func TestErrorsHideTheDatabase(t *testing.T) {
	db := storetest.NewPostgres(t, store.WithMigrate(Schema()))
	var logs bytes.Buffer
	srv, err := New(Config{DB: db, Logger: slog.New(slog.NewTextHandler(&logs, nil)), Streams: []Stream{{Name: "s1"}},
		Queries: map[string]QueryFunc{"flights": func(ctx context.Context, p map[string][]string) (any, error) {
			var n int
			// A query the database refuses: its text must not reach the client.
			err := db.QueryRow(ctx, "SELECT 1/0").Scan(&n)
			return n, err
		}}})
	if err != nil {
		t.Fatal(err)
	}
	rec := call(srv, "GET", "/v1/flights", self, local, "")
	if rec.Code != 500 || strings.Contains(rec.Body.String(), "division") || strings.Contains(rec.Body.String(), "SQLSTATE") ||
		!strings.Contains(rec.Body.String(), "internal error (ref ") {
		t.Errorf("500: %s", rec.Body)
	}
	if !strings.Contains(logs.String(), "division by zero") || !strings.Contains(logs.String(), "ref=") {
		t.Errorf("the cause is not logged:\n%s", logs.String())
	}
	// Text the database would refuse is refused as a bad parameter, on
	// every API path that takes text.
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/v1/dead/outbox/ev%00x", ""},
		{"GET", "/v1/dead/outbox/ev%FFx", ""},
		{"GET", "/v1/dead?target=t%00", ""},
		{"GET", "/v1/dead?class=EXHAUSTED%00", ""},
		{"GET", "/v1/dead?class=X'--", ""},
		{"GET", "/v1/dead?limit=abc", ""},
		{"GET", "/v1/dead?after=-1", ""},
		{"GET", "/v1/dead?sourse=inbox", ""},
		{"GET", "/v1/dead?source=inbox&source=outbox", ""},
		{"GET", "/v1/flights?day=2024-02-30%00", ""},
		{"POST", "/v1/replay", `{"source":"outbox","ids":["ev\u0000"],"dry_run":true,"reason":"r"}`},
		{"POST", "/v1/replay", `{"source":"outbox","ids":["ev"],"dry_run":true,"reason":"r\u0000"}`},
		{"POST", "/v1/replay", `{"source":"outbox","target":"t\u0000","dry_run":true,"reason":"r"}`},
		{"POST", "/v1/replay", `{"source":"outbox","ids":["ev"],"dry_run":true,"reason":"r","x":1}`},
	} {
		rec := call(srv, c.method, c.path, self, local, c.body, "Content-Type", "application/json")
		if rec.Code != 400 || strings.Contains(rec.Body.String(), "SQLSTATE") {
			t.Errorf("%s %s %s: %d %s", c.method, c.path, c.body, rec.Code, rec.Body)
		}
	}
	// A reason may have line breaks.
	if rec := call(srv, "POST", "/v1/replay", self, local, `{"source":"outbox","ids":["ev"],"dry_run":true,"reason":"broker\nfixed"}`,
		"Content-Type", "application/json"); rec.Code != 200 {
		t.Errorf("a reason of two lines: %d %s", rec.Code, rec.Body)
	}
}

// /readyz reuses its answer for ReadyCache, and shows a failed check's
// error to authenticated callers only.
func TestReadyzIsCachedAndTerseWithoutAToken(t *testing.T) {
	db := storetest.NewSQLite(t, store.WithMigrate(Schema()))
	clk := clock.NewFake(time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC))
	runs := 0
	srv, err := New(Config{DB: db, ReadToken: readTok, HostClock: clk, ReadyCache: 2 * time.Second,
		Checks: []Check{{Name: "mailbox m", Check: func(context.Context) error {
			runs++
			return errors.New("dial tcp 10.1.2.3:3306: access denied for user 'cmin'@'10.1.2.4'")
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	for range 50 {
		rec := call(srv, "GET", "/readyz", self, remote, "")
		if rec.Code != 503 || strings.Contains(rec.Body.String(), "10.1.2.3") || !strings.Contains(rec.Body.String(), "mailbox m") {
			t.Fatalf("/readyz without a token: %d %s", rec.Code, rec.Body)
		}
	}
	if runs != 1 {
		t.Errorf("50 calls within the cache ran the checks %d times", runs)
	}
	rec := call(srv, "GET", "/readyz", self, remote, "", "Authorization", "Bearer "+readTok)
	if rec.Code != 503 || !strings.Contains(rec.Body.String(), "access denied for user") {
		t.Errorf("/readyz with a token: %d %s", rec.Code, rec.Body)
	}
	clk.Advance(2 * time.Second)
	call(srv, "GET", "/readyz", self, remote, "")
	if runs != 2 {
		t.Errorf("after the cache period: %d runs", runs)
	}
}
