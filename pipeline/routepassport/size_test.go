package routepassport

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/broker/kafka"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// startedBroker starts a port over drv and stops it when the test ends.
func startedBroker(t *testing.T, drv driver.Broker) *broker.Broker {
	t.Helper()
	b := broker.New("kafka", drv, broker.WithLogger(testkit.Quiet()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = b.Stop(ctx)
	})
	return b
}

func testDriver(e *env) *kafka.Driver {
	return kafka.New(kafka.SeedBrokers(e.seeds()...), kafka.WithLogger(testkit.Quiet()), kafka.WithCommitInterval(200*time.Millisecond))
}

// padded returns a record of exactly n bytes: routeId id, a properties
// member padded to size with random hex, and routeNameFull a number when bad (a schema
// error).
func padded(t *testing.T, id string, n int, bad bool) []byte {
	t.Helper()
	name := `"n"`
	if bad {
		name = `5`
	}
	head := fmt.Sprintf(`{"routeId":%q,"routeNameFull":%s,"geometry":%s,"properties":{"pad":"`, id, name, line(1))
	tail := `"}}`
	pad := n - len(head) - len(tail)
	if pad < 0 {
		t.Fatalf("record of %d bytes cannot hold its members", n)
	}
	// Random hex: the producer's compression must not shrink the record
	// under a topic's limit.
	b := make([]byte, (pad+1)/2)
	_, _ = rand.Read(b)
	return []byte(head + hex.EncodeToString(b)[:pad] + tail)
}

// produceLarge produces records (key routeId) with a client whose producer
// takes them.
func (e *env) produceLarge(records ...[]byte) {
	e.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.seeds()...), kgo.ProducerBatchMaxBytes(4<<20))
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, r := range records {
		id := r[len(`{"routeId":"`):]
		id = id[:bytes.IndexByte(id, '"')]
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: e.input, Key: id, Value: r}).FirstErr(); err != nil {
			e.t.Fatalf("produce: %v", err)
		}
	}
}

// committed is the group's committed offset of partition 0 of the input.
func (e *env) committed(ctx context.Context) int64 {
	e.t.Helper()
	offs, err := kadm.NewClient(e.cl).FetchOffsets(ctx, e.group)
	if err != nil {
		e.t.Fatal(err)
	}
	o, _ := offs.Lookup(e.input, 0)
	return o.At
}

// waitCommitted waits until the group committed at least off.
func (e *env) waitCommitted(off int64, timeout time.Duration) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for e.committed(ctx) < off {
		select {
		case <-ctx.Done():
			e.t.Fatalf("the group's offset stayed at %d, want %d", e.committed(context.Background()), off)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// A refused record whose dead-letter copy is too large for the dead-letter
// topic (its max.message.bytes is franz-go's old default, below the
// producer's limit) goes there by reference: without its payload, with its
// size, SHA-256 and source position. The offset is committed and the next
// record processed: the consumer does not stall, also across a restart.
func TestOversizedDeadLetterGoesByReference(t *testing.T) {
	e := newEnv(t, 1)
	smallDLQ := e.dlq + ".small"
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	resp, err := kadm.NewClient(e.cl).CreateTopic(ctx, 1, -1, map[string]*string{"max.message.bytes": kadm.StringPtr("1000012")}, smallDLQ)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatal(err)
	}
	db := storetest.NewPostgres(t, store.WithMigrate(Schema()))
	opts := func() []Option {
		return append(e.options(prometheus.NewRegistry(), testkit.Quiet()), WithTopics(e.input, smallDLQ, e.routeIn, e.georef),
			WithMaxRecordBytes(1_020_000))
	}
	dlq, in := e.reader(smallDLQ), e.reader(e.routeIn)
	bad := [][]byte{padded(t, "BIG-1", 1_010_100, true), padded(t, "BIG-2", 1_010_100, true)}

	check := func(n int) {
		t.Helper()
		recs := dlq.waitFor(t, n, 90*time.Second)
		r := recs[n-1]
		sum := sha256.Sum256(bad[n-1])
		want := map[string]string{
			HeaderErrorClass: ClassSchema, HeaderErrorPath: "routeNameFull",
			broker.HeaderDeadPayloadSize: "1010100", broker.HeaderDeadPayloadSHA256: hex.EncodeToString(sum[:]),
			HeaderSourceTopic: e.input, HeaderSourcePart: "0", HeaderSourceOffset: strconv.Itoa(2 * (n - 1)),
			broker.HeaderDeadTopic: e.input, broker.HeaderDeadPartition: "0", broker.HeaderDeadOffset: strconv.Itoa(2 * (n - 1)),
		}
		for k, v := range want {
			if got := header(r, k); got != v {
				t.Errorf("dead letter %d: %s = %q, want %q", n, k, got, v)
			}
		}
		if len(r.Value) != 0 || header(r, broker.HeaderDeadPayloadOmitted) == "" {
			t.Errorf("dead letter %d: %d bytes of payload, omitted %q: not by reference", n, len(r.Value), header(r, broker.HeaderDeadPayloadOmitted))
		}
		in.waitFor(t, n, 60*time.Second)
		e.waitCommitted(int64(2*n), 60*time.Second)
	}

	stop := startPipeline(t, newPipeline(t, db, startedBroker(t, testDriver(e)), opts()...))
	e.produceLarge(bad[0], record("OK-1", "ok", line(1)))
	check(1)
	stop()

	// A new instance (new client, same group) goes on from the committed
	// offset: the next oversized record passes the same way.
	startPipeline(t, newPipeline(t, db, startedBroker(t, testDriver(e)), opts()...))
	e.produceLarge(bad[1], record("OK-2", "ok", line(2)))
	check(2)
	if recs := dlq.drain(300 * time.Millisecond); len(recs) != 2 {
		t.Fatalf("%d dead letters, want 2 (the first one again after the restart?)", len(recs))
	}
}

// A valid record whose georeference event would exceed the broker's limit
// is refused at ingest (class size, with the event's size), nothing of it is
// stored, it goes to the dead-letter topic and the offset is committed; the
// records around it are stored.
func TestOversizedEventIsRefusedAtIngest(t *testing.T) {
	e := newEnv(t, 1)
	db := storetest.NewPostgres(t, store.WithMigrate(Schema()))
	reg := prometheus.NewRegistry()
	startPipeline(t, newPipeline(t, db, e.broker(testkit.Quiet()), e.options(reg, testkit.Quiet())...))
	// A LineString of about 537 kB: its georeference event (WKT and
	// GeoJSON) is over a million bytes.
	var sb strings.Builder
	sb.WriteString(`{"type":"LineString","coordinates":[`)
	for i := range 22_370 {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, "[49.%06d1,55.%06d1]", i, i)
	}
	sb.WriteString(`]}`)
	big := record("GEO-BIG", "big", sb.String())
	if len(big) < 530_000 || len(big) > 560_000 {
		t.Fatalf("record of %d bytes", len(big))
	}
	e.produce(record("GEO-1", "a", line(1)), big, record("GEO-2", "b", line(2)))

	r := e.reader(e.dlq).waitFor(t, 1, 90*time.Second)[0]
	if header(r, HeaderErrorClass) != ClassSize || header(r, HeaderSourceOffset) != "1" || !bytes.Equal(r.Value, big) {
		t.Fatalf("dead letter: class %q, offset %q, %d bytes", header(r, HeaderErrorClass), header(r, HeaderSourceOffset), len(r.Value))
	}
	msg := header(r, HeaderErrorMessage)
	if !strings.Contains(msg, e.georef) || !strings.Contains(msg, "would be 1") {
		t.Fatalf("reason %q: no event topic or size", msg)
	}
	e.reader(e.georef).waitFor(t, 2, 60*time.Second)
	e.waitCommitted(3, 60*time.Second)
	if n := countRows(t, db, `SELECT count(*) FROM route_passports WHERE route_id = 'GEO-BIG'`); n != 0 {
		t.Fatalf("the refused record was stored (%d rows)", n)
	}
	if n := countRows(t, db, `SELECT count(*) FROM route_passport_sources`); n != 2 {
		t.Fatalf("%d records ingested, want 2", n)
	}
	if n := countRows(t, db, `SELECT count(*) FROM msgx_outbox WHERE partition_key = 'GEO-BIG'`) + countRows(t, db, `SELECT count(*) FROM msgx_outbox_sent WHERE partition_key = 'GEO-BIG'`); n != 0 {
		t.Fatalf("%d events of the refused record stored", n)
	}
	if v := counter(t, reg, "route_passport_ingest_failure_total", map[string]string{"class": ClassSize}); v != 1 {
		t.Fatalf("size failures counted: %v, want 1", v)
	}
}

// The dead-letter topic unreachable (every produce to it closes the
// connection): the refused record waits, neither dropped nor acknowledged; a
// stop during the wait returns at once, not after the stop timeout; after
// the outage a new instance dead-letters it and goes on.
func TestDeadLetterOutageWaitsAndStopsPromptly(t *testing.T) {
	e := newEnv(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	topics, err := kadm.NewClient(e.cl).ListTopics(ctx, e.dlq)
	if err != nil {
		t.Fatal(err)
	}
	dlqID := topics[e.dlq].ID
	var down atomic.Bool
	e.kf.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		e.kf.KeepControl()
		if !down.Load() {
			return nil, nil, false
		}
		for _, tp := range req.(*kmsg.ProduceRequest).Topics {
			if tp.Topic == e.dlq || tp.TopicID == dlqID {
				return nil, errors.New("dead-letter topic down"), true
			}
		}
		return nil, nil, false
	})
	db := storetest.NewPostgres(t, store.WithMigrate(Schema()))
	reg := prometheus.NewRegistry()
	opts := append(e.options(reg, testkit.Quiet()), WithStopTimeout(2*time.Minute), WithDBTimeout(time.Second))
	b := broker.New("kafka", testDriver(e), broker.WithLogger(testkit.Quiet()))
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	p := newPipeline(t, db, b, opts...)
	runCtx, stopRun := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(runCtx) }()
	t.Cleanup(stopRun)
	in := e.reader(e.routeIn)
	e.produce(record("OUT-1", "a", line(1)))
	in.waitFor(t, 1, 60*time.Second)

	down.Store(true)
	e.produce(record("OUT-2", "bad", `{"type":"Point"}`), record("OUT-3", "c", line(3)))
	deadline := time.After(30 * time.Second)
	for counter(t, reg, "route_passport_ingest_failure_total", map[string]string{"class": "transient"}) < 2 {
		select {
		case <-deadline:
			t.Fatal("no failed dead-letter send counted during the outage")
		case <-time.After(20 * time.Millisecond):
		}
	}
	// A quiet second: nothing dead-lettered, counted as refused, or
	// acknowledged past the waiting record.
	dlq := e.reader(e.dlq)
	if recs := dlq.drain(time.Second); len(recs) != 0 {
		t.Fatalf("%d dead letters during the outage", len(recs))
	}
	if v := counter(t, reg, "route_passport_ingest_failure_total", map[string]string{"class": ClassGeometry}); v != 0 {
		t.Fatalf("the record counted as dead-lettered during the outage: %v", v)
	}
	if c := e.committed(ctx); c > 1 {
		t.Fatalf("offset committed to %d during the outage", c)
	}

	start := time.Now()
	stopRun()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return within 20 s of a stop during the dead-letter wait (stop timeout 2 min)")
	}
	t.Logf("stopped in %v", time.Since(start))
	sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer scancel()
	_ = b.Stop(sctx)

	down.Store(false)
	startPipeline(t, newPipeline(t, db, e.broker(testkit.Quiet()), e.options(prometheus.NewRegistry(), testkit.Quiet())...))
	r := dlq.waitFor(t, 1, 90*time.Second)[0]
	if header(r, HeaderSourceOffset) != "1" || header(r, HeaderErrorClass) != ClassGeometry {
		t.Fatalf("dead letter of offset %q, class %q", header(r, HeaderSourceOffset), header(r, HeaderErrorClass))
	}
	in.waitFor(t, 2, 60*time.Second)
	e.waitCommitted(3, 60*time.Second)
}

// The input limit must leave the dead-letter headers' room under the
// broker's message limit: New refuses it otherwise, naming both.
func TestRecordLimitMustFitTheBrokerLimit(t *testing.T) {
	b := broker.New("kafka", kafka.New(kafka.WithMaxMessageBytes(1_000_012)))
	_, err := New(nil, b, WithMaxRecordBytes(DefaultMaxRecordBytes))
	if err == nil || !strings.Contains(err.Error(), "1000000") || !strings.Contains(err.Error(), "max-message-bytes") || !strings.Contains(err.Error(), "1000012") {
		t.Fatalf("New with a record limit over the broker's: %v", err)
	}
	b = broker.New("kafka", kafka.New())
	if _, err := New(nil, b); err == nil || strings.Contains(err.Error(), "max-message-bytes") {
		t.Fatalf("the defaults are refused: %v", err)
	}
	opts, err := OptionsFromSettings(map[string]string{"max-record-bytes": "2000000"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(nil, b, opts...); err == nil || !strings.Contains(err.Error(), "2000000") {
		t.Fatalf("max-record-bytes 2000000 under the default limit: %v", err)
	}
	if _, err := OptionsFromSettings(map[string]string{"max-record-bytes": "0"}); err == nil {
		t.Fatal("max-record-bytes 0 accepted")
	}
}
