package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/msgx/msgx/backoff"
	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

const (
	readTok = "read-token-0123456789"
	opTok   = "operator-token-0123456789"
)

// proc decodes "ok", "bad" (MALFORMED) and "flaky" (INFRA until healed).
type proc struct{ healed atomic.Bool }

func (p *proc) Decode(b []byte) (inbox.Decoded, error) {
	if string(b) == "bad" {
		return inbox.Decoded{}, inbox.Failf(inbox.Malformed, "not a message")
	}
	return inbox.Decoded{Kind: string(b)}, nil
}

func (p *proc) Process(_ context.Context, _ store.Tx, m *inbox.Message) (inbox.Outcome, error) {
	if m.Kind == "flaky" && !p.healed.Load() {
		return inbox.Outcome{}, inbox.Failf(inbox.Infra, "downstream unavailable")
	}
	return inbox.Done(), nil
}

type fixture struct {
	srv *Server
	eng *inbox.Engine
	db  *store.DB
	p   *proc
}

func setup(t *testing.T, db *store.DB) *fixture {
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
	srv, err := New(Config{DB: db, Streams: []Stream{{Name: "s1", Engine: eng}}, Targets: []string{"t1"},
		ReadToken: readTok, OperatorToken: opTok, Hosts: []string{"example.com"},
		Queries: map[string]QueryFunc{}, Unavailable: map[string]string{"flights": "not available: the SIS pipeline is not enabled"}})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{srv: srv, eng: eng, db: db, p: p}
}

func (f *fixture) do(t *testing.T, method, path, tok, body string, out any) int {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	req.Header.Set("X-Msgx-Actor", "alice")
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	rec := httptest.NewRecorder()
	f.srv.ServeHTTP(rec, req)
	if out != nil && rec.Code == 200 {
		if err := json.Unmarshal(rec.Body.Bytes(), out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, rec.Body)
		}
	}
	return rec.Code
}

// patience bounds every wait of these tests for a condition.
const patience = 20 * time.Second

func TestAdminAPI(t *testing.T) {
	storetest.Each(t, []store.Line{Schema()}, func(t *testing.T, db *store.DB) {
		f := setup(t, db)
		ctx := context.Background()
		if _, err := f.eng.Enqueue(ctx, inbox.Incoming{ID: 1, Payload: []byte("ok")}, inbox.Incoming{ID: 2, Payload: []byte("bad")},
			inbox.Incoming{ID: 3, Payload: []byte("flaky")}, inbox.Incoming{ID: 4, Payload: []byte("ok")}); err != nil {
			t.Fatal(err)
		}
		// An outbox dead letter, made DEAD the way an exhausted relay leaves it.
		if err := db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
			return outbox.Enqueue(ctx, tx, time.Now(), outbox.Event{ID: "ev-1", Target: "t1", Topic: "x", Key: "k", Payload: []byte("{}")})
		}); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, "the stream to settle", patience, func() bool {
			c, err := inbox.Counts(ctx, db, "s1")
			return err == nil && c[inbox.Succeeded] == 2 && c[inbox.Dead] == 2
		})

		// Scopes.
		if code := f.do(t, "GET", "/v1/status", "", "", nil); code != 401 {
			t.Errorf("no token: %d", code)
		}
		if code := f.do(t, "GET", "/v1/status", "wrong-token-0123456789", "", nil); code != 401 {
			t.Errorf("wrong token: %d", code)
		}
		if code := f.do(t, "POST", "/v1/replay", readTok, `{"source":"inbox","stream":"s1","ids":["3"],"reason":"x"}`, nil); code != 403 {
			t.Errorf("read scope replaying: %d", code)
		}
		var st Status
		if code := f.do(t, "GET", "/v1/status", readTok, "", &st); code != 200 {
			t.Fatalf("status: %d", code)
		}
		if len(st.Streams) != 1 || st.Streams[0].Dead != 2 || st.Streams[0].Backlog != 0 || !st.Ready {
			t.Errorf("status: %+v", st)
		}
		if len(st.Targets) != 1 || st.Targets[0].Pending != 1 {
			t.Errorf("targets: %+v", st.Targets)
		}

		var dead DeadList
		f.do(t, "GET", "/v1/dead?source=inbox&stream=s1", readTok, "", &dead)
		if len(dead.Inbox) != 2 || dead.Inbox[0].ID != 2 || dead.Inbox[0].Class != "MALFORMED" || dead.Inbox[0].Replayable ||
			dead.Inbox[1].ID != 3 || dead.Inbox[1].Class != "EXHAUSTED" || !dead.Inbox[1].Replayable {
			t.Fatalf("dead list: %+v", dead.Inbox)
		}
		var detail DeadDetail
		f.do(t, "GET", "/v1/dead/inbox/s1/3", readTok, "", &detail)
		if len(detail.History) == 0 || !strings.Contains(detail.History[0].Reason, "downstream unavailable") {
			t.Errorf("history: %+v", detail)
		}
		if code := f.do(t, "GET", "/v1/dead/inbox/s1/99", readTok, "", nil); code != 404 {
			t.Errorf("unknown message: %d", code)
		}

		// Dry run first: nothing moves.
		var res ReplayResult
		f.do(t, "POST", "/v1/replay", opTok, `{"source":"inbox","stream":"s1","ids":["2","3","9"],"dry_run":true,"reason":"fixed downstream"}`, &res)
		if strings.Join(res.Replayed, ",") != "3" || !strings.Contains(res.Refused["2"], "not replayable") || res.Refused["9"] != "not found" {
			t.Fatalf("dry run: %+v", res)
		}
		if row, _ := inbox.Get(ctx, db, "s1", 3); row.Status != inbox.Dead {
			t.Fatalf("the dry run moved the message: %s", row.Status)
		}
		if code := f.do(t, "POST", "/v1/replay", opTok, `{"source":"inbox","stream":"s1","class":"MALFORMED","reason":"x"}`, nil); code != 400 {
			t.Errorf("replaying MALFORMED: %d", code)
		}
		if code := f.do(t, "POST", "/v1/replay", opTok, `{"source":"inbox","stream":"s1","ids":["3"]}`, nil); code != 400 {
			t.Errorf("replay without a reason: %d", code)
		}
		f.p.healed.Store(true)
		f.do(t, "POST", "/v1/replay", opTok, `{"source":"inbox","stream":"s1","class":"exhausted","reason":"fixed downstream"}`, &res)
		if strings.Join(res.Replayed, ",") != "3" || res.DryRun {
			t.Fatalf("replay: %+v", res)
		}
		testkit.Eventually(t, "the replayed message to succeed", patience, func() bool {
			row, err := inbox.Get(ctx, db, "s1", 3)
			return err == nil && row.Status == inbox.Succeeded
		})

		// The outbox: a pending event is not replayable; a dead one is.
		f.do(t, "POST", "/v1/replay", opTok, `{"source":"outbox","ids":["ev-1"],"reason":"r"}`, &res)
		if len(res.Replayed) != 0 || res.Refused["ev-1"] != "status PENDING" {
			t.Errorf("outbox replay of a pending event: %+v", res)
		}
		var audits int
		if err := db.QueryRow(ctx, "SELECT COUNT(*) FROM msgx_admin_audit WHERE actor = 'operator (operator token; note \"alice\")'").Scan(&audits); err != nil || audits != 3 {
			t.Errorf("audit rows: %d, %v", audits, err)
		}

		for _, path := range []string{"/v1/flights", "/all/flights"} {
			if code := f.do(t, "GET", path, readTok, "", nil); code != 501 {
				t.Errorf("%s: %d", path, code)
			}
			if code := f.do(t, "GET", path, "", "", nil); code != 401 {
				t.Errorf("%s without a token: %d", path, code)
			}
		}
		var bf []BackfillStatus
		if code := f.do(t, "GET", "/v1/backfill", readTok, "", &bf); code != 200 || len(bf) != 1 {
			t.Errorf("backfill: %d %+v", code, bf)
		}
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(f.srv.Collector())
		if n, err := testutil.GatherAndCount(reg, "msgx_stream_dead", "msgx_relay_pending", "msgx_status_up"); err != nil || n != 3 {
			t.Errorf("collector: %d series, %v", n, err)
		}
	})
}

func TestNoTokensLetsEverythingThrough(t *testing.T) {
	db := storetest.NewSQLite(t, store.WithMigrate(Schema()))
	srv, err := New(Config{DB: db})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/v1/status", nil)
	req.RemoteAddr, req.Host = "127.0.0.1:50000", "127.0.0.1:8081"
	srv.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("status without tokens configured: %d %s", rec.Code, rec.Body)
	}
}

// Ages are measured from the database's clock; on both dialects it reads
// as the current time.
func TestDatabaseClock(t *testing.T) {
	storetest.Each(t, []store.Line{Schema()}, func(t *testing.T, db *store.DB) {
		srv, err := New(Config{DB: db})
		if err != nil {
			t.Fatal(err)
		}
		now, err := srv.now(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(now); d < -time.Minute || d > time.Minute {
			t.Fatalf("database clock reads %v, %v from the wall clock", now, d)
		}
	})
}

// A late mailbox row refused as LATE may be replayed deliberately: its
// preview says that it is older than what was applied.
func TestReplayPreviewOfALateRowSaysItIsOlder(t *testing.T) {
	db := storetest.NewPostgres(t, store.WithMigrate(Schema()))
	f := setup(t, db)
	ctx := context.Background()
	const why = "late: mailbox row 7 committed after its gap 7-7 was declared permanent; newer messages already applied: 8"
	if err := db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		_, err := inbox.EnqueueDead(ctx, tx, "s1", time.Now(), inbox.Incoming{ID: 7, Payload: []byte("ok")}, inbox.Late, why)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{
		`{"source":"inbox","stream":"s1","ids":["7"],"dry_run":true,"reason":"checked"}`,
		`{"source":"inbox","stream":"s1","class":"late","dry_run":true,"reason":"checked"}`,
	} {
		var res ReplayResult
		if code := f.do(t, "POST", "/v1/replay", opTok, body, &res); code != 200 {
			t.Fatalf("%s: %d", body, code)
		}
		if strings.Join(res.Replayed, ",") != "7" || !strings.Contains(res.Warnings["7"], "older than what was applied") ||
			!strings.Contains(res.Warnings["7"], "newer messages already applied: 8") {
			t.Errorf("%s: %+v", body, res)
		}
	}
}

// Events of a target no relay of this instance serves show in the status,
// in msgx_relay_unserved_pending and in an ERROR line; a served target's do
// not.
func TestUnservedTarget(t *testing.T) {
	db := storetest.NewPostgres(t, store.WithMigrate(Schema()))
	ctx := context.Background()
	var logs bytes.Buffer
	srv, err := New(Config{DB: db, Targets: []string{"t1"}, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		return outbox.Enqueue(ctx, tx, time.Now(),
			outbox.Event{ID: "ev-1", Target: "t1", Topic: "x", Key: "k", Payload: []byte("{}")},
			outbox.Event{ID: "ev-2", Target: "kafka:ref", Topic: "x", Key: "k", Payload: []byte("{}")},
			outbox.Event{ID: "ev-3", Target: "kafka:ref", Topic: "x", Key: "k", Payload: []byte("{}")})
	}); err != nil {
		t.Fatal(err)
	}
	st, err := srv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Targets) != 2 || st.Targets[0].Target != "kafka:ref" || st.Targets[0].Relayed || st.Targets[0].Pending != 2 ||
		!st.Targets[1].Relayed {
		t.Errorf("targets: %+v", st.Targets)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(srv.Collector())
	want := `# HELP msgx_relay_unserved_pending PENDING outbox events of a target that no relay target of this instance serves (relay.targets lacks it): they wait for ever. 0 for a served target.
# TYPE msgx_relay_unserved_pending gauge
msgx_relay_unserved_pending{target="kafka:ref"} 2
msgx_relay_unserved_pending{target="t1"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "msgx_relay_unserved_pending"); err != nil {
		t.Error(err)
	}
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "target=kafka:ref pending=2") {
		t.Errorf("no ERROR line for the unserved target:\n%s", logs.String())
	}
}
