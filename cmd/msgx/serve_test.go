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

	"github.com/cloudevents/sdk-go/v2/binding/spec"
	cloudevents "github.com/cloudevents/sdk-go/v2/event"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/msgx/msgx/admin"
	"github.com/msgx/msgx/deploy"
	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/internal/testkit"
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
// trace, and SIGTERM with messages in flight, none of them lost. Each step
// builds on the ones before it, so the first step that fails ends the test.
func TestServeProduction(t *testing.T) {
	r := newProdRun(t)
	for _, step := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"traffic through the mailbox and the ingress", r.traffic},
		{"admin scopes", r.adminScopes},
		{"inbox dead letter", r.inboxDeadLetter},
		{"outbox dead letter and replay", r.outboxDeadLetter},
		{"backfill", r.backfill},
		{"metrics and readiness", r.metrics},
		{"SIGTERM with work in flight", r.sigterm},
		{"sis.msg and sis.schd on Kafka", r.kafkaRecords},
		{"trace", r.trace},
	} {
		if !t.Run(step.name, step.run) {
			return
		}
	}
}

// prodRun is the state TestServeProduction's steps share: the service, its
// dependencies, the traffic sent and the outcome expected of each message.
type prodRun struct {
	ctx    context.Context
	bin    string
	deps   *prodDeps
	env    []string
	otlp   *otlpReceiver
	svc    *service
	cons   *consumer
	db     *store.DB
	cliEnv []string

	// msgs is the traffic; before, the mailbox rows older than the start
	// position; first and late, the messages sent before and at SIGTERM.
	msgs                [][]byte
	before, first, late []int64
	expect              map[int64]prodOutcome
	succeeded           int
	// base numbers the traffic's SEQNs; unknown is the flight of a FLOP
	// nobody knows; badID, the id of the malformed message.
	base           int64
	unknown, badID string
	// flights are the flights as stored after the last step that sends.
	flights map[string]*sis.Flight
}

// prodOutcome is what a message sent must end as.
type prodOutcome struct {
	status inbox.Status
	reason string
}

// newProdRun builds the binary, starts its dependencies, an OTLP receiver
// and the service, and a consumer of its topics.
func newProdRun(t *testing.T) *prodRun {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r := &prodRun{ctx: ctx, bin: buildMsgx(t), deps: newProdDeps(t, ctx), otlp: &otlpReceiver{}, expect: map[int64]prodOutcome{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = http.Serve(ln, r.otlp) }()
	t.Cleanup(func() { _ = ln.Close() })

	// Real SIS traffic: the bundled messages the way the demo feeds them
	// (the schedule first, the composed ADFT, then the rest), each with a
	// fresh SEQN.
	r.base = time.Now().UnixNano() % 1_000_000_000
	if r.msgs, err = traffic.Ordered(r.base); err != nil {
		t.Fatal(err)
	}
	older, err := traffic.Ordered(r.base + 1000)
	if err != nil {
		t.Fatal(err)
	}
	// Rows the legacy system handled before msgx first started: the sample
	// configuration's start position (from-now) skips them.
	for _, m := range older[:2] {
		id, err := r.deps.mb.Insert(ctx, m, time.Now(), mailbox.Meta{})
		if err != nil {
			t.Fatal(err)
		}
		r.before = append(r.before, id)
	}
	r.unknown = strconv.FormatInt(900_000_000+r.base, 10)

	r.env = append(r.deps.env(),
		"OTEL_TRACES_EXPORTER=otlp",
		"OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://"+ln.Addr().String(),
		"OTEL_BSP_SCHEDULE_DELAY=100",
	)
	r.svc = startService(t, r.bin, r.env)
	r.cliEnv = []string{"MSGX_ADMIN_URL=http://" + r.svc.admin}
	r.cons = consume(t, ctx, r.deps.seeds, "sis.msg", "sis.schd", "late")
	// Cancelled again before the consumer's cleanup (cleanups run last
	// registered first), which waits for its loop to end with ctx.
	t.Cleanup(cancel)
	if r.db, err = store.Open(ctx, r.deps.pgDSN); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.db.Close)
	return r
}

// insert writes msgs to the mailbox and notes what each must end as.
func (r *prodRun) insert(t *testing.T, msgs [][]byte) []int64 {
	t.Helper()
	var ids []int64
	for _, m := range msgs {
		id, err := r.deps.mb.Insert(r.ctx, m, time.Now(), mailbox.Meta{})
		if err != nil {
			t.Fatal(err)
		}
		st, reason := expectedOutcome(t, m)
		r.expect[id] = prodOutcome{st, reason}
		ids = append(ids, id)
	}
	return ids
}

// post sends body to the HTTP ingress.
func (r *prodRun) post(t *testing.T, body []byte) (int, string) {
	t.Helper()
	resp, err := http.Post("http://"+r.svc.ingest+"/cminmsgs/send", "application/xml", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// postOK sends body to the HTTP ingress and wants it taken in.
func (r *prodRun) postOK(t *testing.T, body []byte) int64 {
	t.Helper()
	code, id := r.post(t, body)
	n, err := strconv.ParseInt(id, 10, 64)
	if code != 200 || err != nil {
		t.Fatalf("ingress: %d %s", code, id)
	}
	return n
}

// settled waits until every message of ids is terminal, then wants the
// outcome expected of each.
func (r *prodRun) settled(t *testing.T, what string, ids []int64) {
	t.Helper()
	rows := map[int64]inbox.Row{}
	testkit.Eventually(t, what, 90*time.Second, func() bool {
		for _, id := range ids {
			if rows[id].Status.Terminal() {
				continue
			}
			row, err := inbox.Get(r.ctx, r.db, "sis", id)
			if err != nil && !errors.Is(err, inbox.ErrNotFound) {
				t.Fatal(err)
			}
			if !row.Status.Terminal() {
				return false
			}
			rows[id] = row
		}
		return true
	})
	for _, id := range ids {
		if row, want := rows[id], r.expect[id]; row.Status != want.status || row.Reason != want.reason {
			t.Errorf("message %d (%s): %s %q, want %s %q", id, row.Kind, row.Status, row.Reason, want.status, want.reason)
		}
	}
}

// msgEvents are the ids of the outbox's sis.msg events, sent or not.
func (r *prodRun) msgEvents(t *testing.T) map[string]bool {
	t.Helper()
	rows, err := r.db.Query(r.ctx, "SELECT event_id FROM msgx_outbox_sent WHERE topic = 'sis.msg' UNION ALL SELECT event_id FROM msgx_outbox WHERE topic = 'sis.msg'")
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

// cli runs the msgx command against the service's admin API with token.
func (r *prodRun) cli(token string, args ...string) (string, error) {
	cmd := exec.Command(r.bin, args...)
	cmd.Env = append(os.Environ(), append(r.cliEnv, "MSGX_ADMIN_TOKEN="+token)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return out.String() + errb.String(), err
	}
	return out.String(), nil
}

// lastSchd is the newest sis.schd record of each flight on Kafka.
func (r *prodRun) lastSchd() map[string]record {
	out := map[string]record{}
	for _, rec := range r.cons.snapshot() {
		if rec.topic == "sis.schd" {
			out[rec.key] = rec
		}
	}
	return out
}

// traffic: rows written to the mailbox, then messages posted to the
// ingress, a FLOP on a flight nobody knows and a malformed body; each ends
// as expected, every msg event reaches Kafka, and the rows older than the
// start position are not taken in.
func (r *prodRun) traffic(t *testing.T) {
	r.first = r.insert(t, r.msgs[:60])
	for _, m := range r.msgs[60:100] {
		id := r.postOK(t, m)
		st, reason := expectedOutcome(t, m)
		r.expect[id] = prodOutcome{st, reason}
		r.first = append(r.first, id)
	}
	flop, err := traffic.Read("FLOP_ACFT_1.xml")
	if err != nil {
		t.Fatal(err)
	}
	flop = regexp.MustCompile(`<FLID>[^<]*</FLID>`).ReplaceAll(flop, []byte("<FLID>"+r.unknown+"</FLID>"))
	flop = regexp.MustCompile(`<SEQN>[^<]*</SEQN>`).ReplaceAll(flop, []byte("<SEQN>"+strconv.FormatInt(r.base+500, 10)+"</SEQN>"))
	noMatch := r.postOK(t, flop)
	r.expect[noMatch] = prodOutcome{inbox.Skipped, "no-match:unknown FLID " + r.unknown}
	r.first = append(r.first, noMatch)
	code, badID := r.post(t, []byte("<MSG><not closed"))
	if code != 200 {
		t.Fatalf("ingress of the malformed message: %d", code)
	}
	r.badID = badID
	r.settled(t, "the first messages to be processed", r.first)
	for _, id := range r.first {
		if r.expect[id].status == inbox.Succeeded {
			r.succeeded++
		}
	}
	testkit.Eventually(t, "the msg events on Kafka", 90*time.Second, func() bool {
		want := r.msgEvents(t)
		for id := range want {
			if !r.cons.has(id) {
				return false
			}
		}
		return len(want) > 0
	})
	for _, id := range r.before {
		if _, err := inbox.Get(r.ctx, r.db, "sis", id); !errors.Is(err, inbox.ErrNotFound) {
			t.Errorf("mailbox row %d, older than the start position, was taken in: %v", id, err)
		}
	}
}

// adminScopes: no token or a wrong one is refused, the read token cannot
// replay, and msgx status shows the stream and the relay targets.
func (r *prodRun) adminScopes(t *testing.T) {
	if code, _ := r.svc.get(t, "/v1/status", ""); code != 401 {
		t.Errorf("status without a token: %d", code)
	}
	if code, _ := r.svc.get(t, "/v1/status", "not-the-token-0123456789"); code != 401 {
		t.Errorf("status with a wrong token: %d", code)
	}
	if out, err := r.cli(readTok, "replay", "--ids", r.badID, "--stream", "sis", "--reason", "try"); err == nil || !strings.Contains(out, "403") {
		t.Errorf("replay with the read-only token: %v %s", err, out)
	}
	out, err := r.cli(readTok, "status")
	if err != nil || !strings.Contains(out, "sis") || !strings.Contains(out, "kafka:msg") {
		t.Errorf("msgx status: %v\n%s", err, out)
	}
	// Each relay target says whether this instance has it paused.
	if !strings.Contains(out, "PAUSED") || !regexp.MustCompile(`(?m)^kafka:msg\s.*\sno\s`).MatchString(out) {
		t.Errorf("msgx status: no PAUSED column, or kafka:msg not shown running:\n%s", out)
	}
}

// inboxDeadLetter: the malformed message is a dead letter; it cannot be
// replayed.
func (r *prodRun) inboxDeadLetter(t *testing.T) {
	testkit.Eventually(t, "the malformed message to go DEAD", 30*time.Second, func() bool {
		out, err := r.cli(readTok, "dead", "list", "--source", "inbox", "--json")
		var dl admin.DeadList
		return err == nil && json.Unmarshal([]byte(out), &dl) == nil && len(dl.Inbox) == 1 &&
			strconv.FormatInt(dl.Inbox[0].ID, 10) == r.badID && dl.Inbox[0].Class == "MALFORMED"
	})
	// A refused id makes the command exit non-zero.
	out, err := r.cli(opTok, "replay", "--stream", "sis", "--ids", r.badID, "--reason", "check", "--yes")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(out, "not replayable") || !strings.Contains(out, "nothing to replay") {
		t.Errorf("replay of a MALFORMED message: %v\n%s", err, out)
	}
	if out, err := r.cli(readTok, "dead", "show", "inbox", "sis", r.badID); err != nil || !strings.Contains(out, "MALFORMED") {
		t.Errorf("dead show: %v\n%s", err, out)
	}
}

// outboxDeadLetter: an event for a topic that does not exist yet, written
// the way a pipeline writes it, is DEAD after its one attempt; once the
// topic exists, a dry run replays nothing and the replay sends it, audited.
func (r *prodRun) outboxDeadLetter(t *testing.T) {
	ctx, db := r.ctx, r.db
	if err := db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		return outbox.Enqueue(ctx, tx, time.Now(), outbox.Event{ID: "late-1", Target: "kafka:msg", Topic: "late", Key: "k", Payload: []byte(`{}`)})
	}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the event for the missing topic to go DEAD", 90*time.Second, func() bool {
		rec, err := outbox.Get(ctx, db, "late-1")
		return err == nil && rec.Status == outbox.StatusDead
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
	adm := kadm.NewClient(mustClient(t, r.deps.seeds))
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
	out, err := r.cli(opTok, "replay", "--source", "outbox", "--target", "kafka:msg", "--reason", "topic created")
	if err != nil || !strings.Contains(out, "1 would be replayed: late-1") || !strings.Contains(out, "dry run") {
		t.Fatalf("dry run of the outbox replay: %v\n%s", err, out)
	}
	if rec, _ := outbox.Get(ctx, db, "late-1"); rec.Status != outbox.StatusDead {
		t.Fatalf("the dry run replayed: %s", rec.Status)
	}
	out, err = r.cli(opTok, "replay", "--source", "outbox", "--target", "kafka:msg", "--reason", "topic created", "--yes")
	if err != nil || !strings.Contains(out, "1 replayed: late-1") {
		t.Fatalf("outbox replay: %v\n%s", err, out)
	}
	testkit.Eventually(t, "the replayed event on Kafka", 60*time.Second, func() bool { return r.cons.has("late-1") })
	var audits int
	if err := db.QueryRow(ctx, "SELECT COUNT(*) FROM msgx_admin_audit WHERE source = 'outbox' AND NOT dry_run AND count = 1").Scan(&audits); err != nil || audits != 1 {
		t.Errorf("audit of the replay: %d rows, %v", audits, err)
	}
	if out, err := r.cli(readTok, "flights", "--json"); err != nil || !strings.Contains(out, `"flights"`) {
		t.Errorf("flights: %v %s", err, out)
	}
}

// backfill: every processed row gets its mark in the MariaDB table.
func (r *prodRun) backfill(t *testing.T) {
	testkit.Eventually(t, "the processed marks", 60*time.Second, func() bool {
		out, err := r.cli(readTok, "backfill", "status", "--json")
		var bs []admin.BackfillStatus
		return err == nil && json.Unmarshal([]byte(out), &bs) == nil && len(bs) == 1 && bs[0].Pending == 0 && marked(t, r.deps.table) == len(r.first)+1
	})
}

// metrics: /readyz answers 200, /metrics counts the traffic, and every
// series the alert rules and the dashboard use is exported.
func (r *prodRun) metrics(t *testing.T) {
	if code, body := r.svc.get(t, "/readyz", ""); code != 200 {
		t.Errorf("readyz: %d %s", code, body)
	}
	_, metrics := r.svc.get(t, "/metrics", "")
	for _, m := range []string{fmt.Sprintf(`msgx_inbox_settled_total{status="SUCCEEDED",stream="sis"} %d`, r.succeeded),
		fmt.Sprintf(`msgx_inbox_settled_total{status="SKIPPED",stream="sis"} %d`, len(r.first)-r.succeeded),
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
	for _, m := range walOnlyMetrics { // the outbox's WAL mode (TestSISOnBothOutboxModes)
		onlyWhen[m] = true
	}
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
}

// sigterm: the rest of the traffic, then SIGTERM with work in flight;
// whatever the first process did not finish, the next one does; none is
// lost, and the newest state of every flight reaches sis.schd (the
// compacted lane sends within its flush period).
func (r *prodRun) sigterm(t *testing.T) {
	r.late = r.insert(t, r.msgs[100:])
	r.svc.stop(t)
	r.svc = startService(t, r.bin, r.env)
	r.settled(t, "the messages in flight at SIGTERM to be processed", append(r.first, r.late...))

	flids := map[string]bool{}
	for _, rec := range r.cons.snapshot() {
		if rec.topic == "sis.msg" {
			flids[rec.key] = true
		}
	}
	flights, err := sis.Read(r.ctx, r.db, slices.Collect(maps.Keys(flids)))
	if err != nil {
		t.Fatal(err)
	}
	r.flights = flights
	if len(flights) != 4 || flights["15"] == nil || flights["15"].Status != sis.StatusDeleted || flights[r.unknown] != nil {
		t.Errorf("flights stored: %v", slices.Collect(maps.Keys(flights)))
	}
	testkit.Eventually(t, "every event on Kafka and the newest state of every flight on sis.schd", 90*time.Second, func() bool {
		for id := range r.msgEvents(t) {
			if !r.cons.has(id) {
				return false
			}
		}
		last := r.lastSchd()
		for flid, f := range flights {
			if rec, ok := last[flid]; !ok || rec.id != "sis:"+strconv.FormatInt(f.LastMsgID, 10)+":schd:"+flid {
				return false
			}
		}
		return true
	})
	r.svc.stop(t)
}

// kafkaRecords: sis.msg has each event of the outbox once (a redelivery
// only with the same id, key and value), per flight in state version order;
// the newest sis.schd record of each flight is its stored state.
func (r *prodRun) kafkaRecords(t *testing.T) {
	want := r.msgEvents(t)
	got := r.cons.distinct("sis.msg")
	if len(got) != len(want) {
		t.Errorf("sis.msg: %d distinct events on Kafka, %d msg events in the outbox", len(got), len(want))
	}
	for id := range want {
		if !got[id] {
			t.Errorf("msg event %s never reached Kafka", id)
		}
	}
	r.cons.mu.Lock()
	if len(r.cons.dups) > 0 {
		t.Errorf("event ids seen again with another key or value: %v", r.cons.dups)
	}
	r.cons.mu.Unlock()
	seen := map[string]bool{}
	version := map[string]int64{}
	for _, rec := range r.cons.snapshot() {
		if rec.topic != "sis.msg" || seen[rec.id] {
			continue
		}
		seen[rec.id] = true
		var ev sis.MsgEvent
		if err := json.Unmarshal(rec.value, &ev); err != nil {
			t.Fatalf("sis.msg %s: %v", rec.id, err)
		}
		if ev.FLID != rec.key || ev.MsgID != eventMsgID(rec.id) {
			t.Errorf("sis.msg %s: key %s, event of flight %s message %d", rec.id, rec.key, ev.FLID, ev.MsgID)
		}
		if ev.StateVersion <= version[rec.key] {
			t.Errorf("flight %s: state version %d (%s) after %d", rec.key, ev.StateVersion, rec.id, version[rec.key])
		}
		version[rec.key] = ev.StateVersion
		if slices.Contains(r.before, ev.MsgID) {
			t.Errorf("mailbox row %d, older than the start position, was processed", ev.MsgID)
		}
		ce, err := cloudEvent(rec.headers, rec.value)
		if err != nil || ce.ID() != rec.id || ce.Type() != "msgx.sis.msg.v1" || ce.Source() != sis.CloudEventsSource ||
			ce.Subject() != rec.key || ce.DataContentType() != "application/json" || ce.Time().IsZero() || !bytes.Equal(ce.Data(), rec.value) {
			t.Errorf("sis.msg %s as a CloudEvent: %v %v", rec.id, err, ce)
		}
	}
	last := r.lastSchd()
	for flid, f := range r.flights {
		rec := last[flid]
		if f.Status == sis.StatusDeleted {
			if rec.value != nil {
				t.Errorf("flight %s is deleted, its newest sis.schd record is not a tombstone: %s", flid, rec.value)
			}
			continue
		}
		var ev sis.SchdEvent
		if err := json.Unmarshal(rec.value, &ev); err != nil {
			t.Fatalf("sis.schd %s: %v", rec.id, err)
		}
		if ev.FLID != flid || ev.OperationDay != f.OperationDay || ev.Status != f.Status || ev.StateVersion != f.Version ||
			ev.LastMsgID != f.LastMsgID || !maps.Equal(ev.Fields, f.Fields) || !sameJSON(t, ev.Collections, f.Collections) {
			t.Errorf("flight %s: the newest sis.schd record\n%s\nis not the stored state %+v", flid, rec.value, *f)
		}
		if version[flid] != f.Version {
			t.Errorf("flight %s: version %d stored, %d on sis.msg", flid, f.Version, version[flid])
		}
	}
}

// walOnlyMetrics are the series of the outbox's WAL relay that the alert
// rules use: they exist only with outbox.mode wal.
var walOnlyMetrics = []string{"msgx_outbox_wal_slot_invalidated", "msgx_outbox_wal_retained_bytes", "msgx_outbox_wal_holder", "msgx_outbox_wal_paused"}

// cloudEvent reads a Kafka record as the CloudEvents Kafka protocol binding
// reads one in binary content mode: the ce_ headers by the SDK's attribute
// table for their spec version, content-type as the data's type, the value
// as the data; the event must validate.
func cloudEvent(headers []kgo.RecordHeader, value []byte) (cloudevents.Event, error) {
	vs := spec.WithPrefix("ce_")
	var v spec.Version
	for _, h := range headers {
		if h.Key == vs.PrefixedSpecVersionName() {
			v = vs.Version(string(h.Value))
		}
	}
	if v == nil {
		return cloudevents.Event{}, errors.New("no ce_specversion of a known version")
	}
	e := cloudevents.Event{Context: v.NewContext()}
	for _, h := range headers {
		switch {
		case h.Key == "content-type":
			if err := e.Context.SetDataContentType(string(h.Value)); err != nil {
				return e, err
			}
		case strings.HasPrefix(h.Key, "ce_") && h.Key != vs.PrefixedSpecVersionName():
			if err := v.SetAttribute(e.Context, h.Key, string(h.Value)); err != nil {
				return e, fmt.Errorf("%s: %w", h.Key, err)
			}
		}
	}
	e.DataEncoded = value
	return e, e.Validate()
}

// trace: ingest and processing spans, and the relay's send continuing the
// processing span's trace, whose context the Kafka record carries.
func (r *prodRun) trace(t *testing.T) {
	var rec record
	for _, c := range r.cons.snapshot() {
		if c.topic == "sis.msg" && eventMsgID(c.id) == r.first[0] {
			rec = c
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
	byID := map[string]span{}
	names := map[string]int{}
	for _, s := range r.otlp.all() {
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
