package app

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/msgx/msgx/admin"
	"github.com/msgx/msgx/app/apptest"
	"github.com/msgx/msgx/app/config"
	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/source/mailbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

const (
	readTok = "rT5kW9qZ2xV7nB3mL8cJ4hF6dS1gP0aYe"
	opTok   = "oP3nM8vB1cX6zL4kJ9hG2fD7sA5qW0eRt"
)

func registry() *Registry {
	reg := NewRegistry()
	reg.Processor("flop", func(_ context.Context, _ Deps, _ string, opts map[string]string) (inbox.Processor, error) {
		return inbox.Typed(apptest.New(opts)), nil
	})
	return reg
}

func loadConfig(t *testing.T, yml string, env ...string) *config.Config {
	t.Helper()
	path := filepath.Join(t.TempDir(), "msgx.yaml")
	if err := os.WriteFile(path, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, env, adapters())
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// mariaDSN is the local MariaDB the shared-mailbox tests use.
const mariaDSN = "root@tcp(127.0.0.1:3306)/test"

// newMailbox creates a uniquely named mailbox table on MariaDB holding n
// FLOP messages (ids 1..n), dropped at cleanup.
func newMailbox(t *testing.T, n int) (table string, db *sql.DB) {
	t.Helper()
	ctx := context.Background()
	table = storetest.UniqueName("cminmsgs_app_")
	db, err := sql.Open("mysql", mariaDSN+"?parseTime=true")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	tb, err := mailbox.NewMySQL(db, mailbox.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	if err := tb.Create(ctx); err != nil {
		t.Fatalf("MariaDB: %v", err)
	}
	t.Cleanup(func() { _ = tb.Drop(context.Background()) })
	msgs, err := apptest.Messages(n, 3, time.Now().UnixNano()%1_000_000_000)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if _, err := tb.Insert(ctx, m, time.Now(), mailbox.Meta{}); err != nil {
			t.Fatal(err)
		}
	}
	return table, db
}

const embedded = `
store: {dsn: "sqlite:%s"}
admin: {listen: "127.0.0.1:0", read-token: "` + readTok + `", operator-token: "` + opTok + `"}
brokers: {local: {kind: mem}}
mailboxes: {local: {kind: store, start: "from-id:2", poll-interval: 20ms}}
streams: {s: {processor: flop, mailbox: local, poll-interval: 20ms}}
relay: {poll-interval: 20ms, targets: {"kafka:msg": {broker: local}}}
`

type running struct {
	app  *App
	stop func()
	done chan error
}

func start(t *testing.T, cfg *config.Config, reg *Registry) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	a, err := New(ctx, cfg, reg, WithLogOutput(io.Discard))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	r := &running{app: a, stop: cancel, done: make(chan error, 1)}
	go func() { r.done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-r.done
	})
	return r
}

func (r *running) shutdown(t *testing.T) {
	t.Helper()
	r.stop()
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatalf("Run after the stop: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30 s of the stop")
	}
	r.done <- nil
}

func get(t *testing.T, addr, path, token string, out any) int {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+addr+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if out != nil && resp.StatusCode == 200 {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode
}

func waitSettled(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var st admin.Status
		get(t, addr, "/v1/status", readTok, &st)
		if len(st.Streams) == 1 && st.Streams[0].Watermark == 5 && st.Streams[0].Backlog == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("stream not settled: %+v", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// unmarked counts the mailbox rows without a processed mark.
func unmarked(t *testing.T, db *sql.DB, table string) int {
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM " + table + " WHERE CMINMSGS_STATUS IS NULL").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

const production = `
profile: production
store: {dsn: "%s"}
admin: {listen: "127.0.0.1:0", read-token: "` + readTok + `", operator-token: "` + opTok + `"}
mailboxes: {shared: {kind: mysql, dsn: "` + mariaDSN + `", table: %s, start: "from-id:2", poll-interval: 20ms}}
streams: {s: {processor: flop, mailbox: shared, poll-interval: 20ms}}
`

// On PostgreSQL and a shared MariaDB mailbox, the start position skips the
// first rows; shadow mode processes the rest but never writes their
// processed mark; the normal mode does.
func TestStartPositionAndShadowMode(t *testing.T) {
	for _, shadow := range []bool{true, false} {
		t.Run(fmt.Sprintf("shadow=%v", shadow), func(t *testing.T) {
			_, dsn := storetest.NewSchema(t)
			table, mdb := newMailbox(t, 5)
			cfg := loadConfig(t, fmt.Sprintf(production, dsn, table), fmt.Sprintf("MSGX_SHADOW=%v", shadow))
			r := start(t, cfg, registry())
			waitSettled(t, r.app.AdminAddr())
			if !shadow {
				deadline := time.Now().Add(30 * time.Second)
				for unmarked(t, mdb, table) != 2 {
					if time.Now().After(deadline) {
						t.Fatalf("processed marks not written: %d rows unmarked", unmarked(t, mdb, table))
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			// The counters move after the commit the status above already
			// shows: wait for them, within a bound.
			want := []string{fmt.Sprintf(`msgx_service_info{profile="production",shadow="%v"} 1`, shadow), `msgx_build_info{adapters="",goversion="` + runtime.Version() + `"`,
				`msgx_stream_last_success_timestamp_seconds{stream="s"}`, `msgx_inbox_settled_total{status="SUCCEEDED",stream="s"} 3`}
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				resp, err := http.Get("http://" + r.app.AdminAddr() + "/metrics")
				if err != nil {
					t.Fatal(err)
				}
				metrics, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				var missing []string
				for _, m := range want {
					if !strings.Contains(string(metrics), m) {
						missing = append(missing, m)
					}
				}
				if len(missing) == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("/metrics lacks %s", strings.Join(missing, ", "))
				}
			}
			r.shutdown(t)
			db, err := store.Open(context.Background(), dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			counts, err := inbox.Counts(context.Background(), db, "s")
			if err != nil || counts[inbox.Succeeded] != 3 || len(counts) != 1 {
				t.Fatalf("inbox after the run: %v %v (rows 1 and 2 are before the start position)", counts, err)
			}
			if shadow {
				if n := unmarked(t, mdb, table); n != 5 {
					t.Fatalf("shadow mode wrote %d processed marks", 5-n)
				}
			}
		})
	}
}

func TestUnknownProcessorAndPipeline(t *testing.T) {
	dsn := filepath.Join(t.TempDir(), "msgx.db")
	cfg := loadConfig(t, fmt.Sprintf(embedded, dsn), "MSGX_STREAMS_S_PROCESSOR=sis")
	_, err := New(context.Background(), cfg, registry(), WithLogOutput(io.Discard))
	if err == nil || !strings.Contains(err.Error(), `no processor "sis" in this build (registered: flop)`) {
		t.Fatalf("unknown processor: %v", err)
	}
	cfg = loadConfig(t, fmt.Sprintf(embedded, dsn)+"pipelines: {routepassport: {}}\n")
	_, err = New(context.Background(), cfg, registry(), WithLogOutput(io.Discard))
	if err == nil || !strings.Contains(err.Error(), `no pipeline "routepassport"`) {
		t.Fatalf("unknown pipeline: %v", err)
	}
}

// writer is the test processor saying which target it enqueues to.
type writer struct{ *apptest.Processor }

func (w writer) OutboxTargets() []string { return []string{w.Target} }

// A processor or a pipeline that enqueues events for a target the relay does
// not serve stops the start, with the key to add.
func TestUnrelayedTargetRefusesToStart(t *testing.T) {
	reg := registry()
	reg.Processor("writer", func(_ context.Context, _ Deps, _ string, opts map[string]string) (inbox.Processor, error) {
		return inbox.Typed(writer{apptest.New(opts)}), nil
	})
	dsn := filepath.Join(t.TempDir(), "msgx.db")
	cfg := loadConfig(t, strings.Replace(fmt.Sprintf(embedded, dsn), "processor: flop,", `processor: writer, options: {target: "kafka:ref"},`, 1))
	_, err := New(context.Background(), cfg, reg, WithLogOutput(io.Discard))
	if err == nil || !strings.Contains(err.Error(), `streams.s (processor writer) enqueues events for outbox target "kafka:ref", but relay.targets has no "kafka:ref"`) {
		t.Fatalf("a stream's target without a relay: %v", err)
	}
	// The same processor with its target relayed starts.
	cfg = loadConfig(t, strings.Replace(fmt.Sprintf(embedded, dsn), "processor: flop,", `processor: writer,`, 1))
	a, err := New(context.Background(), cfg, reg, WithLogOutput(io.Discard))
	if err != nil {
		t.Fatalf("a stream's target relayed: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.Run(ctx); err != nil {
		t.Fatal(err)
	}
	reg.Pipeline("sweep", func(context.Context, Deps, PipelineSpec) (*Pipeline, error) {
		return &Pipeline{Run: func(ctx context.Context) error { <-ctx.Done(); return nil }, Targets: []string{"kafka:schd"}}, nil
	})
	cfg = loadConfig(t, fmt.Sprintf(embedded, dsn)+"pipelines: {sweep: {}}\n")
	_, err = New(context.Background(), cfg, reg, WithLogOutput(io.Discard))
	if err == nil || !strings.Contains(err.Error(), `pipelines.sweep enqueues events for outbox target "kafka:schd"`) ||
		!strings.Contains(err.Error(), `add relay.targets."kafka:schd"`) {
		t.Fatalf("a pipeline's target without a relay: %v", err)
	}
}

// A registered pipeline runs, its handlers sit behind the operator token,
// and a registered query answers where the default says "not available".
func TestPipelinesAndQueries(t *testing.T) {
	reg := registry()
	ran := make(chan struct{})
	reg.Pipeline("demo", func(_ context.Context, d Deps, spec PipelineSpec) (*Pipeline, error) {
		if spec.Broker == nil || spec.Options["k"] != "v" || d.DB == nil {
			return nil, fmt.Errorf("spec: %+v", spec)
		}
		return &Pipeline{
			Run: func(ctx context.Context) error { close(ran); <-ctx.Done(); return nil },
			Handlers: map[string]http.Handler{"GET /v1/demo/ping": http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				_, _ = io.WriteString(w, "{}")
			})},
		}, nil
	})
	reg.Query("flights", func(Deps) admin.QueryFunc {
		return func(context.Context, map[string][]string) (any, error) { return []string{"SU100"}, nil }
	})
	dsn := filepath.Join(t.TempDir(), "msgx.db")
	cfg := loadConfig(t, fmt.Sprintf(embedded, dsn)+"pipelines: {demo: {broker: local, options: {k: v}}}\n")
	r := start(t, cfg, reg)
	select {
	case <-ran:
	case <-time.After(30 * time.Second):
		t.Fatal("the pipeline did not run")
	}
	addr := r.app.AdminAddr()
	if code := get(t, addr, "/v1/demo/ping", readTok, nil); code != 403 {
		t.Errorf("pipeline handler with the read token: %d", code)
	}
	if code := get(t, addr, "/v1/demo/ping", opTok, nil); code != 200 {
		t.Errorf("pipeline handler with the operator token: %d", code)
	}
	var flights []string
	if code := get(t, addr, "/v1/flights", readTok, &flights); code != 200 || len(flights) != 1 {
		t.Errorf("flights: %d %v", code, flights)
	}
	if code := get(t, addr, "/v1/requests", readTok, nil); code != 501 {
		t.Errorf("requests: %d", code)
	}
	r.shutdown(t)
}

// Status names the instance holding each stream's lease by its configured
// instance-id, on the instance that holds it and on one standing by.
func TestStatusShowsLeaseHolderByInstanceID(t *testing.T) {
	_, dsn := storetest.NewSchema(t)
	yml := fmt.Sprintf(`
store: {dsn: %q}
admin: {listen: "127.0.0.1:0", read-token: "`+readTok+`", operator-token: "`+opTok+`"}
brokers: {local: {kind: mem}}
mailboxes: {local: {kind: store, start: from-beginning, poll-interval: 20ms}}
streams: {s: {processor: flop, mailbox: local, poll-interval: 20ms}}
relay: {poll-interval: 20ms, targets: {"kafka:msg": {broker: local}}}
`, dsn)
	a := start(t, loadConfig(t, yml, "MSGX_INSTANCE_ID=msgx-node-7"), registry())
	holder := func(addr string) admin.StreamStatus {
		var st admin.Status
		if code := get(t, addr, "/v1/status", readTok, &st); code != 200 || len(st.Streams) != 1 {
			t.Fatalf("status: %d %+v", code, st)
		}
		return st.Streams[0]
	}
	deadline := time.Now().Add(30 * time.Second)
	for s := holder(a.app.AdminAddr()); s.LeaseHolder != "msgx-node-7" || !s.Leader; s = holder(a.app.AdminAddr()) {
		if time.Now().After(deadline) {
			t.Fatalf("the lease holder is not shown by its instance id: %+v", s)
		}
		time.Sleep(20 * time.Millisecond)
	}
	b := start(t, loadConfig(t, yml, "MSGX_INSTANCE_ID=msgx-node-8"), registry())
	if s := holder(b.app.AdminAddr()); s.LeaseHolder != "msgx-node-7" || s.Leader || !strings.HasPrefix(s.LeaseOwner, "msgx-node-7/") ||
		s.LeaseExpires == nil {
		t.Errorf("the standby's status: %+v", s)
	}
}
