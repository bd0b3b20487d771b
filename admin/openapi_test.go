package admin_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/msgx/msgx/admin"
	"github.com/msgx/msgx/backoff"
	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/broker/kafka"
	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/pipeline/routepassport"
	"github.com/msgx/msgx/pipeline/sis"
	"github.com/msgx/msgx/source/mailbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

const (
	readToken     = "read-token-0123456789"
	operatorToken = "operator-token-0123456789"
	wrongToken    = "wrong-token-0123456789"
)

// loadDoc loads the served document and checks that it is valid OpenAPI 3.
func loadDoc(t *testing.T) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(admin.OpenAPI())
	if err != nil {
		t.Fatalf("openapi.json does not load: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("openapi.json is not a valid OpenAPI 3 document: %v", err)
	}
	return doc
}

// operations lists the document's operations as ServeMux patterns
// ("GET /v1/status").
func operations(doc *openapi3.T) []string {
	var out []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			out = append(out, method+" "+path)
		}
	}
	slices.Sort(out)
	return out
}

// The document is valid OpenAPI 3, the copy in docs/ is identical, and the
// routes the server registers are exactly the documented operations.
func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	doc := loadDoc(t)
	inDocs, err := os.ReadFile("../docs/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(inDocs, admin.OpenAPI()) {
		t.Error("docs/openapi.json differs from admin/openapi.json: copy admin/openapi.json over it")
	}
	srv, err := admin.New(admin.Config{DB: storetest.NewSQLite(t), Gatherer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	routes := srv.Routes()
	slices.Sort(routes)
	documented := slices.DeleteFunc(operations(doc), func(op string) bool {
		if pipelineOf(doc, op) == "" {
			return false
		}
		if slices.Contains(routes, op) {
			t.Errorf("%s is documented as a pipeline's, but the admin server serves it", op)
		}
		return true
	})
	for _, r := range routes {
		if !slices.Contains(documented, r) {
			t.Errorf("the server serves %s; the document does not describe it", r)
		}
	}
	for _, op := range documented {
		if !slices.Contains(routes, op) {
			t.Errorf("the document describes %s; the server does not serve it", op)
		}
	}
}

// pipelineOf is the pipeline that mounts the operation on the admin
// listener (its x-msgx-pipeline), "" for the admin server's own.
func pipelineOf(doc *openapi3.T, op string) string {
	method, path, _ := strings.Cut(op, " ")
	name, _ := doc.Paths.Find(path).GetOperation(method).Extensions["x-msgx-pipeline"].(string)
	return name
}

// proc decodes "bad" as MALFORMED and fails "flaky" with INFRA.
type proc struct{}

func (proc) Decode(b []byte) (inbox.Decoded, error) {
	if string(b) == "bad" {
		return inbox.Decoded{}, inbox.Failf(inbox.Malformed, "not a message")
	}
	return inbox.Decoded{Kind: string(b)}, nil
}

func (proc) Process(_ context.Context, _ store.Tx, m *inbox.Message) (inbox.Outcome, error) {
	if m.Kind == "flaky" {
		return inbox.Outcome{}, inbox.Failf(inbox.Infra, "downstream unavailable")
	}
	return inbox.Done(), nil
}

// rejectA1 is a broker that rejects the event ev-A-1 and takes the rest.
type rejectA1 struct{}

func (rejectA1) SendConfirmed(_ context.Context, _ string, msgs ...*broker.Message) error {
	for _, m := range msgs {
		if m.Header(broker.HeaderEventID) == "ev-A-1" {
			return driver.Classify(driver.Rejected, errors.New("message too large"))
		}
	}
	return nil
}

// testServer is an admin server under test: over HTTP on loopback, or
// (remote set) called directly as a client from another address would.
type testServer struct {
	h      http.Handler
	url    string
	remote string
}

// apiCase is one request and the status the server must answer.
type apiCase struct {
	name                string
	on                  *testServer
	method, path, token string
	body                string
	header              []string // name, value, …
	host                string
	want                int
	// conforms: the request is one the document describes (validated as
	// well); the others are bad on purpose.
	conforms bool
}

func (ts *testServer) send(t *testing.T, c apiCase) (*http.Request, *http.Response, []byte) {
	t.Helper()
	build := func(target string) *http.Request {
		var body io.Reader
		if c.body != "" {
			body = strings.NewReader(c.body)
		}
		req, err := http.NewRequestWithContext(context.Background(), c.method, target, body)
		if err != nil {
			t.Fatal(err)
		}
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		if c.body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		req.Header.Set("X-Msgx-Actor", "openapi-test")
		for i := 0; i+1 < len(c.header); i += 2 {
			req.Header.Set(c.header[i], c.header[i+1])
		}
		if c.host != "" {
			req.Host = c.host
		}
		return req
	}
	var resp *http.Response
	if ts.remote != "" {
		req := build("http://127.0.0.1:8081" + c.path)
		req.RemoteAddr = ts.remote
		rec := httptest.NewRecorder()
		ts.h.ServeHTTP(rec, req)
		resp = rec.Result()
	} else {
		var err error
		if resp, err = http.DefaultClient.Do(build(ts.url + c.path)); err != nil {
			t.Fatal(err)
		}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return build("http://127.0.0.1:8081" + c.path), resp, body
}

// fixture is a PostgreSQL store with something in every list: inbox
// messages succeeded and dead (MALFORMED, EXHAUSTED) on stream s1, a stream
// s2 that runs elsewhere, and on the per-key target p a DEAD event ev-A-1
// holding key A with ev-A-2 waiting behind it.
func fixture(t *testing.T, doc *openapi3.T) servers {
	db := storetest.NewPostgres(t, store.WithMigrate(admin.Schema(), sis.Schema()))
	ctx, cancel := context.WithCancel(context.Background())
	eng, err := inbox.New(db, "s1", proc{}, inbox.WithMaxAttempts(1), inbox.WithPollInterval(10*time.Millisecond),
		inbox.WithBackoff(backoff.Policy{MaxAttempts: 1, Initial: time.Millisecond, Max: time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	if _, err := eng.Enqueue(ctx, inbox.Incoming{ID: 1, Payload: []byte("ok")}, inbox.Incoming{ID: 2, Payload: []byte("bad")},
		inbox.Incoming{ID: 3, Payload: []byte("flaky")}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := inbox.Counts(ctx, db, "s1")
		if err == nil && c[inbox.Succeeded] == 1 && c[inbox.Dead] == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stream did not settle: %v %v", c, err)
		}
		time.Sleep(10 * time.Millisecond)
	}

	clk := clock.NewFake(time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC))
	relay, err := outbox.NewRelay(db, outbox.WithClock(clk), outbox.Target("p", rejectA1{}, outbox.PerKey))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { relay.Close() })
	if err := db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		return outbox.Enqueue(ctx, tx, clk.Now(),
			outbox.Event{ID: "ev-A-1", Target: "p", Topic: "x", Key: "A", Payload: []byte("{}")},
			outbox.Event{ID: "ev-A-2", Target: "p", Topic: "x", Key: "A", Payload: []byte("{}")})
	}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := relay.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Minute) // a rejected batch's retry is due
	}
	if rec, err := outbox.Get(ctx, db, "ev-A-1"); err != nil || rec.Status != outbox.StatusDead {
		t.Fatalf("ev-A-1: %+v %v", rec, err)
	}

	streams := []admin.Stream{{Name: "s1", Engine: eng}, {Name: "s2"}}
	quiet := slog.New(slog.DiscardHandler)
	serve := func(cfg admin.Config, pipelines map[string]http.Handler) *testServer {
		cfg.DB, cfg.Streams, cfg.Targets, cfg.TargetStates = db, streams, []string{"p"}, relay.Targets
		cfg.Gatherer, cfg.Logger = prometheus.NewRegistry(), quiet
		srv, err := admin.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		// The listener as the service builds it: the admin server, and
		// each pipeline's handlers behind the operator scope.
		mux := http.NewServeMux()
		mux.Handle("/", srv)
		for _, op := range operations(doc) {
			if name := pipelineOf(doc, op); name != "" {
				mux.Handle(op, srv.RequireOperator(pipelines[name]))
			}
		}
		hs := httptest.NewServer(mux)
		t.Cleanup(hs.Close)
		return &testServer{h: mux, url: hs.URL}
	}

	// The SIS requests: an outbound mailbox on MariaDB; in shadow mode
	// none; one whose server cannot be reached; one without its table.
	coordinator := func(out sis.Outbound, opts ...sis.CoordinatorOption) http.Handler {
		c, err := sis.NewCoordinator(db, out, append(opts, sis.WithRequestLogger(quiet))...)
		if err != nil {
			t.Fatal(err)
		}
		return c.Handler()
	}
	raw := storetest.OpenMySQL(t)
	outbound, err := mailbox.NewOutbound(raw, mailbox.WithOutboundTable(storetest.UniqueName("t_openapi_coutmsgs_")))
	if err != nil {
		t.Fatal(err)
	}
	if err := outbound.Create(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = outbound.Drop(context.Background()) })
	missing, err := mailbox.NewOutbound(raw, mailbox.WithOutboundTable(storetest.UniqueName("t_openapi_missing_")))
	if err != nil {
		t.Fatal(err)
	}
	away, err := sql.Open("mysql", "root@tcp(127.0.0.1:1)/test?parseTime=true") // nothing listens on port 1
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = away.Close() })
	unreachable, err := mailbox.NewOutbound(away)
	if err != nil {
		t.Fatal(err)
	}

	// The route passports' test controller on a Kafka broker (kfake).
	kf, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, routepassport.InputTopic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kf.Close)
	b := broker.New("kafka", kafka.New(kafka.SeedBrokers(kf.ListenAddrs()...), kafka.WithLogger(quiet)), broker.WithLogger(quiet))
	startCtx, cancelStart := context.WithTimeout(ctx, 30*time.Second)
	defer cancelStart()
	if err := b.Start(startCtx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = b.Stop(ctx)
	})
	controller := func(enabled bool) http.Handler {
		p, err := routepassport.New(db, b, routepassport.WithTestController(enabled), routepassport.WithMaxRecordBytes(maxRecord),
			routepassport.WithLogger(quiet), routepassport.WithRegisterer(prometheus.NewRegistry()))
		if err != nil {
			t.Fatal(err)
		}
		return p.TestController()
	}

	working := map[string]http.Handler{"sisrequests": coordinator(outbound), "routepassport": controller(true)}
	off := controller(false)
	tokens := admin.Config{ReadToken: readToken, OperatorToken: operatorToken, Throttle: admin.Throttle{Free: 1000}}
	with := func(cfg admin.Config, edit func(*admin.Config)) admin.Config { edit(&cfg); return cfg }
	var s servers
	s.main = serve(with(tokens, func(c *admin.Config) {
		c.Queries = map[string]admin.QueryFunc{
			"requests": sis.RequestsQuery(db), "flights": sis.FlightsQuery(db),
			"flight-history": sis.FlightHistoryQuery(db), "message-effects": sis.MessageEffectsQuery(db),
		}
	}), working)
	// No query registered, a readiness check failing, the pipelines in
	// shadow mode and without their test controller.
	s.bare = serve(with(tokens, func(c *admin.Config) {
		c.Unavailable = map[string]string{"flights": "not available: the SIS pipeline is not enabled"}
		c.Checks = []admin.Check{{Name: "broker b", Check: func(context.Context) error { return errors.New("connection refused") }}}
	}), map[string]http.Handler{"sisrequests": coordinator(nil, sis.WithShadow(true)), "routepassport": off})
	s.down = serve(tokens, map[string]http.Handler{"sisrequests": coordinator(unreachable), "routepassport": off})
	s.broken = serve(tokens, map[string]http.Handler{"sisrequests": coordinator(missing), "routepassport": off})
	// Throttled: two wrong tokens lock this client out for an hour.
	s.locked = serve(with(tokens, func(c *admin.Config) { c.Throttle = admin.Throttle{Free: 1, Base: time.Hour} }), working)
	for range 2 {
		if _, resp, _ := s.locked.send(t, apiCase{method: "GET", path: "/v1/status", token: wrongToken}); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("a wrong token: %d", resp.StatusCode)
		}
	}
	// No token configured, called from another host.
	s.open = serve(admin.Config{}, working)
	s.open.remote = "192.0.2.1:40000"
	return s
}

// maxRecord is the test controller's record limit.
const maxRecord = 4096

// servers are the admin listeners under test (see fixture).
type servers struct{ main, bare, down, broken, locked, open *testServer }

// Every documented operation answers, for good and bad requests, with a
// status the document lists for it and a body of the documented shape; and
// every documented status is answered by some request here.
func TestOpenAPIAnswersAsDocumented(t *testing.T) {
	doc := loadDoc(t)
	doc.Servers = nil // any host: the test servers listen on their own ports
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	s := fixture(t, doc)
	main, bare, locked, open := s.main, s.bare, s.locked, s.open

	const (
		dryInbox  = `{"source":"inbox","stream":"s1","ids":["2","3","9"],"dry_run":true,"reason":"fixed downstream"}`
		dryOutbox = `{"source":"outbox","target":"p","dry_run":true,"reason":"look"}`
		drySkip   = `{"ids":["ev-A-1","nope"],"dry_run":true,"reason":"payload cannot be fixed"}`
		rqrd      = `{"kind":"RQRD","refType":"GLST"}`
	)
	notJSON := []string{"Content-Type", "text/plain"}
	crossSite := []string{"Sec-Fetch-Site", "cross-site"}
	cases := []apiCase{
		{name: "status", on: main, method: "GET", path: "/v1/status", token: readToken, want: 200, conforms: true},
		{name: "status, operator", on: main, method: "GET", path: "/v1/status", token: operatorToken, want: 200, conforms: true},
		{name: "status, a wrong token", on: main, method: "GET", path: "/v1/status", token: wrongToken, want: 401},

		{name: "dead", on: main, method: "GET", path: "/v1/dead", token: readToken, want: 200, conforms: true},
		{name: "dead inbox", on: main, method: "GET", path: "/v1/dead?source=inbox&stream=s1&class=EXHAUSTED&limit=5", token: readToken, want: 200, conforms: true},
		{name: "dead outbox", on: main, method: "GET", path: "/v1/dead?source=outbox&target=p&after=0", token: readToken, want: 200, conforms: true},
		{name: "dead, a bad limit", on: main, method: "GET", path: "/v1/dead?limit=x", token: readToken, want: 400},
		{name: "dead, a limit too large", on: main, method: "GET", path: "/v1/dead?limit=5000", token: readToken, want: 400},
		{name: "dead, an unknown parameter", on: main, method: "GET", path: "/v1/dead?nope=1", token: readToken, want: 400},
		{name: "dead, a repeated parameter", on: main, method: "GET", path: "/v1/dead?stream=s1&stream=s2", token: readToken, want: 400},
		{name: "dead, a bad source", on: main, method: "GET", path: "/v1/dead?source=both", token: readToken, want: 400},
		{name: "dead, a bad class", on: main, method: "GET", path: "/v1/dead?class=1%3B", token: readToken, want: 400},
		{name: "dead, NUL", on: main, method: "GET", path: "/v1/dead?target=%00", token: readToken, want: 400},
		{name: "dead, an unknown stream", on: main, method: "GET", path: "/v1/dead?stream=zz", token: readToken, want: 404},

		{name: "dead message", on: main, method: "GET", path: "/v1/dead/inbox/s1/3", token: readToken, want: 200, conforms: true},
		{name: "a succeeded message", on: main, method: "GET", path: "/v1/dead/inbox/s1/1", token: readToken, want: 200, conforms: true},
		{name: "dead message, not a number", on: main, method: "GET", path: "/v1/dead/inbox/s1/x", token: readToken, want: 400},
		{name: "dead message, unknown", on: main, method: "GET", path: "/v1/dead/inbox/s1/99", token: readToken, want: 404},
		{name: "dead message, an unknown stream", on: main, method: "GET", path: "/v1/dead/inbox/zz/1", token: readToken, want: 404},

		{name: "dead event", on: main, method: "GET", path: "/v1/dead/outbox/ev-A-1", token: readToken, want: 200, conforms: true},
		{name: "dead event, a control character", on: main, method: "GET", path: "/v1/dead/outbox/a%01", token: readToken, want: 400},
		{name: "dead event, unknown", on: main, method: "GET", path: "/v1/dead/outbox/nope", token: readToken, want: 404},

		{name: "replay preview, inbox ids", on: main, method: "POST", path: "/v1/replay", token: operatorToken, body: dryInbox, want: 200, conforms: true},
		{name: "replay preview, inbox class", on: main, method: "POST", path: "/v1/replay", token: operatorToken,
			body: `{"source":"inbox","stream":"s1","class":"exhausted","dry_run":true,"reason":"r","limit":10}`, want: 200, conforms: true},
		{name: "replay preview, outbox target", on: main, method: "POST", path: "/v1/replay", token: operatorToken, body: dryOutbox, want: 200, conforms: true},
		{name: "replay preview, outbox ids", on: main, method: "POST", path: "/v1/replay", token: operatorToken,
			body: `{"source":"outbox","ids":["ev-A-1","ev-A-2","nope"],"dry_run":true,"reason":"look"}`, want: 200, conforms: true},
		{name: "replay, inbox", on: main, method: "POST", path: "/v1/replay", token: operatorToken,
			body: `{"source":"inbox","stream":"s1","ids":["3"],"reason":"fixed downstream"}`, want: 200, conforms: true},
		{name: "replay, a stream running elsewhere", on: main, method: "POST", path: "/v1/replay", token: operatorToken,
			body: `{"source":"inbox","stream":"s2","ids":["1"],"reason":"r"}`, want: 409, conforms: true},
		{name: "replay, an unknown stream", on: main, method: "POST", path: "/v1/replay", token: operatorToken,
			body: `{"source":"inbox","stream":"zz","ids":["1"],"reason":"r"}`, want: 404, conforms: true},
		{name: "replay, no reason", on: main, method: "POST", path: "/v1/replay", token: operatorToken,
			body: `{"source":"inbox","stream":"s1","ids":["3"]}`, want: 400},
		{name: "replay, a bad source", on: main, method: "POST", path: "/v1/replay", token: operatorToken,
			body: `{"source":"both","reason":"r"}`, want: 400},
		{name: "replay, an unknown field", on: main, method: "POST", path: "/v1/replay", token: operatorToken,
			body: `{"source":"inbox","stream":"s1","ids":["3"],"reason":"r","force":true}`, want: 400},
		{name: "replay, not JSON", on: main, method: "POST", path: "/v1/replay", token: operatorToken, body: `source=inbox`, want: 400},
		{name: "replay, a class not replayable", on: main, method: "POST", path: "/v1/replay", token: operatorToken,
			body: `{"source":"inbox","stream":"s1","class":"MALFORMED","reason":"r"}`, want: 400},
		{name: "replay, both class and ids", on: main, method: "POST", path: "/v1/replay", token: operatorToken,
			body: `{"source":"inbox","stream":"s1","class":"INFRA","ids":["3"],"reason":"r"}`, want: 400},
		{name: "replay, a body over 1 MiB", on: main, method: "POST", path: "/v1/replay", token: operatorToken,
			body: `{"source":"inbox","stream":"s1","ids":["3"],"reason":"` + strings.Repeat("x", 1<<20) + `"}`, want: 400},

		{name: "skip preview", on: main, method: "POST", path: "/v1/skip", token: operatorToken, body: drySkip, want: 200, conforms: true},
		{name: "skip, no ids", on: main, method: "POST", path: "/v1/skip", token: operatorToken, body: `{"ids":[],"reason":"r"}`, want: 400},
		{name: "skip, no reason", on: main, method: "POST", path: "/v1/skip", token: operatorToken, body: `{"ids":["ev-A-1"]}`, want: 400},
		{name: "skip, an unknown field", on: main, method: "POST", path: "/v1/skip", token: operatorToken, body: `{"ids":["ev-A-1"],"reason":"r","all":true}`, want: 400},

		{name: "backfill", on: main, method: "GET", path: "/v1/backfill", token: readToken, want: 200, conforms: true},

		{name: "requests", on: main, method: "GET", path: "/v1/requests", token: readToken, want: 200, conforms: true},
		{name: "requests, paged", on: main, method: "GET", path: "/v1/requests?status=sent&before=10&limit=5", token: readToken, want: 200, conforms: true},
		{name: "requests, a bad status", on: main, method: "GET", path: "/v1/requests?status=bogus", token: readToken, want: 400},
		{name: "requests, a bad limit", on: main, method: "GET", path: "/v1/requests?limit=0", token: readToken, want: 400},
		{name: "requests, an unknown parameter", on: main, method: "GET", path: "/v1/requests?flid=1", token: readToken, want: 400},
		{name: "requests, not enabled", on: bare, method: "GET", path: "/v1/requests", token: readToken, want: 501, conforms: true},

		{name: "flights", on: main, method: "GET", path: "/v1/flights", token: readToken, want: 200, conforms: true},
		{name: "flights, filtered", on: main, method: "GET", path: "/v1/flights?day=2026-12-01&status=active&flno=CA1234&flid=A&flid=B,C&after=A&limit=10",
			token: readToken, want: 200, conforms: true},
		{name: "flights, a bad day", on: main, method: "GET", path: "/v1/flights?day=2026-13-45", token: readToken, want: 400},
		{name: "flights, a bad status", on: main, method: "GET", path: "/v1/flights?status=gone", token: readToken, want: 400},
		{name: "flights, a limit too large", on: main, method: "GET", path: "/v1/flights?limit=5000", token: readToken, want: 400},
		{name: "flights, a repeated day", on: main, method: "GET", path: "/v1/flights?day=2026-12-01&day=2026-12-02", token: readToken, want: 400},
		{name: "flights, not UTF-8", on: main, method: "GET", path: "/v1/flights?flno=%FF", token: readToken, want: 400},
		{name: "flights, not enabled", on: bare, method: "GET", path: "/v1/flights", token: readToken, want: 501, conforms: true},
		{name: "flights at the old path", on: main, method: "GET", path: "/all/flights?limit=1", token: readToken, want: 200, conforms: true},
		{name: "flights at the old path, an unknown parameter", on: main, method: "GET", path: "/all/flights?x=1", token: readToken, want: 400},
		{name: "flights at the old path, not enabled", on: bare, method: "GET", path: "/all/flights", token: readToken, want: 501, conforms: true},

		{name: "flight history", on: main, method: "GET", path: "/v1/flights/F1/history?limit=5&before=7", token: readToken, want: 200, conforms: true},
		{name: "flight history, a bad limit", on: main, method: "GET", path: "/v1/flights/F1/history?limit=0", token: readToken, want: 400},
		{name: "flight history, a bad cursor", on: main, method: "GET", path: "/v1/flights/F1/history?before=x", token: readToken, want: 400},
		{name: "flight history, not enabled", on: bare, method: "GET", path: "/v1/flights/F1/history", token: readToken, want: 501, conforms: true},

		{name: "message effects", on: main, method: "GET", path: "/v1/messages/s1/3/effects", token: readToken, want: 200, conforms: true},
		{name: "message effects, not a number", on: main, method: "GET", path: "/v1/messages/s1/x/effects", token: readToken, want: 400},
		{name: "message effects, an unknown parameter", on: main, method: "GET", path: "/v1/messages/s1/3/effects?v=1", token: readToken, want: 400},
		{name: "message effects, not enabled", on: bare, method: "GET", path: "/v1/messages/s1/3/effects", token: readToken, want: 501, conforms: true},

		{name: "send a request", on: main, method: "POST", path: "/v1/requests", token: operatorToken, body: rqrd, want: 201, conforms: true},
		{name: "send a request for flights", on: main, method: "POST", path: "/v1/requests", token: operatorToken,
			body: `{"kind":"RQFD","from":"2026-12-01T00:00:00+08:00","to":"2026-12-02T00:00:00+08:00"}`, want: 201, conforms: true},
		{name: "send a request, an unknown kind", on: main, method: "POST", path: "/v1/requests", token: operatorToken, body: `{"kind":"RQXX"}`, want: 400},
		{name: "send a request, not JSON", on: main, method: "POST", path: "/v1/requests", token: operatorToken, body: `{"kind":`, want: 400},
		{name: "send a request, shadow mode", on: bare, method: "POST", path: "/v1/requests", token: operatorToken, body: rqrd, want: 409, conforms: true},
		{name: "send a request, the mailbox unreachable", on: s.down, method: "POST", path: "/v1/requests", token: operatorToken, body: rqrd, want: 503, conforms: true},
		{name: "send a request, the mailbox refusing", on: s.broken, method: "POST", path: "/v1/requests", token: operatorToken, body: rqrd, want: 502, conforms: true},

		{name: "inject a route passport", on: main, method: "POST", path: "/v1/routepassport/test", token: operatorToken,
			body: `{"routeId":"R-1","name":"n"}`, want: 202, conforms: true},
		{name: "inject a route passport, too large", on: main, method: "POST", path: "/v1/routepassport/test", token: operatorToken,
			body: `{"routeId":"R-1","name":"` + strings.Repeat("n", maxRecord) + `"}`, want: 413, conforms: true},
		{name: "inject a route passport, the controller disabled", on: bare, method: "POST", path: "/v1/routepassport/test", token: operatorToken,
			body: `{"routeId":"R-1"}`, want: 404, conforms: true},

		{name: "openapi.json", on: main, method: "GET", path: "/v1/openapi.json", want: 200, conforms: true},
		{name: "metrics", on: main, method: "GET", path: "/metrics", want: 200, conforms: true},
		{name: "healthz", on: main, method: "GET", path: "/healthz", want: 200, conforms: true},
		{name: "readyz", on: main, method: "GET", path: "/readyz", want: 200, conforms: true},
		{name: "readyz, a token", on: main, method: "GET", path: "/readyz", token: readToken, want: 200, conforms: true},
		{name: "readyz, a wrong token", on: main, method: "GET", path: "/readyz", token: wrongToken, want: 200},
		{name: "readyz, a check failing", on: bare, method: "GET", path: "/readyz", want: 503, conforms: true},
		{name: "readyz, a check failing, with its error", on: bare, method: "GET", path: "/readyz", token: operatorToken, want: 503, conforms: true},
	}
	// The answers every operation shares: a foreign Host, open access from
	// another host, and for the operations that need a token none, a
	// throttled client, and for the operator's a read token, a write from
	// another site or not in JSON.
	samples := map[string]string{"stream": "s1", "id": "3", "event": "ev-A-1", "flid": "F1"}
	goodBody := map[string]string{"POST /v1/replay": dryOutbox, "POST /v1/skip": drySkip,
		"POST /v1/requests": rqrd, "POST /v1/routepassport/test": `{"routeId":"R-1"}`}
	for _, op := range operations(doc) {
		method, tmpl, _ := strings.Cut(op, " ")
		path := tmpl
		for name, v := range samples {
			path = strings.ReplaceAll(path, "{"+name+"}", v)
		}
		c := apiCase{method: method, path: path, body: goodBody[op]}
		o := doc.Paths.Find(tmpl).GetOperation(method)
		needs := 0
		if o.Security != nil && len(*o.Security) > 0 && !slices.ContainsFunc(*o.Security, func(r openapi3.SecurityRequirement) bool { return len(r) == 0 }) {
			needs = 1
			if !slices.ContainsFunc(*o.Security, func(r openapi3.SecurityRequirement) bool { _, ok := r["readToken"]; return ok }) {
				needs = 2
			}
		}
		token := map[int]string{1: readToken, 2: operatorToken}[needs]
		add := func(name string, on *testServer, edit func(*apiCase), want int) {
			k := c
			k.name, k.on, k.want, k.token = op+": "+name, on, want, token
			edit(&k)
			cases = append(cases, k)
		}
		add("a foreign Host", main, func(k *apiCase) { k.host = "evil.example" }, 421)
		add("open access from another host", open, func(k *apiCase) { k.token = "" }, 403)
		if needs > 0 {
			add("no token", main, func(k *apiCase) { k.token = "" }, 401)
			add("a throttled client", locked, func(*apiCase) {}, 429)
		}
		if needs > 1 {
			add("a read token", main, func(k *apiCase) { k.token = readToken }, 403)
			add("from another site", main, func(k *apiCase) { k.header = crossSite }, 403)
			add("not JSON", main, func(k *apiCase) { k.header = notJSON }, 415)
		}
	}

	answered := map[string]map[string]bool{} // by operation, the statuses seen
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			vreq, resp, body := c.on.send(t, c)
			if resp.StatusCode != c.want {
				t.Fatalf("%s %s: %d, want %d: %s", c.method, c.path, resp.StatusCode, c.want, body)
			}
			route, params, err := router.FindRoute(vreq)
			if err != nil {
				t.Fatalf("%s %s is not in the document: %v", c.method, c.path, err)
			}
			op := route.Method + " " + route.Path
			if answered[op] == nil {
				answered[op] = map[string]bool{}
			}
			answered[op][strconv.Itoa(resp.StatusCode)] = true
			in := &openapi3filter.RequestValidationInput{Request: vreq, PathParams: params, Route: route,
				Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true}}
			if c.conforms {
				if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
					t.Fatalf("the request does not conform to the document: %v", err)
				}
			}
			out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
				Body: io.NopCloser(bytes.NewReader(body)), Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true}}
			if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
				t.Fatalf("the answer is not as documented: %v\n%s", err, body)
			}
		})
	}

	// Every documented status was answered, but for a failure of the
	// service, a skip racing another operator's change and a broker
	// failing a send.
	notProvoked := func(op, status string) bool {
		return status == "500" || op == "POST /v1/skip" && status == "409" || op == "POST /v1/routepassport/test" && status == "502"
	}
	for _, op := range operations(doc) {
		method, tmpl, _ := strings.Cut(op, " ")
		for status := range doc.Paths.Find(tmpl).GetOperation(method).Responses.Map() {
			if !answered[op][status] && !notProvoked(op, status) {
				t.Errorf("%s: no request here was answered %s", op, status)
			}
		}
	}
}

// A documented path answers a method it does not document with 405 and
// the documented methods in Allow; a path the document does not have, 404.
func TestOpenAPIUndocumentedMethodsAndPaths(t *testing.T) {
	doc := loadDoc(t)
	srv, err := admin.New(admin.Config{DB: storetest.NewSQLite(t), Gatherer: prometheus.NewRegistry(), ReadToken: readToken})
	if err != nil {
		t.Fatal(err)
	}
	paths := doc.Paths.InMatchingOrder()
	sort.Strings(paths)
	for _, tmpl := range paths {
		path := strings.NewReplacer("{stream}", "s1", "{id}", "1", "{event}", "e", "{flid}", "F1").Replace(tmpl)
		var allowed []string
		for m := range doc.Paths.Find(tmpl).Operations() {
			if pipelineOf(doc, m+" "+tmpl) == "" {
				allowed = append(allowed, m) // the admin server's own
			}
		}
		if len(allowed) == 0 {
			continue // a pipeline's path: not served without the pipeline
		}
		for _, m := range []string{"GET", "POST", "PUT", "DELETE", "PATCH"} {
			if doc.Paths.Find(tmpl).GetOperation(m) != nil {
				continue
			}
			req := httptest.NewRequest(m, path, strings.NewReader("{}"))
			req.Header.Set("Authorization", "Bearer "+readToken)
			req.Header.Set("Content-Type", "application/json")
			req.Host = "127.0.0.1:8081"
			rec := httptest.NewRecorder()
			srv.ServeHTTP(rec, req)
			allow := rec.Header().Get("Allow")
			if rec.Code != http.StatusMethodNotAllowed {
				t.Errorf("%s %s: %d, want 405", m, path, rec.Code)
			}
			for _, a := range allowed {
				if !strings.Contains(allow, a) {
					t.Errorf("%s %s: Allow %q lacks %s", m, path, allow, a)
				}
			}
		}
	}
	for _, path := range []string{"/v1", "/v1/nothing", "/v1/dead/inbox/s1", "/v2/status"} {
		req := httptest.NewRequest("GET", path, nil)
		req.Host = "127.0.0.1:8081"
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		if rec.Code != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", path, rec.Code)
		}
	}
}
