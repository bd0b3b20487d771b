package routepassport

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/msgx/msgx/backoff"
	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/broker/kafka"
	"github.com/msgx/msgx/broker/mem"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

func records(prefix string, from, n int) [][]byte {
	out := make([][]byte, n)
	for i := range n {
		id := from + i
		out[i] = record(fmt.Sprintf("%s-%d", prefix, id%50), fmt.Sprintf("route %d", id), line(id))
	}
	return out
}

// checkOnePairEach asserts that every record (routeId + source offset) got
// exactly one event id on each output topic, and that there are want records.
// Copies of one event (same id, at-least-once relay) are allowed and counted.
func checkOnePairEach(t *testing.T, want int, topics map[string][]*kgo.Record) {
	t.Helper()
	for topic, recs := range topics {
		byRecord := map[string]map[string]int{}
		copies := 0
		for _, r := range recs {
			var ev RouteInEvent
			if err := json.Unmarshal(r.Value, &ev); err != nil {
				t.Fatal(err)
			}
			k := fmt.Sprintf("%s@%d/%d", ev.RouteID, *ev.Source.Partition, *ev.Source.Offset)
			if byRecord[k] == nil {
				byRecord[k] = map[string]int{}
			}
			id := header(r, "msgx-event-id")
			if byRecord[k][id] > 0 {
				copies++
			}
			byRecord[k][id]++
		}
		if len(byRecord) != want {
			t.Errorf("%s: events for %d records, want %d", topic, len(byRecord), want)
		}
		for k, ids := range byRecord {
			if len(ids) != 1 {
				t.Errorf("%s: record %s has %d event ids: a second pair", topic, k, len(ids))
			}
		}
		t.Logf("%s: %d records, %d events, %d re-sent copies", topic, len(byRecord), len(recs), copies)
	}
}

// A record delivered again — here every record, read a second time by
// another group over the same database — creates no second pair of events.
func TestRedeliveryCreatesNoSecondPair(t *testing.T) {
	e := newEnv(t, 2)
	db := storetest.NewPostgres(t, store.WithMigrate(Schema()))
	regA := prometheus.NewRegistry()
	a := newPipeline(t, db, e.broker(testkit.Quiet()), e.options(regA, testkit.Quiet())...)
	stopA := startPipeline(t, a)
	in := e.reader(e.routeIn)
	const n = 120
	e.produce(records("R", 0, n)...)
	in.waitFor(t, n, 60*time.Second)
	stopA()

	regB := prometheus.NewRegistry()
	opts := append(e.options(regB, testkit.Quiet()), WithGroup(e.group+"-again"))
	b := newPipeline(t, db, e.broker(testkit.Quiet()), opts...)
	startPipeline(t, b)
	deadline := time.Now().Add(60 * time.Second)
	for counter(t, regB, "route_passport_ingest_duplicate_total", nil) < n {
		if time.Now().After(deadline) {
			t.Fatalf("second group saw %v of %d records as duplicates", counter(t, regB, "route_passport_ingest_duplicate_total", nil), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if v := counter(t, regB, "route_passport_ingest_success_total", nil); v != 0 {
		t.Fatalf("redelivered records ingested again: %v", v)
	}
	if c := countRows(t, db, `SELECT count(*) FROM msgx_outbox`) + countRows(t, db, `SELECT count(*) FROM msgx_outbox_sent`); c != 2*n {
		t.Fatalf("%d outbox events, want %d", c, 2*n)
	}
	checkOnePairEach(t, n, map[string][]*kgo.Record{e.routeIn: in.drain(300 * time.Millisecond)})
}

// The database unreachable mid-stream (every connection cut, new ones
// refused): ingestion retries with backoff and commits no offset meanwhile;
// once it is back, every record comes out once.
func TestDatabaseCutLosesNothing(t *testing.T) {
	e := newEnv(t, 3)
	db, proxy := cutDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reg := prometheus.NewRegistry()
	p := newPipeline(t, db, e.broker(testkit.Quiet()), append(e.options(reg, testkit.Quiet()), WithDBTimeout(2*time.Second),
		// A relay that loses the database after a send keeps its claim
		// until the lease ends, then the event is sent again (same id).
		WithRelayOptions(outbox.WithLease(4*time.Second), outbox.WithPublishTimeout(time.Second), outbox.WithDBTimeout(time.Second)))...)
	startPipeline(t, p)
	in, geo := e.reader(e.routeIn), e.reader(e.georef)

	e.produce(records("C", 0, 100)...)
	in.waitFor(t, 100, 60*time.Second)

	proxy.Cut()
	e.produce(records("C", 100, 100)...)
	deadline := time.Now().Add(30 * time.Second)
	for counter(t, reg, "route_passport_ingest_failure_total", map[string]string{"class": "transient"}) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no transient failure counted while the database was cut")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// While the database is away the records are not acknowledged: the
	// group's committed offsets stay behind what was produced.
	adm := kadm.NewClient(e.cl)
	committed := func() int64 {
		offs, err := adm.FetchOffsets(ctx, e.group)
		if err != nil {
			t.Fatal(err)
		}
		var sum int64
		offs.Each(func(o kadm.OffsetResponse) { sum += o.At })
		return sum
	}
	if c := committed(); c >= 200 {
		t.Fatalf("offsets committed up to %d of 200 while the database was cut", c)
	}
	proxy.Restore()

	in.waitFor(t, 200, 90*time.Second)
	geo.waitFor(t, 200, 90*time.Second)
	checkOnePairEach(t, 200, map[string][]*kgo.Record{e.routeIn: in.drain(300 * time.Millisecond), e.georef: geo.drain(100 * time.Millisecond)})
	if n := countRows(t, db, `SELECT count(*) FROM route_passport_sources`); n != 200 {
		t.Fatalf("%d records ingested, want 200", n)
	}
}

// Two instances in one consumer group share the partitions: both ingest
// records, and every record comes out once.
func TestTwoInstancesShareTheWork(t *testing.T) {
	e := newEnv(t, 4)
	db := storetest.NewPostgres(t, store.WithMigrate(Schema()))
	regs := []*prometheus.Registry{prometheus.NewRegistry(), prometheus.NewRegistry()}
	for _, reg := range regs {
		p := newPipeline(t, db, e.broker(testkit.Quiet()), e.options(reg, testkit.Quiet())...)
		startPipeline(t, p)
	}
	in, geo := e.reader(e.routeIn), e.reader(e.georef)
	sent := 0
	both := func() bool {
		return counter(t, regs[0], "route_passport_ingest_success_total", nil) > 0 &&
			counter(t, regs[1], "route_passport_ingest_success_total", nil) > 0
	}
	// Waves until both instances own partitions (the second joins while
	// the first may already hold them all), at most 40.
	for wave := 0; wave < 40 && !both(); wave++ {
		e.produce(records("T", sent, 50)...)
		sent += 50
		in.waitFor(t, sent, 60*time.Second)
	}
	if !both() {
		t.Fatalf("one instance did all the work: %v and %v", counter(t, regs[0], "route_passport_ingest_success_total", nil),
			counter(t, regs[1], "route_passport_ingest_success_total", nil))
	}
	e.produce(records("T", sent, 100)...)
	sent += 100
	in.waitFor(t, sent, 60*time.Second)
	geo.waitFor(t, sent, 60*time.Second)
	total := counter(t, regs[0], "route_passport_ingest_success_total", nil) + counter(t, regs[1], "route_passport_ingest_success_total", nil)
	if int(total) != sent {
		t.Fatalf("ingested %v, produced %d", total, sent)
	}
	t.Logf("instance 1 ingested %v, instance 2 %v", counter(t, regs[0], "route_passport_ingest_success_total", nil), counter(t, regs[1], "route_passport_ingest_success_total", nil))
	checkOnePairEach(t, sent, map[string][]*kgo.Record{e.routeIn: in.drain(300 * time.Millisecond), e.georef: geo.drain(100 * time.Millisecond)})
}

// One record per handler (brokers without batches, or WithBatchSize(1)),
// four at once: the same outcome.
func TestSingleRecordHandlers(t *testing.T) {
	e := newEnv(t, 3)
	db := storetest.NewPostgres(t, store.WithMigrate(Schema()))
	p := newPipeline(t, db, e.broker(testkit.Quiet()), append(e.options(prometheus.NewRegistry(), testkit.Quiet()), WithBatchSize(1), WithConcurrency(4))...)
	startPipeline(t, p)
	in := e.reader(e.routeIn)
	e.produce(records("S", 0, 60)...)
	in.waitFor(t, 60, 60*time.Second)
	checkOnePairEach(t, 60, map[string][]*kgo.Record{e.routeIn: in.drain(300 * time.Millisecond)})
}

// On a broker without log positions (here the in-process one) a record's
// content is its identity: the same record sent twice is stored once.
func TestContentIdentityWithoutPositions(t *testing.T) {
	db := storetest.NewPostgres(t, store.WithMigrate(Schema()))
	srv := mem.NewServer()
	t.Cleanup(srv.Close)
	b := broker.New("mem", mem.New(srv), broker.WithLogger(testkit.Quiet()))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Stop(context.Background()) })
	reg := prometheus.NewRegistry()
	p := newPipeline(t, db, b, WithRegisterer(reg), WithLogger(testkit.Quiet()), WithRelay(false), WithRetry(fastRetry))
	startPipeline(t, p)
	same := record("M-1", "n", line(1))
	for _, r := range [][]byte{same, same, record("M-2", "n", line(2))} {
		if err := b.SendConfirmed(ctx, InputTopic, &broker.Message{Key: "k", Payload: r}); err != nil {
			t.Fatal(err)
		}
	}
	for counter(t, reg, "route_passport_ingest_success_total", nil)+counter(t, reg, "route_passport_ingest_duplicate_total", nil) < 3 {
		if ctx.Err() != nil {
			t.Fatal("records not processed within a minute")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if s, d := counter(t, reg, "route_passport_ingest_success_total", nil), counter(t, reg, "route_passport_ingest_duplicate_total", nil); s != 2 || d != 1 {
		t.Fatalf("ingested %v, duplicates %v; want 2 and 1", s, d)
	}
	if n := countRows(t, db, `SELECT count(*) FROM msgx_outbox`); n != 4 {
		t.Fatalf("%d outbox events, want 4", n)
	}
	if n := countRows(t, db, `SELECT count(*) FROM route_passports WHERE source_partition IS NULL AND source_id LIKE 'sha256:%'`); n != 2 {
		t.Fatalf("%d passports with a content identity, want 2", n)
	}
}

// Identities older than the retention are deleted; newer ones stay.
func TestExpiredSourcesAreDeleted(t *testing.T) {
	e := newEnv(t, 1)
	db := storetest.NewPostgres(t, store.WithMigrate(Schema()))
	p := newPipeline(t, db, e.broker(testkit.Quiet()), WithSourceRetention(time.Hour))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.Exec(ctx, `INSERT INTO route_passport_sources (source_id, route_id, processed_at)
		VALUES ('old', 'R', now() - interval '2 hours'), ('new', 'R', now() - interval '30 minutes')`); err != nil {
		t.Fatal(err)
	}
	n, err := p.deleteExpiredSources(ctx)
	if err != nil || n != 1 {
		t.Fatalf("deleted %d: %v", n, err)
	}
	if c := countRows(t, db, `SELECT count(*) FROM route_passport_sources WHERE source_id = 'new'`); c != 1 {
		t.Fatal("the newer identity was deleted")
	}
}

// An output topic that does not exist: the broker rejects the relay's sends,
// so the events are kept as FAILED (DEAD) at once, charged no retry (sending
// again would fail the same way), and counted; the other topic is not held
// up; replayed once the topic exists, they are delivered.
func TestOutputFailuresAreKeptAndReplayable(t *testing.T) {
	e := newEnv(t, 1)
	missing := e.georef + ".missing"
	db := storetest.NewPostgres(t, store.WithMigrate(Schema()))
	reg := prometheus.NewRegistry()
	drv := kafka.New(kafka.SeedBrokers(e.seeds()...), kafka.WithLogger(testkit.Quiet()), kafka.WithUnknownTopicRetries(0))
	b := broker.New("kafka", drv, broker.WithLogger(testkit.Quiet()))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Stop(context.Background()) })
	p := newPipeline(t, db, b, append(e.options(reg, testkit.Quiet()), WithTopics(e.input, e.dlq, e.routeIn, missing),
		WithRelayOptions(outbox.WithRetry(backoff.Policy{MaxAttempts: 2, Initial: 10 * time.Millisecond}),
			outbox.WithPublishTimeout(2*time.Second), outbox.WithDBTimeout(2*time.Second), outbox.WithLease(10*time.Second)))...)
	startPipeline(t, p)
	const n = 5
	e.produce(records("F", 0, n)...)
	e.reader(e.routeIn).waitFor(t, n, 60*time.Second)
	for counter(t, reg, "route_passport_outbox_failed_total", map[string]string{"topic": missing}) < n {
		if ctx.Err() != nil {
			t.Fatalf("failed events: %v of %d", counter(t, reg, "route_passport_outbox_failed_total", nil), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if v := counter(t, reg, "route_passport_outbox_retry_total", map[string]string{"topic": missing}); v != 0 {
		t.Fatalf("%v retries of events the broker rejects, want none", v)
	}
	if c := countRows(t, db, `SELECT count(*) FROM msgx_outbox WHERE status = 'DEAD' AND target = '`+GeoreferenceTarget+`'`); c != n {
		t.Fatalf("%d dead events kept, want %d", c, n)
	}
	if _, err := kadm.NewClient(e.cl).CreateTopic(ctx, 1, -1, nil, missing); err != nil {
		t.Fatal(err)
	}
	// The broker's client learns of the new topic at its next metadata
	// refresh; until then a send fails at once (no unknown-topic retries
	// here), and the replayed events, with two attempts each, would go DEAD
	// again. The replay follows a send that went through.
	for {
		err := b.SendConfirmed(ctx, missing, &broker.Message{Key: "probe", Payload: []byte("probe")})
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the new topic never took a send: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := outbox.Replay(ctx, db, time.Now(), outbox.ReplayRequest{Target: GeoreferenceTarget, Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	e.reader(missing).waitFor(t, n+1, 60*time.Second)
}

// Run may run again after it returned, never twice at once.
func TestRunAgain(t *testing.T) {
	e := newEnv(t, 1)
	p := newPipeline(t, storetest.NewPostgres(t, store.WithMigrate(Schema())), e.broker(testkit.Quiet()), e.options(prometheus.NewRegistry(), testkit.Quiet())...)
	stop := startPipeline(t, p)
	in := e.reader(e.routeIn)
	e.produce(records("A", 0, 1)...)
	in.waitFor(t, 1, 60*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Run(ctx); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Fatalf("a second Run at once: %v", err)
	}
	stop()
	startPipeline(t, p)
	e.produce(records("A", 1, 1)...)
	in.waitFor(t, 2, 60*time.Second)
}
