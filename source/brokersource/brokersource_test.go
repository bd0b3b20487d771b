package brokersource_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/broker/rabbitmq"
	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/internal/tracing"
	"github.com/msgx/msgx/source/brokersource"
	"github.com/msgx/msgx/source/mailbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

const amqpURL = "amqp://guest:guest@127.0.0.1:5672/"

// identityProc takes the payload as the business identity and counts the
// messages it processes.
type identityProc struct {
	mu   sync.Mutex
	seen []string
}

func (p *identityProc) Decode(b []byte) (inbox.Decoded, error) {
	return inbox.Decoded{Identity: string(b), Kind: "t", Value: string(b)}, nil
}

func (p *identityProc) Process(_ context.Context, _ store.Tx, m *inbox.Message) (inbox.Outcome, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen = append(p.seen, string(m.Payload))
	return inbox.Done(), nil
}

// patience bounds every wait of these tests for a condition.
const patience = 30 * time.Second

type row struct {
	id                      int64
	payload                 string
	status                  inbox.Status
	reason                  string
	traceparent, tracestate string
}

func rows(t *testing.T, db *store.DB, stream string) []row {
	t.Helper()
	rs, err := db.Query(context.Background(), `SELECT msg_id, payload, status, COALESCE(reason, ''), COALESCE(traceparent, ''), COALESCE(tracestate, '')
		FROM msgx_inbox WHERE stream = $1 ORDER BY msg_id`, stream)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var out []row
	for rs.Next() {
		var r row
		var p []byte
		var st string
		if err := rs.Scan(&r.id, &p, &st, &r.reason, &r.traceparent, &r.tracestate); err != nil {
			t.Fatal(err)
		}
		r.payload, r.status = string(p), inbox.Status(st)
		out = append(out, r)
	}
	return out
}

// A RabbitMQ queue feeds a stream without a mailbox: the deliveries become
// inbox messages in order under the stream's own ids, with their trace
// context; a delivery whose consumer stops after the inbox commit and before
// the acknowledgement comes again and is SKIPPED as a duplicate (the
// processor runs once per message); a payload over the limit goes to the
// dead-letter queue.
func TestRabbitMQFeedsAStream(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db := storetest.NewPostgres(t, store.WithMigrate(mailbox.Schema()))
	topic, group := storetest.UniqueName("bsrc"), "msgx"
	log := testkit.Quiet()
	b := startRabbit(ctx, t, log, topic, group)

	exp := tracetest.NewInMemoryExporter()
	tr := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)).Tracer("test")
	src, err := brokersource.New(b, broker.Subscription{Topic: topic, Group: group}, db, "s",
		brokersource.WithMaxBytes(64), brokersource.WithTracer(tr), brokersource.WithLogger(log), brokersource.WithName("feed"))
	if err != nil {
		t.Fatal(err)
	}
	// The topology first, so nothing published is lost before a consumer runs.
	first, err := b.Listen(ctx, broker.Subscription{Topic: topic, Group: group}, func(hctx context.Context, d *broker.Delivery) error {
		if err := src.Handle(hctx, d, nil); err != nil {
			return err
		}
		if string(d.Payload) == "B" {
			// Committed, never acknowledged: the consumer dies here.
			<-hctx.Done()
			return hctx.Err()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	pctx, producer := tr.Start(ctx, "producer")
	headers := tracing.Inject(pctx, map[string]string{"tracestate": "vendor=1"})
	producer.End()
	for _, m := range []*broker.Message{
		{Payload: []byte("A"), Headers: headers},
		{Payload: []byte("B")},
		{Payload: bytes.Repeat([]byte("x"), 65)},
		{Payload: []byte("C")},
	} {
		if err := b.SendConfirmed(ctx, topic, m); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, "A and B in the inbox", patience, func() bool { return len(rows(t, db, "s")) == 2 })
	sctx, scancel := context.WithTimeout(ctx, time.Second)
	defer scancel()
	_ = first.Stop(sctx)

	var dead atomic.Value
	if _, err := b.Listen(ctx, broker.Subscription{Topic: topic + ".dlq", Group: driver.DeadLetterGroup}, func(_ context.Context, d *broker.Delivery) error {
		dead.Store(d.Header(broker.HeaderDeadReason))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	proc := &identityProc{}
	eng, err := inbox.New(db, "s", proc, inbox.WithTracer(tr), inbox.WithSource(src), inbox.WithPollInterval(50*time.Millisecond), inbox.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	ectx, stop := context.WithCancel(ctx)
	go func() { done <- eng.Run(ectx) }()
	defer func() { stop(); <-done }()

	testkit.Eventually(t, "four terminal messages", patience, func() bool {
		rs := rows(t, db, "s")
		for _, r := range rs {
			if !r.status.Terminal() {
				return false
			}
		}
		return len(rs) == 4
	})
	want := []row{{1, "A", inbox.Succeeded, "", "", "vendor=1"}, {2, "B", inbox.Succeeded, "", "", ""},
		{3, "B", inbox.Skipped, "duplicate-of:2", "", ""}, {4, "C", inbox.Succeeded, "", "", ""}}
	got := rows(t, db, "s")
	for i, r := range got {
		tp := r.traceparent
		r.traceparent = ""
		if r != want[i] {
			t.Errorf("row %d: %+v, want %+v", i, r, want[i])
		}
		if tp == "" {
			t.Errorf("row %d has no trace context", r.id)
		}
	}
	proc.mu.Lock()
	if fmt.Sprint(proc.seen) != "[A B C]" {
		t.Errorf("processed %v, want A, B and C once each", proc.seen)
	}
	proc.mu.Unlock()
	testkit.Eventually(t, "the oversized message in the dead-letter queue", patience, func() bool {
		r, _ := dead.Load().(string)
		return strings.Contains(r, "exceeds the source's limit of 64")
	})

	// The trace: the producer's span → the ingest span → the processing span.
	sent := trace.SpanContextFromContext(pctx)
	var ingest, process sdktrace.ReadOnlySpan
	for _, s := range exp.GetSpans().Snapshots() {
		if s.SpanContext().TraceID() != sent.TraceID() {
			continue
		}
		switch s.Name() {
		case tracing.SpanIngest:
			ingest = s
		case tracing.SpanProcess:
			process = s
		}
	}
	if ingest == nil || ingest.Parent().SpanID() != sent.SpanID() {
		t.Fatalf("no ingest span continuing the producer's trace")
	}
	if process == nil || process.Parent().SpanID() != ingest.SpanContext().SpanID() {
		t.Fatalf("the processing span is not the ingest span's child")
	}
	if got[0].traceparent != fmt.Sprintf("00-%s-%s-01", sent.TraceID(), ingest.SpanContext().SpanID()) {
		t.Errorf("stored traceparent %s, want the ingest span's", got[0].traceparent)
	}
}

// startRabbit starts a port over the machine's RabbitMQ, stopped and with
// the topology of topic and group deleted when the test ends.
func startRabbit(ctx context.Context, t *testing.T, log *slog.Logger, topic, group string) *broker.Broker {
	t.Helper()
	t.Cleanup(func() { deleteTopology(t, topic, group) })
	b := broker.New("rmq", rabbitmq.New(rabbitmq.WithURL(amqpURL), rabbitmq.WithLogger(log)), broker.WithLogger(log))
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Stop(context.Background()) })
	return b
}

// deleteTopology removes the test's exchanges and queues from the shared
// RabbitMQ server.
func deleteTopology(t *testing.T, topic, group string) {
	conn, err := amqp.Dial(amqpURL)
	if err != nil {
		t.Logf("cleanup: %v", err)
		return
	}
	defer conn.Close()
	dlq := topic + ".dlq"
	for _, q := range []string{rabbitmq.QueueName(topic, group), rabbitmq.QueueName(topic, group) + "/retry", rabbitmq.QueueName(dlq, driver.DeadLetterGroup)} {
		if ch, err := conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(q, false, false, false)
			_ = ch.Close()
		}
	}
	for _, x := range []string{topic, dlq} {
		if ch, err := conn.Channel(); err == nil {
			_ = ch.ExchangeDelete(x, false, false)
			_ = ch.Close()
		}
	}
}

// On a stream with a mailbox, each delivery is stored in the mailbox first
// and enqueued under its mailbox id; a payload the text column cannot hold
// (not UTF-8) is dead-lettered, not retried for ever.
func TestThroughTheStreamsMailbox(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db := storetest.NewPostgres(t, store.WithMigrate(mailbox.Schema()))
	mb, err := mailbox.NewStore(db)
	if err != nil {
		t.Fatal(err)
	}
	// A row written by another sender first: the mailbox's ids are the ones used.
	if _, err := mb.Insert(ctx, []byte("earlier"), time.Now(), mailbox.Meta{}); err != nil {
		t.Fatal(err)
	}
	topic, group := storetest.UniqueName("bsrcmb"), "msgx"
	log := testkit.Quiet()
	b := startRabbit(ctx, t, log, topic, group)
	var nudges atomic.Int64
	src, err := brokersource.New(b, broker.Subscription{Topic: topic, Group: group}, db, "m",
		brokersource.WithMailbox(mb, func() { nudges.Add(1) }), brokersource.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	dead := listenDeadReasons(ctx, t, b, topic)
	runSource(ctx, t, src)
	sendOnceDeclared(ctx, t, b, topic, "one", "\xff\xfe not UTF-8", "two")
	testkit.Eventually(t, "two messages in the inbox", patience, func() bool { return len(rows(t, db, "m")) == 2 })
	got := rows(t, db, "m")
	mrows, err := mb.Scan(ctx, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(mrows) != 3 || got[0].id != mrows[1].ID || got[0].payload != "one" || got[1].id != mrows[2].ID || got[1].payload != "two" {
		t.Errorf("inbox %+v, mailbox %+v", got, mrows)
	}
	if nudges.Load() != 2 {
		t.Errorf("%d nudges, want one per stored message", nudges.Load())
	}
	testkit.Eventually(t, "the non-UTF-8 message in the dead-letter queue", patience, func() bool {
		r, _ := dead.Load().(string)
		return strings.Contains(r, "not UTF-8")
	})
}

// A row a broker source writes into the mailbox has the subsystem and
// sent-date columns a legacy sender's rows have, and a message the mailbox
// cannot store (a NUL byte, on PostgreSQL) is dead-lettered with the reason
// rather than retried for ever, while the next one is stored.
func TestMailboxColumnsAndUnstorableMessages(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db := storetest.NewPostgres(t, store.WithMigrate(mailbox.Schema()))
	mb, err := mailbox.NewStore(db)
	if err != nil {
		t.Fatal(err)
	}
	topic, group := storetest.UniqueName("bsrcmeta"), "msgx"
	log := testkit.Quiet()
	b := startRabbit(ctx, t, log, topic, group)
	src, err := brokersource.New(b, broker.Subscription{Topic: topic, Group: group}, db, "m",
		brokersource.WithMailbox(mb, nil), brokersource.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	dead := listenDeadReasons(ctx, t, b, topic)
	runSource(ctx, t, src)
	const sis = `<MSG><META><SNDR>AODB</SNDR><SEQN>77</SEQN><DTTM>20120229090511</DTTM><TYPE>FLOP</TYPE><STYP>ETA</STYP></META><FLOP/></MSG>`
	sendOnceDeclared(ctx, t, b, topic, "<MSG>a\x00b</MSG>", sis)
	testkit.Eventually(t, "the NUL message in the dead-letter queue", patience, func() bool {
		r, _ := dead.Load().(string)
		return strings.Contains(r, "NUL")
	})
	testkit.Eventually(t, "the SIS message in the inbox", patience, func() bool { return len(rows(t, db, "m")) == 1 })
	var name, typ, styp string
	var seq int64
	var sent time.Time
	err = db.QueryRow(ctx, "SELECT CMINMSGS_SUBSYSTEM_NAME, CMINMSGS_SUBSYSTEM_SEQUENCE, CMINMSGS_SUBSYSTEM_DATE_SENT, "+
		"CMINMSGS_SUBSYSTEM_TYPE, CMINMSGS_SUBSYSTEM_SUBTYPE FROM cminmsgs").Scan(&name, &seq, &sent, &typ, &styp)
	if err != nil {
		t.Fatalf("the subsystem columns: %v", err)
	}
	want := time.Date(2012, 2, 29, 9, 5, 11, 0, time.FixedZone("CST", 8*3600))
	if name != "AODB" || seq != 77 || !sent.Equal(want) || typ != "FLOP" || styp != "ETA" {
		t.Fatalf("columns %q %d %v %q %q", name, seq, sent, typ, styp)
	}
}

// listenDeadReasons consumes topic's dead-letter queue and keeps the reason
// of the latest dead letter.
func listenDeadReasons(ctx context.Context, t *testing.T, b *broker.Broker, topic string) *atomic.Value {
	t.Helper()
	var dead atomic.Value
	if _, err := b.Listen(ctx, broker.Subscription{Topic: topic + ".dlq", Group: driver.DeadLetterGroup}, func(_ context.Context, d *broker.Delivery) error {
		dead.Store(d.Header(broker.HeaderDeadReason))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return &dead
}

// runSource runs src until the test ends.
func runSource(ctx context.Context, t *testing.T, src *brokersource.Source) {
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- src.Run(sctx, nil) }()
	t.Cleanup(func() { stop(); <-done })
}

// sendOnceDeclared sends each payload to topic, retrying each for up to 30 s:
// the source's Run declares the topology, and until then a publish would go
// nowhere.
func sendOnceDeclared(ctx context.Context, t *testing.T, b *broker.Broker, topic string, payloads ...string) {
	t.Helper()
	for _, m := range payloads {
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := b.SendConfirmed(ctx, topic, &broker.Message{Payload: []byte(m)})
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
