package console

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	g "maragu.dev/gomponents"
	h "maragu.dev/gomponents/html"

	"github.com/msgx/msgx/admin"
	"github.com/msgx/msgx/backoff"
	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/pipeline/sis"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

const (
	readTok = "read-token-0123456789"
	opTok   = "operator-token-0123456789"
	hostile = `<script>window.__pwned=1</script>`
)

// proc fails "flaky" with INFRA until healed and anything that does not
// start with "ok" as MALFORMED.
type proc struct{ healed atomic.Bool }

func (p *proc) Decode(b []byte) (inbox.Decoded, error) {
	s := string(b)
	if s != "flaky" && !strings.HasPrefix(s, "ok") {
		return inbox.Decoded{}, inbox.Failf(inbox.Malformed, "not a message: %s", s)
	}
	return inbox.Decoded{Kind: s}, nil
}

func (p *proc) Process(_ context.Context, _ store.Tx, m *inbox.Message) (inbox.Outcome, error) {
	if m.Kind == "flaky" && !p.healed.Load() {
		return inbox.Outcome{}, inbox.Failf(inbox.Infra, "downstream unavailable")
	}
	return inbox.Done(), nil
}

type fixture struct {
	con *Console
	db  *store.DB
	p   *proc
}

// consoleOver is the console over an admin server of cfg on db.
func consoleOver(t *testing.T, db *store.DB, cfg admin.Config) *fixture {
	t.Helper()
	cfg.DB = db
	adm, err := admin.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	con, err := New(adm)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{con: con, db: db}
}

// setup runs a stream with a MALFORMED dead letter carrying a script (id 2)
// and an INFRA one (id 3), and the console over its admin server.
func setup(t *testing.T, db *store.DB, queries ...map[string]admin.QueryFunc) *fixture {
	ctx, cancel := context.WithCancel(context.Background())
	p := &proc{}
	eng, err := inbox.New(db, "s1", p, inbox.WithMaxAttempts(1), inbox.WithPollInterval(10*time.Millisecond),
		inbox.WithBackoff(backoff.Policy{MaxAttempts: 1, Initial: time.Millisecond, Max: time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	cfg := admin.Config{DB: db, Streams: []admin.Stream{{Name: "s1", Engine: eng}}, Targets: []string{"t1"},
		ReadToken: readTok, OperatorToken: opTok, Hosts: []string{"example.com"}, Unavailable: map[string]string{"flights": "not available: the SIS pipeline is not enabled"}}
	if len(queries) > 0 {
		cfg.Queries = queries[0]
	}
	f := consoleOver(t, db, cfg)
	f.p = p
	if _, err := eng.Enqueue(ctx, inbox.Incoming{ID: 1, Payload: []byte("ok")}, inbox.Incoming{ID: 2, Payload: []byte(hostile)},
		inbox.Incoming{ID: 3, Payload: []byte("flaky")}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the stream settles: 1 message processed, 2 dead", 20*time.Second, func() bool {
		c, err := inbox.Counts(ctx, db, "s1")
		return err == nil && c[inbox.Succeeded] == 1 && c[inbox.Dead] == 2
	})
	return f
}

type resp struct {
	code int
	body string
	hdr  http.Header
}

func (f *fixture) do(t *testing.T, method, path, cookie string, form url.Values, hdr ...string) resp {
	t.Helper()
	var req *http.Request
	if form != nil {
		req = httptest.NewRequest(method, path, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	} else {
		req = httptest.NewRequest(method, path, nil)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	if cookie != "" {
		req.AddCookie(&http.Cookie{Name: cookieName, Value: cookie})
	}
	rec := httptest.NewRecorder()
	f.con.ServeHTTP(rec, req)
	return resp{rec.Code, rec.Body.String(), rec.Header()}
}

// login posts the token and returns the session cookie's value.
func (f *fixture) login(t *testing.T, tok string) string {
	t.Helper()
	r := f.do(t, "POST", "/console/login", "", url.Values{"token": {tok}, "name": {"night shift"}})
	if r.code != http.StatusSeeOther {
		t.Fatalf("login with %q: %d %s", tok, r.code, r.body)
	}
	for _, c := range (&http.Response{Header: r.hdr}).Cookies() {
		if c.Name == cookieName {
			if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != Prefix {
				t.Errorf("session cookie: HttpOnly %v SameSite %v Path %q", c.HttpOnly, c.SameSite, c.Path)
			}
			return c.Value
		}
	}
	t.Fatal("login set no session cookie")
	return ""
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

func csrfOf(t *testing.T, page string) string {
	t.Helper()
	m := csrfRE.FindStringSubmatch(page)
	if m == nil {
		t.Fatal("the page carries no CSRF token")
	}
	return m[1]
}

func audits(t *testing.T, db *store.DB) int {
	var n int
	if err := db.QueryRow(context.Background(), "SELECT COUNT(*) FROM msgx_admin_audit").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestLogin(t *testing.T) {
	f := setup(t, storetest.NewPostgres(t, store.WithMigrate(sis.Schema(), admin.Schema())))
	if r := f.do(t, "GET", "/console/", "", nil); r.code != http.StatusSeeOther || r.hdr.Get("Location") != "/console/login" {
		t.Errorf("overview without a session: %d to %q", r.code, r.hdr.Get("Location"))
	}
	if r := f.do(t, "GET", "/console/fragment/overview", "", nil, "X-Console-Fragment", "1"); r.code != http.StatusUnauthorized {
		t.Errorf("fragment without a session: %d", r.code)
	}
	if r := f.do(t, "POST", "/console/login", "", url.Values{"token": {"wrong-token-0123456789"}}); r.code != http.StatusUnauthorized || r.hdr.Get("Set-Cookie") != "" {
		t.Errorf("login with a wrong token: %d, cookie %q", r.code, r.hdr.Get("Set-Cookie"))
	}
	if r := f.do(t, "POST", "/console/login", "", url.Values{"token": {opTok}}, "Origin", "http://evil.example"); r.code != http.StatusForbidden {
		t.Errorf("login posted from another origin: %d", r.code)
	}
	if r := f.do(t, "POST", "/console/login", "", url.Values{"token": {opTok}}, "Sec-Fetch-Site", "cross-site"); r.code != http.StatusForbidden {
		t.Errorf("login posted from another site: %d", r.code)
	}
	ck := f.login(t, readTok)
	r := f.do(t, "GET", "/console/", ck, nil)
	if r.code != 200 || !strings.Contains(r.body, "<b>s1</b>") || !strings.Contains(r.body, "night shift") {
		t.Fatalf("overview: %d\n%s", r.code, r.body)
	}
	if csp := r.hdr.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
		t.Errorf("CSP: %q", csp)
	}
	// A tampered session (the scope raised) is no session.
	body, sig, _ := strings.Cut(ck, ".")
	forged := f.con.encode(session{Scope: admin.Operator, ID: "x", Expires: time.Now().Add(time.Hour).Unix()})
	forgedBody, _, _ := strings.Cut(forged, ".")
	for _, bad := range []string{forgedBody + "." + sig, body + "." + sig[:len(sig)-2] + "AA", "garbage"} {
		if r := f.do(t, "GET", "/console/", bad, nil); r.code != http.StatusSeeOther {
			t.Errorf("tampered cookie %q: %d", bad, r.code)
		}
	}
	// An expired session.
	old := f.con.encode(session{Scope: admin.Read, ID: "y", Expires: time.Now().Add(-time.Second).Unix()})
	if r := f.do(t, "GET", "/console/", old, nil); r.code != http.StatusSeeOther {
		t.Errorf("expired session: %d", r.code)
	}
	// Log out: the cookie is cleared.
	if r := f.do(t, "POST", "/console/logout", ck, url.Values{"csrf": {f.con.csrf(mustDecode(t, f.con, ck))}}); r.code != http.StatusSeeOther || !strings.Contains(r.hdr.Get("Set-Cookie"), "Max-Age=0") {
		t.Errorf("logout: %d %q", r.code, r.hdr.Get("Set-Cookie"))
	}
}

func mustDecode(t *testing.T, c *Console, v string) session {
	s, ok := c.decode(v)
	if !ok {
		t.Fatal("the session cookie does not decode")
	}
	return s
}

func TestEscaping(t *testing.T) {
	storetest.Each(t, []store.Line{sis.Schema(), admin.Schema()}, func(t *testing.T, db *store.DB) {
		f := setup(t, db)
		ck := f.login(t, readTok)
		for _, path := range []string{"/console/dead/inbox/s1/2", "/console/dead", "/console/"} {
			r := f.do(t, "GET", path, ck, nil)
			if r.code != 200 {
				t.Fatalf("%s: %d\n%s", path, r.code, r.body)
			}
			if strings.Contains(r.body, "<script>window") {
				t.Errorf("%s renders the hostile payload as markup", path)
			}
		}
		r := f.do(t, "GET", "/console/dead/inbox/s1/2", ck, nil)
		if !strings.Contains(r.body, "&lt;script&gt;window.__pwned=1&lt;/script&gt;") {
			t.Errorf("the payload is not shown escaped:\n%s", r.body)
		}
		if !strings.Contains(r.body, "MALFORMED") || !strings.Contains(r.body, "not replayable") {
			t.Errorf("the dead letter's class is not shown")
		}
		// The other pages render too.
		for _, path := range []string{"/console/gaps", "/console/requests", "/console/replay", "/console/dead?class=INFRA&since=2000-01-01T00:00"} {
			if r := f.do(t, "GET", path, ck, nil); r.code != 200 {
				t.Errorf("%s: %d\n%s", path, r.code, r.body)
			}
		}
		r = f.do(t, "GET", "/console/flights", ck, nil)
		if r.code != 200 || !strings.Contains(r.body, "not available: the SIS pipeline is not enabled") {
			t.Errorf("flights without the pipeline: %d\n%s", r.code, r.body)
		}
	})
}

func TestCSRF(t *testing.T) {
	f := setup(t, storetest.NewPostgres(t, store.WithMigrate(sis.Schema(), admin.Schema())))
	ck := f.login(t, opTok)
	page := f.do(t, "GET", "/console/replay?source=inbox&stream=s1&ids=3", ck, nil)
	tok := csrfOf(t, page.body)
	form := url.Values{"source": {"inbox"}, "stream": {"s1"}, "ids": {"3"}, "reason": {"healed"}}
	flipped := "0" + tok[1:]
	if tok[0] == '0' {
		flipped = "1" + tok[1:]
	}
	for _, bad := range []string{"", flipped, f.con.csrf(session{ID: "another session"})} {
		form.Set("csrf", bad)
		if r := f.do(t, "POST", "/console/replay/run", ck, form); r.code != http.StatusForbidden {
			t.Errorf("replay with CSRF token %q: %d", bad, r.code)
		}
	}
	if n := audits(t, f.db); n != 0 {
		t.Fatalf("refused POSTs were carried out: %d audit rows", n)
	}
	row, _ := inbox.Get(context.Background(), f.db, "s1", 3)
	if row.Status != inbox.Dead {
		t.Fatalf("message 3 is %s after refused replays", row.Status)
	}

	// With the token: dry run, then the replay, each audited.
	f.p.healed.Store(true)
	form.Set("csrf", tok)
	r := f.do(t, "POST", "/console/replay/preview", ck, form)
	if r.code != 200 || !strings.Contains(r.body, "would be replayed") || !strings.Contains(r.body, `id="confirm"`) {
		t.Fatalf("dry run: %d\n%s", r.code, r.body)
	}
	r = f.do(t, "POST", "/console/replay/run", ck, form)
	if r.code != 200 || !strings.Contains(r.body, "1 message(s) replayed") {
		t.Fatalf("replay: %d\n%s", r.code, r.body)
	}
	var actor string
	if err := f.db.QueryRow(context.Background(), "SELECT actor FROM msgx_admin_audit WHERE NOT dry_run").Scan(&actor); err != nil || actor != `operator (operator token, console; note "night shift")` {
		t.Errorf("the replay's audit row: %q %v", actor, err)
	}
	if n := audits(t, f.db); n != 2 {
		t.Errorf("audit rows: %d, want the dry run and the replay", n)
	}
	testkit.Eventually(t, "the replayed message settles (the progress fragment says it is done)", 20*time.Second, func() bool {
		r = f.do(t, "GET", "/console/fragment/progress?source=inbox&stream=s1&ids=3", ck, nil, "X-Console-Fragment", "1")
		return r.hdr.Get("X-Console-Done") == "1"
	})
	if !strings.Contains(r.body, "SUCCEEDED") {
		t.Errorf("progress after the replay: %s", r.body)
	}
}

func TestReadScope(t *testing.T) {
	f := setup(t, storetest.NewPostgres(t, store.WithMigrate(sis.Schema(), admin.Schema())))
	ck := f.login(t, readTok)
	for _, path := range []string{"/console/dead", "/console/dead/inbox/s1/3", "/console/replay?source=inbox&stream=s1&ids=3"} {
		r := f.do(t, "GET", path, ck, nil)
		if r.code != 200 {
			t.Fatalf("%s: %d", path, r.code)
		}
		for _, action := range []string{`type="checkbox"`, "Replay this", `id="dry-run"`, "Replay the selected", "replay/preview"} {
			if strings.Contains(r.body, action) {
				t.Errorf("%s shows the read scope an action: %s", path, action)
			}
		}
	}
	// The logout form carries the session's CSRF token; a read session's
	// valid token still does not let it replay.
	tok := csrfOf(t, f.do(t, "GET", "/console/", ck, nil).body)
	form := url.Values{"csrf": {tok}, "source": {"inbox"}, "stream": {"s1"}, "ids": {"3"}, "reason": {"try"}}
	for _, path := range []string{"/console/replay/preview", "/console/replay/run"} {
		if r := f.do(t, "POST", path, ck, form); r.code != http.StatusForbidden || !strings.Contains(r.body, "operator token") {
			t.Errorf("POST %s with the read scope: %d", path, r.code)
		}
	}
	if n := audits(t, f.db); n != 0 {
		t.Errorf("the read scope's POSTs left %d audit rows", n)
	}
	// The operator sees the actions.
	op := f.login(t, opTok)
	if r := f.do(t, "GET", "/console/dead", op, nil); !strings.Contains(r.body, `type="checkbox"`) {
		t.Error("the operator sees no selection on the dead letters")
	}
}

func TestChart(t *testing.T) {
	h := newHistory(3)
	for i := 1; i <= 5; i++ {
		h.add(sample{HeadAge: float64(i)})
	}
	got := h.all()
	if len(got) != 3 || got[0].HeadAge != 3 || got[2].HeadAge != 5 {
		t.Fatalf("ring: %+v", got)
	}
	c := makeChart("x", "", []float64{0, 10}, age)
	if c.Empty || c.Last != "10s" || c.Max != "10s" || strings.Count(c.Points, ",") != 2 {
		t.Errorf("chart: %+v", c)
	}
}

func TestQueryAndGaps(t *testing.T) {
	db := storetest.NewPostgres(t, store.WithMigrate(sis.Schema(), admin.Schema()))
	requests := func(_ context.Context, p map[string][]string) (any, error) {
		return []map[string]any{{"id": p["status"][0], "status": hostile, "version": 2}}, nil
	}
	f := setup(t, db, map[string]admin.QueryFunc{"requests": requests})
	ctx := context.Background()
	if _, err := db.Exec(ctx, "INSERT INTO msgx_inbox_gap (stream, from_id, to_id, first_seen_at, declared_at) VALUES ('s1', 5, 7, now(), now())"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, "INSERT INTO msgx_inbox_late (stream, msg_id, gap_id, action, found_at) SELECT 's1', 6, id, 'taken', now() FROM msgx_inbox_gap"); err != nil {
		t.Fatal(err)
	}
	ck := f.login(t, readTok)
	r := f.do(t, "GET", "/console/requests?status=SU100", ck, nil)
	if r.code != 200 || !strings.Contains(r.body, "<td>SU100</td>") || !strings.Contains(r.body, "&lt;script&gt;") || strings.Contains(r.body, "<script>window") {
		t.Errorf("requests from a registered query: %d\n%s", r.code, r.body)
	}
	r = f.do(t, "GET", "/console/gaps", ck, nil)
	gapRow := regexp.MustCompile(`<td>s1</td><td class="num">5</td><td class="num">7</td><td class="num">3</td>.*<td class="num">1</td></tr>`)
	if r.code != 200 || !gapRow.MatchString(r.body) {
		t.Errorf("gaps: %d\n%s", r.code, r.body)
	}
}

// The overview's relay table says which target is paused on an unavailable
// broker, since when, and the last error, and which target no relay serves.
func TestOverviewShowsPausedAndUnservedTargets(t *testing.T) {
	db := storetest.NewPostgres(t, store.WithMigrate(sis.Schema(), admin.Schema()))
	since := time.Date(2026, 12, 6, 2, 57, 0, 0, time.UTC)
	f := consoleOver(t, db, admin.Config{Targets: []string{"kafka:msg", "kafka:schd"}, ReadToken: readTok, Hosts: []string{"example.com"},
		Clock: clock.NewFake(since.Add(5 * time.Minute)),
		TargetStates: func() []outbox.TargetState {
			return []outbox.TargetState{{Target: "kafka:msg"}, {Target: "kafka:schd", Paused: true, PausedSince: since,
				LastError: "dial tcp 127.0.0.1:9092: connection refused", LastErrorAt: since.Add(3 * time.Minute)}}
		}})
	if err := db.InTx(context.Background(), func(ctx context.Context, tx store.Tx) error {
		return outbox.Enqueue(ctx, tx, time.Now(), outbox.Event{Target: "kafka:ref", Topic: "sis.ref", Key: "k", Payload: []byte("{}")})
	}); err != nil {
		t.Fatal(err)
	}
	r := f.do(t, "GET", "/console/", f.login(t, readTok), nil)
	for _, want := range []string{
		"paused</span>: broker unavailable since 2026-12-06 02:57:00Z <span class=\"muted\">(5 min ago)</span>",
		"2026-12-06 03:00:00Z <span class=\"muted\">(2 min ago)</span> <span class=\"reason\">dial tcp 127.0.0.1:9092: connection refused</span>",
		"<b>kafka:ref</b></td><td><span class=\"bad\">no relay</span>",
	} {
		if !strings.Contains(r.body, want) {
			t.Errorf("the overview lacks %q:\n%s", want, r.body)
		}
	}
}

// rejectFirst is a broker that rejects the event ev-1 and takes the rest.
type rejectFirst struct{}

func (rejectFirst) SendConfirmed(_ context.Context, _ string, msgs ...*broker.Message) error {
	for _, m := range msgs {
		if m.Header(broker.HeaderEventID) == "ev-1" {
			return driver.Classify(driver.Rejected, errors.New("message too large"))
		}
	}
	return nil
}

// The overview names the keys of a per-key target held by a DEAD event, the
// event holding each (a link to it) and how many events wait.
func TestOverviewShowsBlockedKeys(t *testing.T) {
	db := storetest.NewSQLite(t, store.WithMigrate(sis.Schema(), admin.Schema()))
	ctx := context.Background()
	r, err := outbox.NewRelay(db, outbox.Target("t1", rejectFirst{}, outbox.PerKey))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		return outbox.Enqueue(ctx, tx, time.Now(),
			outbox.Event{ID: "ev-1", Target: "t1", Topic: "x", Key: "<k1>", Payload: []byte("{}")},
			outbox.Event{ID: "ev-2", Target: "t1", Topic: "x", Key: "<k1>", Payload: []byte("{}")})
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	f := consoleOver(t, db, admin.Config{Targets: []string{"t1"}, TargetStates: r.Targets, ReadToken: readTok, OperatorToken: opTok, Hosts: []string{"example.com"}})
	page := f.do(t, "GET", "/console/", f.login(t, readTok), nil)
	if want := `1: <span class="blocked">&lt;k1&gt; held by <a href="/console/dead/outbox/ev-1">ev-1</a>, 1 waiting</span>;`; page.code != 200 || !strings.Contains(page.body, want) {
		t.Fatalf("overview lacks %s:\n%d %s", want, page.code, page.body)
	}
}

// The overview names each stream's lease holder by instance id (the ages
// beside times: TestOverviewShowsPausedAndUnservedTargets).
func TestOverviewShowsLeaseHolderAndAges(t *testing.T) {
	f := setup(t, storetest.NewPostgres(t, store.WithMigrate(sis.Schema(), admin.Schema())))
	r := f.do(t, "GET", "/console/", f.login(t, readTok), nil)
	holder := regexp.MustCompile(`<td><code>[^<]+</code> <span class="ok">\(this instance\)</span><div class="muted">lease until [^<]+</div></td>`)
	if r.code != 200 || !holder.MatchString(r.body) {
		t.Errorf("the overview's streams:\n%s", r.body)
	}
}

func TestAgo(t *testing.T) {
	now := time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		at   time.Time
		want string
	}{{now.Add(-3 * time.Minute), "3 min ago"}, {now.Add(-26*time.Hour - 5*time.Minute), "26 h 5 min ago"}, {now.Add(-72 * time.Hour), "3 d 0 h ago"},
		{now.Add(10 * time.Second), "in 10 s"}, {time.Time{}, "—"}, {now, "just now"}} {
		if got := ago(c.at, now); got != c.want {
			t.Errorf("ago(%v) = %q, want %q", c.at, got, c.want)
		}
	}
	if got := ago((*time.Time)(nil), now); got != "—" {
		t.Errorf("ago(nil) = %q", got)
	}
}

// A page that fails to render answers 500 with a plain message, never the
// part rendered before the failure.
func TestRenderFailureAnswers500(t *testing.T) {
	c := &Console{log: slog.New(slog.DiscardHandler)}
	rec := httptest.NewRecorder()
	broken := g.NodeFunc(func(io.Writer) error { return errors.New("broken") })
	c.write(rec, http.StatusOK, "broken", h.Main(h.P(g.Text("half a page")), broken))
	if body := rec.Body.String(); rec.Code != http.StatusInternalServerError || strings.Contains(body, "half a page") ||
		!strings.Contains(body, "the page could not be rendered") {
		t.Errorf("a page failing to render: %d %q", rec.Code, body)
	}
}
