package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/msgx/msgx/admin"
	"github.com/msgx/msgx/internal/bench/inboxbench"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/source/mailbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

const (
	mariaDSN = "root@tcp(127.0.0.1:3306)/test"
	readTok  = "e2e-read-token-0123456789"
	opTok    = "e2e-operator-token-0123456789"
)

// span is what the in-process OTLP receiver keeps of an exported span.
type span struct{ name, trace, id, parent string }

// otlpReceiver accepts OTLP/HTTP protobuf trace exports.
type otlpReceiver struct {
	mu    sync.Mutex
	spans []span
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		body = zr
	}
	b, _ := io.ReadAll(body)
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &req); err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	o.mu.Lock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				o.spans = append(o.spans, span{s.Name, hex.EncodeToString(s.TraceId), hex.EncodeToString(s.SpanId), hex.EncodeToString(s.ParentSpanId)})
			}
		}
	}
	o.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (o *otlpReceiver) all() []span {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]span(nil), o.spans...)
}

// service is a running msgx binary.
type service struct {
	cmd    *exec.Cmd
	admin  string
	ingest string
	exited chan error
	logs   *bytes.Buffer
	logMu  *sync.Mutex
}

var listenRE = regexp.MustCompile(`"msg":"(admin|ingress) listening","addr":"([^"]+)"`)

func startService(t *testing.T, bin string, env []string) *service {
	t.Helper()
	cmd := exec.Command(bin, "serve", "--config", "../../deploy/msgx.production.yaml")
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &service{cmd: cmd, exited: make(chan error, 1), logs: &bytes.Buffer{}, logMu: &sync.Mutex{}}
	addrs := make(chan [2]string, 4)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			s.logMu.Lock()
			s.logs.WriteString(line + "\n")
			s.logMu.Unlock()
			if m := listenRE.FindStringSubmatch(line); m != nil {
				addrs <- [2]string{m[1], m[2]}
			}
		}
		s.exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
		}
		if t.Failed() {
			s.logMu.Lock()
			t.Logf("service log:\n%s", s.logs.String())
			s.logMu.Unlock()
		}
	})
	timeout := time.After(60 * time.Second)
	for s.admin == "" || s.ingest == "" {
		select {
		case a := <-addrs:
			if a[0] == "admin" {
				s.admin = a[1]
			} else {
				s.ingest = a[1]
			}
		case err := <-s.exited:
			s.logMu.Lock()
			defer s.logMu.Unlock()
			t.Fatalf("msgx serve exited at start: %v\n%s", err, s.logs.String())
		case <-timeout:
			t.Fatal("msgx serve did not start listening within 60 s")
		}
	}
	return s
}

// stop sends SIGTERM and wants exit status 0.
func (s *service) stop(t *testing.T) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-s.exited:
		if err != nil {
			t.Fatalf("msgx serve after SIGTERM: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("msgx serve did not stop within 60 s of SIGTERM")
	}
}

func (s *service) get(t *testing.T, path, token string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+s.admin+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func waitUntil(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// consumer reads the event topics from kfake.
type consumer struct {
	mu     sync.Mutex
	byID   map[string]*kgo.Record
	order  map[string][]int64 // FLID -> mailbox ids in arrival order
	topics map[string]int
}

func (c *consumer) count(topic string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.topics[topic]
}

func (c *consumer) has(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byID[id] != nil
}

func consume(t *testing.T, ctx context.Context, seeds []string, topics ...string) *consumer {
	// A short metadata age: the "late" topic is created during the test.
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topics...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.MetadataMinAge(100*time.Millisecond), kgo.MetadataMaxAge(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	c := &consumer{byID: map[string]*kgo.Record{}, order: map[string][]int64{}, topics: map[string]int{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachRecord(func(r *kgo.Record) {
				var id string
				for _, h := range r.Headers {
					if h.Key == "msgx-event-id" {
						id = string(h.Value)
					}
				}
				c.mu.Lock()
				if c.byID[id] == nil {
					c.topics[r.Topic]++
				}
				c.byID[id] = r
				if n, err := strconv.ParseInt(strings.TrimPrefix(id, "sis:"), 10, 64); err == nil {
					c.order[string(r.Key)] = append(c.order[string(r.Key)], n)
				}
				c.mu.Unlock()
			})
		}
	}()
	t.Cleanup(func() { <-done; cl.Close() })
	return c
}

// TestServeProduction runs the real binary with the sample production
// configuration against PostgreSQL, a MariaDB mailbox and a Kafka (kfake):
// traffic through the mailbox and the HTTP ingress, /metrics, the admin API
// and its scopes, an inbox and an outbox dead letter, a replay, an exported
// trace, and SIGTERM with messages in flight, none of them lost.
func TestServeProduction(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bin := buildMsgx(t)
	deps := newProdDeps(t, ctx)
	mb, tableName, seeds := deps.mb, deps.table, deps.seeds

	otlp := &otlpReceiver{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = http.Serve(ln, otlp) }()
	t.Cleanup(func() { _ = ln.Close() })

	msgs, err := inboxbench.Messages(120, 7, time.Now().UnixNano()%1_000_000_000)
	if err != nil {
		t.Fatal(err)
	}
	// Rows the legacy system handled before msgx first started: the sample
	// configuration's start position (from-now) skips them.
	var before []int64
	for _, m := range msgs[:2] {
		id, err := mb.Insert(ctx, m, time.Now(), mailbox.Meta{})
		if err != nil {
			t.Fatal(err)
		}
		before = append(before, id)
	}

	env := append(deps.env(),
		"OTEL_TRACES_EXPORTER=otlp",
		"OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://"+ln.Addr().String(),
		"OTEL_BSP_SCHEDULE_DELAY=100",
	)
	svc := startService(t, bin, env)
	cons := consume(t, ctx, seeds, "msg", "late")

	// Traffic: 40 rows written to the mailbox, 20 messages and one malformed
	// body posted to the ingress.
	var want []string
	for _, m := range msgs[2:42] {
		id, err := mb.Insert(ctx, m, time.Now(), mailbox.Meta{})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, "sis:"+strconv.FormatInt(id, 10))
	}
	post := func(body []byte) (int, string) {
		resp, err := http.Post("http://"+svc.ingest+"/cminmsgs/send", "application/xml", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, m := range msgs[42:62] {
		code, id := post(m)
		if code != 200 {
			t.Fatalf("ingress: %d %s", code, id)
		}
		want = append(want, "sis:"+id)
	}
	code, badID := post([]byte("<MSG><not closed"))
	if code != 200 {
		t.Fatalf("ingress of the malformed message: %d", code)
	}
	waitUntil(t, "60 events on Kafka", 90*time.Second, func() bool { return cons.count("msg") >= 60 })
	for _, id := range want {
		if !cons.has(id) {
			t.Errorf("event %s never reached Kafka", id)
		}
	}
	for _, id := range before {
		if cons.has("sis:" + strconv.FormatInt(id, 10)) {
			t.Errorf("mailbox row %d, older than the start position, was processed", id)
		}
	}

	// The admin API: scopes.
	if code, _ := svc.get(t, "/v1/status", ""); code != 401 {
		t.Errorf("status without a token: %d", code)
	}
	if code, _ := svc.get(t, "/v1/status", "not-the-token-0123456789"); code != 401 {
		t.Errorf("status with a wrong token: %d", code)
	}
	cliEnv := []string{"MSGX_ADMIN_URL=http://" + svc.admin}
	cli := func(token string, args ...string) (string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), append(cliEnv, "MSGX_ADMIN_TOKEN="+token)...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		if err != nil {
			return out.String() + errb.String(), err
		}
		return out.String(), nil
	}
	if out, err := cli(readTok, "replay", "--ids", badID, "--stream", "sis", "--reason", "try"); err == nil || !strings.Contains(out, "403") {
		t.Errorf("replay with the read-only token: %v %s", err, out)
	}
	out, err := cli(readTok, "status")
	if err != nil || !strings.Contains(out, "sis") || !strings.Contains(out, "kafka:msg") {
		t.Errorf("msgx status: %v\n%s", err, out)
	}

	// The malformed message is a dead letter; it cannot be replayed.
	waitUntil(t, "the malformed message to go DEAD", 30*time.Second, func() bool {
		out, err := cli(readTok, "dead", "list", "--source", "inbox", "--json")
		var dl admin.DeadList
		return err == nil && json.Unmarshal([]byte(out), &dl) == nil && len(dl.Inbox) == 1 &&
			strconv.FormatInt(dl.Inbox[0].ID, 10) == badID && dl.Inbox[0].Class == "MALFORMED"
	})
	out, err = cli(opTok, "replay", "--stream", "sis", "--ids", badID, "--reason", "check", "--yes")
	if err != nil || !strings.Contains(out, "not replayable") || !strings.Contains(out, "nothing to replay") {
		t.Errorf("replay of a MALFORMED message: %v\n%s", err, out)
	}
	if out, err := cli(readTok, "dead", "show", "inbox", "sis", badID); err != nil || !strings.Contains(out, "MALFORMED") {
		t.Errorf("dead show: %v\n%s", err, out)
	}

	// An outbox dead letter: an event for a topic that does not exist yet,
	// written the way a pipeline writes it; one attempt, then DEAD.
	db, err := store.Open(ctx, deps.pgDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		return outbox.Enqueue(ctx, tx, time.Now(), outbox.Event{ID: "late-1", Target: "kafka:msg", Topic: "late", Key: "k", Payload: []byte(`{}`)})
	}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the event for the missing topic to go DEAD", 90*time.Second, func() bool {
		r, err := outbox.Get(ctx, db, "late-1")
		return err == nil && r.Status == outbox.StatusDead
	})
	adm := kadm.NewClient(mustClient(t, seeds))
	// The sample configuration declares the SIS state topic compacted.
	rcs, err := adm.DescribeTopicConfigs(ctx, "sis.schd")
	if err != nil {
		t.Fatal(err)
	}
	if rc, err := rcs.On("sis.schd", nil); err != nil || rc.Err != nil {
		t.Errorf("sis.schd was not created: %v %v", err, rc.Err)
	} else if policy := configValue(rc.Configs, "cleanup.policy"); policy != "compact" {
		t.Errorf("sis.schd cleanup.policy = %q, want compact", policy)
	}
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "late"); err != nil {
		t.Fatal(err)
	}
	out, err = cli(opTok, "replay", "--source", "outbox", "--target", "kafka:msg", "--reason", "topic created")
	if err != nil || !strings.Contains(out, "1 would be replayed: late-1") || !strings.Contains(out, "dry run") {
		t.Fatalf("dry run of the outbox replay: %v\n%s", err, out)
	}
	if r, _ := outbox.Get(ctx, db, "late-1"); r.Status != outbox.StatusDead {
		t.Fatalf("the dry run replayed: %s", r.Status)
	}
	out, err = cli(opTok, "replay", "--source", "outbox", "--target", "kafka:msg", "--reason", "topic created", "--yes")
	if err != nil || !strings.Contains(out, "1 replayed: late-1") {
		t.Fatalf("outbox replay: %v\n%s", err, out)
	}
	waitUntil(t, "the replayed event on Kafka", 60*time.Second, func() bool { return cons.has("late-1") })
	var audits int
	if err := db.QueryRow(ctx, "SELECT COUNT(*) FROM msgx_admin_audit WHERE source = 'outbox' AND NOT dry_run AND count = 1").Scan(&audits); err != nil || audits != 1 {
		t.Errorf("audit of the replay: %d rows, %v", audits, err)
	}
	if out, err := cli(readTok, "flights", "--json"); err != nil || !strings.Contains(out, `"flights"`) {
		t.Errorf("flights: %v %s", err, out)
	}

	// Backfill: every processed row gets its mark in the MariaDB table.
	waitUntil(t, "the processed marks", 60*time.Second, func() bool {
		out, err := cli(readTok, "backfill", "status", "--json")
		var bs []admin.BackfillStatus
		return err == nil && json.Unmarshal([]byte(out), &bs) == nil && len(bs) == 1 && bs[0].Pending == 0 && marked(t, tableName) == 61
	})

	// Metrics and readiness.
	if code, body := svc.get(t, "/readyz", ""); code != 200 {
		t.Errorf("readyz: %d %s", code, body)
	}
	_, metrics := svc.get(t, "/metrics", "")
	for _, m := range []string{`msgx_inbox_settled_total{status="SUCCEEDED",stream="sis"} 60`, `msgx_outbox_published_total{target="kafka:msg"}`,
		`msgx_broker_published_total{adapter="main",topic="msg"}`, `msgx_stream_dead{stream="sis"} 1`, `msgx_stream_backlog{stream="sis"} 0`} {
		if !bytes.Contains(metrics, []byte(m)) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
	rules, _ := os.ReadFile("../../deploy/alerts.yaml")
	for _, m := range regexp.MustCompile(`msgx_[a-z_]+`).FindAllString(string(rules), -1) {
		if !bytes.Contains(metrics, []byte("\n"+m)) && !bytes.Contains(metrics, []byte("# TYPE "+m)) {
			t.Errorf("the alert rules use %s, which /metrics does not export", m)
		}
	}

	// SIGTERM with work in flight: 40 more rows; whatever the first process
	// did not finish, the next one does; none is lost.
	var late []string
	for _, m := range msgs[62:102] {
		id, err := mb.Insert(ctx, m, time.Now(), mailbox.Meta{})
		if err != nil {
			t.Fatal(err)
		}
		late = append(late, "sis:"+strconv.FormatInt(id, 10))
	}
	svc.stop(t)
	svc = startService(t, bin, env)
	waitUntil(t, "the rows in flight at SIGTERM on Kafka", 90*time.Second, func() bool {
		for _, id := range late {
			if !cons.has(id) {
				return false
			}
		}
		return true
	})
	svc.stop(t)

	cons.mu.Lock()
	for flid, ids := range cons.order {
		for i := 1; i < len(ids); i++ {
			if ids[i] < ids[i-1] {
				t.Errorf("flight %s: event of mailbox row %d after %d", flid, ids[i], ids[i-1])
			}
		}
	}
	rec := cons.byID[want[0]]
	cons.mu.Unlock()

	// The trace: ingest and processing spans, and the relay's send continuing
	// the processing span's trace, whose context the Kafka record carries.
	var traceparent string
	for _, h := range rec.Headers {
		if h.Key == "traceparent" {
			traceparent = string(h.Value)
		}
	}
	parts := strings.Split(traceparent, "-")
	if len(parts) != 4 {
		t.Fatalf("the Kafka record carries no traceparent: %q", traceparent)
	}
	spans := otlp.all()
	byID := map[string]span{}
	names := map[string]int{}
	for _, s := range spans {
		byID[s.id] = s
		names[s.name]++
	}
	send, ok := byID[parts[2]]
	if !ok || send.name != "msgx.relay.send" || send.trace != parts[1] {
		t.Fatalf("no exported send span %s of trace %s (spans by name: %v)", parts[2], parts[1], names)
	}
	if p, ok := byID[send.parent]; !ok || p.name != "msgx.inbox.process" || p.trace != send.trace {
		t.Errorf("the send span's parent is not the processing span of its trace: %+v", p)
	}
	if names["msgx.ingest"] < 21 {
		t.Errorf("ingest spans: %d, want one per request", names["msgx.ingest"])
	}
}

// msgxBin is the binary the tests run, built once for all of them.
var msgxBin struct {
	once      sync.Once
	dir, path string
	err       error
}

// TestMain removes the binary the tests built.
func TestMain(m *testing.M) {
	code := m.Run()
	if msgxBin.dir != "" {
		_ = os.RemoveAll(msgxBin.dir)
	}
	os.Exit(code)
}

// buildMsgx builds the binary (once per test process) and returns its path.
func buildMsgx(t *testing.T) string {
	t.Helper()
	msgxBin.once.Do(func() {
		start := time.Now()
		if msgxBin.dir, msgxBin.err = os.MkdirTemp("", "msgx-test-bin-"); msgxBin.err != nil {
			return
		}
		msgxBin.path = filepath.Join(msgxBin.dir, "msgx")
		// No symbol table or DWARF: the link, most of the build's time, is shorter.
		args := []string{"build", "-ldflags=-s -w", "-o", msgxBin.path}
		if raceEnabled {
			args = append(args, "-race")
		}
		if out, err := exec.Command("go", append(args, ".")...).CombinedOutput(); err != nil {
			msgxBin.err = fmt.Errorf("go build: %w\n%s", err, out)
			return
		}
		t.Logf("built the binary in %s", time.Since(start).Round(time.Millisecond))
	})
	if msgxBin.err != nil {
		t.Fatal(msgxBin.err)
	}
	return msgxBin.path
}

// prodDeps is what the sample production configuration runs on: a fresh
// PostgreSQL schema, a MariaDB mailbox table of the test's own and a Kafka
// (kfake) with the topic "msg".
type prodDeps struct {
	pgDSN, table string
	mb           *mailbox.Table
	seeds        []string
}

func newProdDeps(t *testing.T, ctx context.Context) *prodDeps {
	t.Helper()
	d := &prodDeps{}
	_, d.pgDSN = storetest.NewSchema(t)
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	d.table = "cminmsgs_e2e_" + hex.EncodeToString(rnd[:])
	var err error
	if d.mb, err = mailbox.OpenMySQL(ctx, mariaDSN, mailbox.WithTable(d.table)); err != nil {
		t.Fatalf("MariaDB: %v", err)
	}
	if err := d.mb.Create(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.mb.Drop(context.Background()); _ = d.mb.Close() })
	kf, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "msg"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kf.Close)
	d.seeds = kf.ListenAddrs()
	return d
}

// env points the sample configuration at them, with both admin tokens, the
// test processor and one relay attempt (a failed send is dead at once).
func (d *prodDeps) env() []string {
	return []string{
		"MSGX_STORE_DSN=" + d.pgDSN,
		"MSGX_MAILBOXES_SHARED_DSN=" + mariaDSN,
		"MSGX_MAILBOXES_SHARED_TABLE=" + d.table,
		"MSGX_MAILBOXES_SHARED_POLL_INTERVAL=100ms",
		"MSGX_BROKERS_MAIN_SEEDS=" + strings.Join(d.seeds, ","),
		"MSGX_ADMIN_LISTEN=127.0.0.1:0",
		"MSGX_INGRESS_LISTEN=127.0.0.1:0",
		"MSGX_ADMIN_READ_TOKEN=" + readTok,
		"MSGX_ADMIN_OPERATOR_TOKEN=" + opTok,
		"MSGX_STREAMS_SIS_PROCESSOR=test-only-flop",
		"MSGX_STREAMS_SIS_POLL_INTERVAL=100ms",
		"MSGX_RELAY_MAX_ATTEMPTS=1",
		"MSGX_STORE_MAX_CONNS=8",
	}
}

func mustClient(t *testing.T, seeds []string) *kgo.Client {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// marked counts the mailbox rows whose processed mark is written.
func marked(t *testing.T, table string) int {
	db, err := sql.Open("mysql", mariaDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(fmt.Sprintf("SELECT COUNT(*) FROM %s WHERE CMINMSGS_STATUS = 'PROCESSED'", table)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func configValue(cs []kadm.Config, key string) string {
	for _, c := range cs {
		if c.Key == key && c.Value != nil {
			return *c.Value
		}
	}
	return ""
}
