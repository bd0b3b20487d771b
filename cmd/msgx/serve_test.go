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
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
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
	"github.com/msgx/msgx/deploy"
	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/pipeline/sis"
	"github.com/msgx/msgx/pipeline/sis/traffic"
	"github.com/msgx/msgx/source/mailbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

const (
	mariaDSN = "root@tcp(127.0.0.1:3306)/test"
	readTok  = "eR7wQ2zX9kV4nB6mT1cJ8hF3dS5gL0aYu"
	opTok    = "eO4pN9vB2cX7zL5kJ1hG8fD3sA6qW0rTy"
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
	return startServiceWith(t, bin, "../../deploy/msgx.production.yaml", true, env)
}

// startServiceWith starts the binary on the configuration at path and waits
// for its admin listener and, when ingress is true, its HTTP ingress.
func startServiceWith(t *testing.T, bin, path string, ingress bool, env []string) *service {
	t.Helper()
	cmd := exec.Command(bin, "serve", "--config", path)
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
	for s.admin == "" || ingress && s.ingest == "" {
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

// record is what the consumer keeps of a Kafka record.
type record struct {
	topic, key, id string
	value          []byte
	headers        []kgo.RecordHeader
}

// consumer reads the event topics from kfake: every record in arrival
// order, and the first one of each event id.
type consumer struct {
	mu    sync.Mutex
	all   []record
	first map[string]*record
	dups  []string // event ids seen again with a different key or value
}

// snapshot returns the records received so far, in arrival order.
func (c *consumer) snapshot() []record {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.all)
}

func (c *consumer) has(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.first[id] != nil
}

// distinct returns the event ids seen on a topic.
func (c *consumer) distinct(topic string) map[string]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]bool{}
	for id, r := range c.first {
		if r.topic == topic {
			out[id] = true
		}
	}
	return out
}

func consume(t *testing.T, ctx context.Context, seeds []string, topics ...string) *consumer {
	// A short metadata age: the "late" topic is created during the test.
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topics...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.MetadataMinAge(100*time.Millisecond), kgo.MetadataMaxAge(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	c := &consumer{first: map[string]*record{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachRecord(func(r *kgo.Record) {
				rec := record{topic: r.Topic, key: string(r.Key), value: r.Value, headers: r.Headers}
				for _, h := range r.Headers {
					if h.Key == "msgx-event-id" {
						rec.id = string(h.Value)
					}
				}
				c.mu.Lock()
				defer c.mu.Unlock()
				c.all = append(c.all, rec)
				if prev := c.first[rec.id]; prev == nil {
					c.first[rec.id] = &rec
				} else if prev.topic != rec.topic || prev.key != rec.key || !bytes.Equal(prev.value, rec.value) {
					c.dups = append(c.dups, rec.id)
				}
			})
		}
	}()
	t.Cleanup(func() { <-done; cl.Close() })
	return c
}

// eventMsgID is the message id in a SIS event id, sis:<id>:msg|schd:<FLID>.
func eventMsgID(id string) int64 {
	parts := strings.Split(id, ":")
	if len(parts) != 4 || parts[0] != "sis" {
		return 0
	}
	n, _ := strconv.ParseInt(parts[1], 10, 64)
	return n
}

var typeRE = regexp.MustCompile(`<TYPE>([^<]*)</TYPE>\s*<STYP>([^<]*)</STYP>`)

// expectedOutcome is how the SIS processor with its default settings ends a
// message of the bundled traffic (docs/sis.md): REGN is ignored, everything
// else (schedules, FLOPs on known flights, the seasonal schedule and the
// reference data) succeeds.
func expectedOutcome(t *testing.T, msg []byte) (inbox.Status, string) {
	m := typeRE.FindSubmatch(msg)
	if m == nil {
		t.Fatalf("no TYPE/STYP in %.200s", msg)
	}
	if typ, styp := string(m[1]), string(m[2]); typ == "REGN" {
		return inbox.Skipped, "ignored:REGN/" + styp
	}
	return inbox.Succeeded, ""
}

// TestServeProduction runs the real binary with the sample production
// configuration against PostgreSQL, a MariaDB mailbox and a Kafka (kfake):
// traffic through the mailbox and the HTTP ingress, /metrics, the admin API
// and its scopes, an inbox and an outbox dead letter, a replay, an exported
// trace, and SIGTERM with messages in flight, none of them lost.
func TestServeProduction(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bin := buildMsgx(t)
	deps := newProdDeps(t, ctx)
	mb, tableName, seeds := deps.mb, deps.table, deps.seeds
	pgDSN := deps.pgDSN

	otlp := &otlpReceiver{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = http.Serve(ln, otlp) }()
	t.Cleanup(func() { _ = ln.Close() })

	// Real SIS traffic: the bundled messages the way the demo feeds them
	// (the schedule first, the composed ADFT, then the rest), each with a
	// fresh SEQN.
	base := time.Now().UnixNano() % 1_000_000_000
	msgs, err := traffic.Ordered(base)
	if err != nil {
		t.Fatal(err)
	}
	older, err := traffic.Ordered(base + 1000)
	if err != nil {
		t.Fatal(err)
	}
	// Rows the legacy system handled before msgx first started: the sample
	// configuration's start position (from-now) skips them.
	var before []int64
	for _, m := range older[:2] {
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
	cons := consume(t, ctx, seeds, "sis.msg", "sis.schd", "late")
	db, err := store.Open(ctx, pgDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	// outcome is what each message sent must end as.
	type outcome struct {
		status inbox.Status
		reason string
	}
	expect := map[int64]outcome{}
	// Traffic: rows written to the mailbox, then messages posted to the
	// ingress, a FLOP on a flight nobody knows and a malformed body.
	var first []int64
	for _, m := range msgs[:60] {
		id, err := mb.Insert(ctx, m, time.Now(), mailbox.Meta{})
		if err != nil {
			t.Fatal(err)
		}
		st, reason := expectedOutcome(t, m)
		expect[id] = outcome{st, reason}
		first = append(first, id)
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
	postOK := func(body []byte) int64 {
		code, id := post(body)
		n, err := strconv.ParseInt(id, 10, 64)
		if code != 200 || err != nil {
			t.Fatalf("ingress: %d %s", code, id)
		}
		return n
	}
	for _, m := range msgs[60:100] {
		id := postOK(m)
		st, reason := expectedOutcome(t, m)
		expect[id] = outcome{st, reason}
		first = append(first, id)
	}
	flop, err := traffic.Read("FLOP_ACFT_1.xml")
	if err != nil {
		t.Fatal(err)
	}
	unknown := strconv.FormatInt(900_000_000+base, 10)
	flop = regexp.MustCompile(`<FLID>[^<]*</FLID>`).ReplaceAll(flop, []byte("<FLID>"+unknown+"</FLID>"))
	flop = regexp.MustCompile(`<SEQN>[^<]*</SEQN>`).ReplaceAll(flop, []byte("<SEQN>"+strconv.FormatInt(base+500, 10)+"</SEQN>"))
	noMatch := postOK(flop)
	expect[noMatch] = outcome{inbox.Skipped, "no-match:unknown FLID " + unknown}
	first = append(first, noMatch)
	code, badID := post([]byte("<MSG><not closed"))
	if code != 200 {
		t.Fatalf("ingress of the malformed message: %d", code)
	}
	// settled waits until every message is terminal, then wants the
	// outcome expected of each.
	settled := func(what string, ids []int64) {
		t.Helper()
		rows := map[int64]inbox.Row{}
		waitUntil(t, what, 90*time.Second, func() bool {
			for _, id := range ids {
				if rows[id].Status.Terminal() {
					continue
				}
				r, err := inbox.Get(ctx, db, "sis", id)
				if err != nil && !errors.Is(err, inbox.ErrNotFound) {
					t.Fatal(err)
				}
				if !r.Status.Terminal() {
					return false
				}
				rows[id] = r
			}
			return true
		})
		for _, id := range ids {
			if r, want := rows[id], expect[id]; r.Status != want.status || r.Reason != want.reason {
				t.Errorf("message %d (%s): %s %q, want %s %q", id, r.Kind, r.Status, r.Reason, want.status, want.reason)
			}
		}
	}
	settled("the first messages to be processed", first)
	succeeded := 0
	for _, id := range first {
		if expect[id].status == inbox.Succeeded {
			succeeded++
		}
	}
	// Every msg event of the outbox reaches Kafka.
	msgEvents := func() map[string]bool {
		rows, err := db.Query(ctx, "SELECT event_id FROM msgx_outbox_sent WHERE topic = 'sis.msg' UNION ALL SELECT event_id FROM msgx_outbox WHERE topic = 'sis.msg'")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]bool{}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			out[id] = true
		}
		return out
	}
	waitUntil(t, "the msg events on Kafka", 90*time.Second, func() bool {
		want := msgEvents()
		for id := range want {
			if !cons.has(id) {
				return false
			}
		}
		return len(want) > 0
	})
	for _, id := range before {
		if _, err := inbox.Get(ctx, db, "sis", id); !errors.Is(err, inbox.ErrNotFound) {
			t.Errorf("mailbox row %d, older than the start position, was taken in: %v", id, err)
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
	// Each relay target says whether this instance has it paused.
	if !strings.Contains(out, "PAUSED") || !regexp.MustCompile(`(?m)^kafka:msg\s.*\sno\s`).MatchString(out) {
		t.Errorf("msgx status: no PAUSED column, or kafka:msg not shown running:\n%s", out)
	}

	// The malformed message is a dead letter; it cannot be replayed.
	waitUntil(t, "the malformed message to go DEAD", 30*time.Second, func() bool {
		out, err := cli(readTok, "dead", "list", "--source", "inbox", "--json")
		var dl admin.DeadList
		return err == nil && json.Unmarshal([]byte(out), &dl) == nil && len(dl.Inbox) == 1 &&
			strconv.FormatInt(dl.Inbox[0].ID, 10) == badID && dl.Inbox[0].Class == "MALFORMED"
	})
	// A refused id makes the command exit non-zero.
	out, err = cli(opTok, "replay", "--stream", "sis", "--ids", badID, "--reason", "check", "--yes")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(out, "not replayable") || !strings.Contains(out, "nothing to replay") {
		t.Errorf("replay of a MALFORMED message: %v\n%s", err, out)
	}
	if out, err := cli(readTok, "dead", "show", "inbox", "sis", badID); err != nil || !strings.Contains(out, "MALFORMED") {
		t.Errorf("dead show: %v\n%s", err, out)
	}

	// An outbox dead letter: an event for a topic that does not exist yet,
	// written the way a pipeline writes it; one attempt, then DEAD.
	if err := db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		return outbox.Enqueue(ctx, tx, time.Now(), outbox.Event{ID: "late-1", Target: "kafka:msg", Topic: "late", Key: "k", Payload: []byte(`{}`)})
	}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the event for the missing topic to go DEAD", 90*time.Second, func() bool {
		r, err := outbox.Get(ctx, db, "late-1")
		return err == nil && r.Status == outbox.StatusDead
	})
	// It is the only dead event: every other topic exists.
	var deadIDs []string
	rows, err := db.Query(ctx, "SELECT event_id FROM msgx_outbox WHERE status = 'DEAD' ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		deadIDs = append(deadIDs, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(deadIDs, []string{"late-1"}) {
		t.Errorf("dead outbox events %v, want only late-1", deadIDs)
	}
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
		return err == nil && json.Unmarshal([]byte(out), &bs) == nil && len(bs) == 1 && bs[0].Pending == 0 && marked(t, tableName) == len(first)+1
	})

	// Metrics and readiness.
	if code, body := svc.get(t, "/readyz", ""); code != 200 {
		t.Errorf("readyz: %d %s", code, body)
	}
	_, metrics := svc.get(t, "/metrics", "")
	for _, m := range []string{fmt.Sprintf(`msgx_inbox_settled_total{status="SUCCEEDED",stream="sis"} %d`, succeeded),
		fmt.Sprintf(`msgx_inbox_settled_total{status="SKIPPED",stream="sis"} %d`, len(first)-succeeded),
		`msgx_outbox_published_total{target="kafka:msg"}`, `msgx_outbox_published_total{target="kafka:schd"}`,
		`msgx_broker_published_total{adapter="main",topic="sis.msg"}`, `msgx_stream_dead{stream="sis"} 1`, `msgx_stream_backlog{stream="sis"} 0`} {
		if !bytes.Contains(metrics, []byte(m)) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
	rules, _ := os.ReadFile("../../deploy/alerts.yaml")
	// Series that exist only in a state this run does not reach: the
	// listeners' certificate metrics need TLS files (internal/tlsfiles tests
	// them), a blocked key's series a key held by a dead event (admin tests
	// them).
	onlyWhen := map[string]bool{"msgx_tls_certificate_expiry_timestamp_seconds": true, "msgx_tls_reloads_total": true,
		"msgx_outbox_blocked_key_waiting": true}
	for _, m := range regexp.MustCompile(`msgx_[a-z_]+`).FindAllString(string(rules), -1) {
		if !onlyWhen[m] && !bytes.Contains(metrics, []byte("\n"+m)) && !bytes.Contains(metrics, []byte("# TYPE "+m)) {
			t.Errorf("the alert rules use %s, which /metrics does not export", m)
		}
	}
	// The dashboard's queries: every metric with series, every label it
	// groups by or shows on them. The route pipeline is not configured
	// here: routepassport's TestDashboardMetrics checks its panels.
	qs, err := deploy.Dashboard()
	if err != nil {
		t.Fatal(err)
	}
	routeOnly := func(m string) bool { return strings.HasPrefix(m, "route_passport_") }
	for _, p := range deploy.CheckExposition(qs, string(metrics), routeOnly) {
		t.Errorf("the dashboard queries %s", p)
	}

	// SIGTERM with work in flight: the rest of the traffic; whatever the
	// first process did not finish, the next one does; none is lost.
	var late []int64
	for _, m := range msgs[100:] {
		id, err := mb.Insert(ctx, m, time.Now(), mailbox.Meta{})
		if err != nil {
			t.Fatal(err)
		}
		st, reason := expectedOutcome(t, m)
		expect[id] = outcome{st, reason}
		late = append(late, id)
	}
	svc.stop(t)
	svc = startService(t, bin, env)
	settled("the messages in flight at SIGTERM to be processed", append(first, late...))

	// The flights as stored, and the newest sis.schd record of each: the
	// compacted lane sends within its flush period.
	flids := map[string]bool{}
	for _, r := range cons.snapshot() {
		if r.topic == "sis.msg" {
			flids[r.key] = true
		}
	}
	flights, err := sis.Read(ctx, db, slices.Collect(maps.Keys(flids)))
	if err != nil {
		t.Fatal(err)
	}
	if len(flights) != 4 || flights["15"] == nil || flights["15"].Status != sis.StatusDeleted || flights[unknown] != nil {
		t.Errorf("flights stored: %v", slices.Collect(maps.Keys(flights)))
	}
	lastSchd := func() map[string]record {
		out := map[string]record{}
		for _, r := range cons.snapshot() {
			if r.topic == "sis.schd" {
				out[r.key] = r
			}
		}
		return out
	}
	waitUntil(t, "every event on Kafka and the newest state of every flight on sis.schd", 90*time.Second, func() bool {
		for id := range msgEvents() {
			if !cons.has(id) {
				return false
			}
		}
		last := lastSchd()
		for flid, f := range flights {
			if r, ok := last[flid]; !ok || r.id != "sis:"+strconv.FormatInt(f.LastMsgID, 10)+":schd:"+flid {
				return false
			}
		}
		return true
	})
	svc.stop(t)

	// sis.msg: each event of the outbox once (a redelivery only with the
	// same id, key and value), per flight in state version order.
	want := msgEvents()
	got := cons.distinct("sis.msg")
	if len(got) != len(want) {
		t.Errorf("sis.msg: %d distinct events on Kafka, %d msg events in the outbox", len(got), len(want))
	}
	for id := range want {
		if !got[id] {
			t.Errorf("msg event %s never reached Kafka", id)
		}
	}
	cons.mu.Lock()
	if len(cons.dups) > 0 {
		t.Errorf("event ids seen again with another key or value: %v", cons.dups)
	}
	cons.mu.Unlock()
	seen := map[string]bool{}
	version := map[string]int64{}
	for _, r := range cons.snapshot() {
		if r.topic != "sis.msg" || seen[r.id] {
			continue
		}
		seen[r.id] = true
		var ev sis.MsgEvent
		if err := json.Unmarshal(r.value, &ev); err != nil {
			t.Fatalf("sis.msg %s: %v", r.id, err)
		}
		if ev.FLID != r.key || ev.MsgID != eventMsgID(r.id) {
			t.Errorf("sis.msg %s: key %s, event of flight %s message %d", r.id, r.key, ev.FLID, ev.MsgID)
		}
		if ev.StateVersion <= version[r.key] {
			t.Errorf("flight %s: state version %d (%s) after %d", r.key, ev.StateVersion, r.id, version[r.key])
		}
		version[r.key] = ev.StateVersion
		if slices.Contains(before, ev.MsgID) {
			t.Errorf("mailbox row %d, older than the start position, was processed", ev.MsgID)
		}
	}
	// sis.schd: the newest record of each flight is its stored state.
	last := lastSchd()
	for flid, f := range flights {
		r := last[flid]
		if f.Status == sis.StatusDeleted {
			if r.value != nil {
				t.Errorf("flight %s is deleted, its newest sis.schd record is not a tombstone: %s", flid, r.value)
			}
			continue
		}
		var ev sis.SchdEvent
		if err := json.Unmarshal(r.value, &ev); err != nil {
			t.Fatalf("sis.schd %s: %v", r.id, err)
		}
		if ev.FLID != flid || ev.OperationDay != f.OperationDay || ev.Status != f.Status || ev.StateVersion != f.Version ||
			ev.LastMsgID != f.LastMsgID || !maps.Equal(ev.Fields, f.Fields) || !sameJSON(t, ev.Collections, f.Collections) {
			t.Errorf("flight %s: the newest sis.schd record\n%s\nis not the stored state %+v", flid, r.value, *f)
		}
		if version[flid] != f.Version {
			t.Errorf("flight %s: version %d stored, %d on sis.msg", flid, f.Version, version[flid])
		}
	}

	// The trace: ingest and processing spans, and the relay's send continuing
	// the processing span's trace, whose context the Kafka record carries.
	var rec record
	for _, r := range cons.snapshot() {
		if r.topic == "sis.msg" && eventMsgID(r.id) == first[0] {
			rec = r
			break
		}
	}
	var traceparent string
	for _, h := range rec.headers {
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
	if names["msgx.ingest"] < 42 {
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
// (kfake) with the topic "sis.msg".
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
	kf, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "sis.msg", "sis.ref"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kf.Close)
	d.seeds = kf.ListenAddrs()
	return d
}

// env points the sample configuration at them, with both admin tokens and
// one relay attempt (a failed send is dead at once).
func (d *prodDeps) env() []string {
	return []string{
		"MSGX_STORE_DSN=" + d.pgDSN,
		"MSGX_MAILBOXES_SHARED_DSN=" + mariaDSN,
		"MSGX_MAILBOXES_SHARED_TABLE=" + d.table,
		"MSGX_MAILBOXES_SHARED_POLL_INTERVAL=100ms",
		"MSGX_BROKERS_MAIN_SEEDS=" + strings.Join(d.seeds, ","),
		"MSGX_ADMIN_LISTEN=127.0.0.1:0",
		"MSGX_INGRESS_LISTEN=127.0.0.1:0",
		// The sample's sender, posting from this host.
		"MSGX_INGRESS_SENDERS_AODB_ADDRESSES=127.0.0.1",
		"MSGX_ADMIN_READ_TOKEN=" + readTok,
		"MSGX_ADMIN_OPERATOR_TOKEN=" + opTok,
		"MSGX_STREAMS_SIS_POLL_INTERVAL=100ms",
		"MSGX_RELAY_MAX_ATTEMPTS=1",
		"MSGX_STORE_MAX_CONNS=8",
	}
}

// sameJSON says whether a and b encode to the same JSON value.
func sameJSON(t *testing.T, a, b any) bool {
	t.Helper()
	var va, vb any
	for _, p := range []struct {
		in  any
		out *any
	}{{a, &va}, {b, &vb}} {
		raw, err := json.Marshal(p.in)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, p.out); err != nil {
			t.Fatal(err)
		}
	}
	return reflect.DeepEqual(va, vb)
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
