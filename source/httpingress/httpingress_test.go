package httpingress_test

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/source/httpingress"
	"github.com/msgx/msgx/source/mailbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

var t0 = time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)

const body = `<MSG><META><SNDR>AODB</SNDR><SEQN>7</SEQN><TYPE>FLOP</TYPE><STYP>ETA</STYP></META><FLOP><FLID>1</FLID></FLOP></MSG>`

// identityProc: the identity is the body.
type identityProc struct{}

func (identityProc) Decode(b []byte) (inbox.Decoded, error) {
	return inbox.Decoded{Identity: string(b), Kind: "X"}, nil
}
func (identityProc) Process(context.Context, store.Tx, *inbox.Message) (inbox.Outcome, error) {
	return inbox.Done(), nil
}

type setup struct {
	db     *store.DB
	table  *mailbox.Table
	eng    *inbox.Engine
	srv    *httptest.Server
	clk    *clock.Fake
	nudges atomic.Int32
}

func newSetup(t *testing.T, enq func(*inbox.Engine) httpingress.Enqueuer, opts ...httpingress.Option) *setup {
	t.Helper()
	s := &setup{db: storetest.NewSQLite(t, store.WithMigrate(mailbox.Schema()))}
	var err error
	if s.table, err = mailbox.NewStore(s.db); err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(t0)
	s.clk = clk
	if s.eng, err = inbox.New(s.db, "sis", identityProc{}, inbox.WithClock(clk), inbox.WithDatabaseClock(false), inbox.WithLogger(testkit.Quiet())); err != nil {
		t.Fatal(err)
	}
	base := []httpingress.Option{httpingress.WithClock(clk), httpingress.WithLogger(testkit.Quiet()), httpingress.WithNudge(func() { s.nudges.Add(1) })}
	if enq != nil {
		base = append(base, httpingress.WithEnqueuer(enq(s.eng)))
	}
	mux := http.NewServeMux()
	httpingress.New(s.table, append(base, opts...)...).Register(mux)
	s.srv = httptest.NewServer(mux)
	t.Cleanup(s.srv.Close)
	return s
}

func engine(e *inbox.Engine) httpingress.Enqueuer { return e }

func (s *setup) post(t *testing.T, contentType string, b io.Reader) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.srv.URL+httpingress.Path, b)
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out), resp.Header
}

func (s *setup) mailboxCount(t *testing.T) int {
	t.Helper()
	var n int
	if err := s.db.QueryRow(context.Background(), "SELECT COUNT(*) FROM cminmsgs").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestSendStoresEnqueuesAndAnswersTheMailboxID(t *testing.T) {
	s := newSetup(t, engine)
	code, out, h := s.post(t, "application/xml; charset=UTF-8", strings.NewReader(body))
	if code != http.StatusOK || out != "1" || !strings.HasPrefix(h.Get("Content-Type"), "text/plain") {
		t.Fatalf("POST = %d %q %q", code, out, h.Get("Content-Type"))
	}
	var stored string
	var received time.Time
	if err := s.db.QueryRow(context.Background(), "SELECT CMINMSGS_CLOB_MSG, CMINMSGS_DATE_RECEIVED FROM cminmsgs WHERE CMINMSGS_ID = 1").Scan(&stored, &received); err != nil {
		t.Fatal(err)
	}
	if stored != body || !received.Equal(t0) {
		t.Fatalf("mailbox row %q %v", stored, received)
	}
	r, err := inbox.Get(context.Background(), s.db, "sis", 1)
	if err != nil || r.Status != inbox.Pending {
		t.Fatalf("inbox row %+v %v", r, err)
	}
	if s.nudges.Load() != 1 {
		t.Fatal("the poller was not nudged")
	}
	// Legacy clients send no Content-Type at all.
	if code, out, _ := s.post(t, "", strings.NewReader(body)); code != http.StatusOK || out != "2" {
		t.Fatalf("POST without Content-Type = %d %q", code, out)
	}
}

func TestSendRejectsWhatItCannotStore(t *testing.T) {
	s := newSetup(t, engine, httpingress.WithMaxBytes(64))
	long := strings.Repeat("x", 65)
	for _, tc := range []struct {
		name, ct string
		body     io.Reader
		want     int
	}{
		{"too large", "text/xml", strings.NewReader(long), http.StatusRequestEntityTooLarge},
		{"too large, chunked", "text/xml", io.MultiReader(strings.NewReader(long)), http.StatusRequestEntityTooLarge},
		{"json", "application/json", strings.NewReader("{}"), http.StatusUnsupportedMediaType},
		{"form", "multipart/form-data; boundary=x", strings.NewReader("x"), http.StatusUnsupportedMediaType},
		{"unknown charset", "text/xml; charset=x-klingon", strings.NewReader("<a/>"), http.StatusUnsupportedMediaType},
		// Not UTF-8, so read as declared (valid UTF-8 is UTF-8 whatever it declares).
		{"declared unknown charset", "text/xml", strings.NewReader(`<?xml version="1.0" encoding="x-klingon"?><a>` + "\xff</a>"), http.StatusUnsupportedMediaType},
		{"not GBK", "text/xml; charset=GBK", strings.NewReader("<a>\x81</a>"), http.StatusBadRequest},
		{"empty", "text/xml", strings.NewReader(""), http.StatusBadRequest},
		{"not utf-8", "text/xml", strings.NewReader("<a>\xff\xfe</a>"), http.StatusBadRequest},
	} {
		if code, out, _ := s.post(t, tc.ct, tc.body); code != tc.want {
			t.Errorf("%s: %d %q, want %d", tc.name, code, out, tc.want)
		}
	}
	resp, err := http.Get(s.srv.URL + httpingress.Path)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET = %d", resp.StatusCode)
	}
	if n := s.mailboxCount(t); n != 0 {
		t.Fatalf("%d rows stored from rejected requests", n)
	}
}

func TestMailboxDownIsNeverA200(t *testing.T) {
	dead := storetest.NewSQLite(t, store.WithMigrate(mailbox.Schema()))
	table, err := mailbox.NewStore(dead)
	if err != nil {
		t.Fatal(err)
	}
	dead.Close()
	var enqueued atomic.Int32
	mux := http.NewServeMux()
	httpingress.New(table, httpingress.WithLogger(testkit.Quiet()), httpingress.WithEnqueuer(enqueuerFunc(func() error {
		enqueued.Add(1)
		return nil
	}))).Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	resp, err := http.Post(srv.URL+httpingress.Path, "text/xml", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || enqueued.Load() != 0 {
		t.Fatalf("mailbox down: %d, %d enqueued", resp.StatusCode, enqueued.Load())
	}
}

type enqueuerFunc func() error

func (f enqueuerFunc) Enqueue(context.Context, ...inbox.Incoming) (int, error) { return 0, f() }

func TestFailedEnqueueIsRepairedByThePoller(t *testing.T) {
	s := newSetup(t, func(*inbox.Engine) httpingress.Enqueuer {
		return enqueuerFunc(func() error { return errors.New("store down") })
	})
	code, out, _ := s.post(t, "text/xml", strings.NewReader(body))
	if code != http.StatusOK || out != "1" {
		t.Fatalf("POST = %d %q: stored in the mailbox is a success", code, out)
	}
	if _, err := inbox.Get(context.Background(), s.db, "sis", 1); !errors.Is(err, inbox.ErrNotFound) {
		t.Fatalf("enqueued despite the failure: %v", err)
	}
	p := mailbox.NewPoller(s.table, s.db, "sis", mailbox.WithStart(mailbox.FromBeginning()), mailbox.WithPollerLogger(testkit.Quiet()))
	if res, err := p.Poll(context.Background()); err != nil || res.Enqueued != 1 {
		t.Fatalf("poll = %+v, %v", res, err)
	}
}

func TestClientRetryIsADuplicate(t *testing.T) {
	s := newSetup(t, engine)
	for range 2 {
		if code, _, _ := s.post(t, "text/xml", strings.NewReader(body)); code != http.StatusOK {
			t.Fatalf("POST = %d", code)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	p := mailbox.NewPoller(s.table, s.db, "sis", mailbox.WithStart(mailbox.FromBeginning()), mailbox.WithPollerLogger(testkit.Quiet()))
	eng, err := inbox.New(s.db, "sis", identityProc{}, inbox.WithLogger(testkit.Quiet()), inbox.WithSource(p))
	if err != nil {
		t.Fatal(err)
	}
	go func() { done <- eng.Run(ctx) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := inbox.Get(context.Background(), s.db, "sis", 2)
		if err == nil && r.Status.Terminal() {
			if r.Status != inbox.Skipped || r.Reason != "duplicate-of:1" {
				t.Fatalf("retry = %+v", r)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("retry never settled")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// mariaDBMailbox is a uniquely named mailbox table on the test MariaDB
// server, dropped at the end of the test, with its connection.
func mariaDBMailbox(t *testing.T) (*mailbox.Table, *sql.DB) {
	t.Helper()
	raw := storetest.OpenMySQL(t)
	table, err := mailbox.NewMySQL(raw, mailbox.WithTable(storetest.UniqueName("t_cminmsgs_http_")))
	if err != nil {
		t.Fatal(err)
	}
	if err := table.Create(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = table.Drop(context.Background()) })
	return table, raw
}

func TestSendIntoMariaDBMailbox(t *testing.T) {
	table, _ := mariaDBMailbox(t)
	ctx := context.Background()
	mux := http.NewServeMux()
	httpingress.New(table, httpingress.WithLogger(testkit.Quiet())).Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	resp, err := http.Post(srv.URL+httpingress.Path, "text/xml", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(out) != "1" {
		t.Fatalf("POST = %d %q", resp.StatusCode, out)
	}
	rows, err := table.Scan(ctx, 0, 10)
	if err != nil || len(rows) != 1 || string(rows[0].Msg) != body {
		t.Fatalf("stored %+v %v", rows, err)
	}
}
