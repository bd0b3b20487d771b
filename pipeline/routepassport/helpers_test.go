package routepassport

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/msgx/msgx/backoff"
	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/broker/kafka"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
)

// env is one test's Kafka cluster (kfake, in this process), topics with a
// unique suffix, and a raw client to produce and read them.
type env struct {
	t                           testing.TB
	kf                          *kfake.Cluster
	cl                          *kgo.Client
	input, dlq, routeIn, georef string
	group                       string
}

func newEnv(t testing.TB, partitions int32) *env {
	t.Helper()
	kf, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(time.Second))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(kf.Close)
	var b [4]byte
	_, _ = rand.Read(b[:])
	sfx := hex.EncodeToString(b[:])
	e := &env{t: t, kf: kf, input: InputTopic + "." + sfx, dlq: DeadLetterTopic + "." + sfx,
		routeIn: RouteInTopic + "." + sfx, georef: GeoreferenceTopic + "." + sfx, group: "route-test-" + sfx}
	e.cl, err = kgo.NewClient(kgo.SeedBrokers(kf.ListenAddrs()...), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.cl.Close)
	adm := kadm.NewClient(e.cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tp := range []string{e.input, e.dlq, e.routeIn, e.georef} {
		n := int32(1)
		if tp == e.input {
			n = partitions
		}
		resp, err := adm.CreateTopic(ctx, n, -1, nil, tp)
		if err == nil {
			err = resp.Err
		}
		if err != nil {
			t.Fatalf("create topic %s: %v", tp, err)
		}
	}
	return e
}

func (e *env) seeds() []string { return e.kf.ListenAddrs() }

// broker returns a started port over its own Kafka client.
func (e *env) broker(log *slog.Logger) *broker.Broker {
	e.t.Helper()
	b := newKafkaBroker(e.seeds(), log)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Start(ctx); err != nil {
		e.t.Fatalf("broker start: %v", err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = b.Stop(ctx)
	})
	return b
}

func newKafkaBroker(seeds []string, log *slog.Logger) *broker.Broker {
	// A short session so that a killed member's partitions move on in
	// seconds, not the default 45.
	drv := kafka.New(kafka.SeedBrokers(seeds...), kafka.WithLogger(log), kafka.WithCommitInterval(200*time.Millisecond),
		kafka.WithClientOptions(kgo.SessionTimeout(3*time.Second), kgo.HeartbeatInterval(300*time.Millisecond)))
	return broker.New("kafka", drv, broker.WithLogger(log))
}

func (e *env) options(reg prometheus.Registerer, log *slog.Logger) []Option {
	return []Option{
		WithTopics(e.input, e.dlq, e.routeIn, e.georef), WithGroup(e.group), WithLogger(log), WithRegisterer(reg),
		WithRetry(fastRetry), WithRelayOptions(outbox.WithPollInterval(10 * time.Millisecond)),
	}
}

// produce sends records to the input topic, keyed by routeId.
func (e *env) produce(records ...[]byte) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rs := make([]*kgo.Record, len(records))
	for i, r := range records {
		var head struct{ RouteID string }
		_ = json.Unmarshal(r, &head)
		rs[i] = &kgo.Record{Topic: e.input, Key: []byte(head.RouteID), Value: r}
	}
	if err := e.cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		e.t.Fatalf("produce: %v", err)
	}
}

// reader reads a topic from its start, accumulating what it has seen (one
// goroutine uses it).
type reader struct {
	cl   *kgo.Client
	recs []*kgo.Record
}

func (e *env) reader(topic string) *reader {
	e.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.seeds()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(cl.Close)
	return &reader{cl: cl}
}

// poll adds what one fetch (bounded by ctx) returns.
func (r *reader) poll(ctx context.Context) {
	r.cl.PollFetches(ctx).EachRecord(func(rec *kgo.Record) { r.recs = append(r.recs, rec) })
}

// waitFor polls until the reader holds at least n records or the timeout.
func (r *reader) waitFor(t testing.TB, n int, timeout time.Duration) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for len(r.recs) < n {
		if ctx.Err() != nil {
			t.Fatalf("waited %v for %d records, have %d", timeout, n, len(r.recs))
		}
		r.poll(ctx)
	}
	return slices.Clone(r.recs)
}

// drain reads whatever else arrives within d (to see duplicates).
func (r *reader) drain(d time.Duration) []*kgo.Record {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for ctx.Err() == nil {
		r.poll(ctx)
	}
	return slices.Clone(r.recs)
}

func header(r *kgo.Record, name string) string {
	for _, h := range r.Headers {
		if h.Key == name {
			return string(h.Value)
		}
	}
	return ""
}

func record(routeID, name, geometry string) []byte {
	return []byte(fmt.Sprintf(`{"routeId":%q,"routeNameFull":%q,"traceId":"tr-%s","correlationId":"co-%s","geometry":%s}`,
		routeID, name, routeID, routeID, geometry))
}

func line(i int) string {
	return fmt.Sprintf(`{"type":"LineString","coordinates":[[%d.5,55.8],[48.5,55.85]]}`, i)
}

// newPipeline builds a pipeline that is closed when the test ends.
func newPipeline(t testing.TB, db *store.DB, b *broker.Broker, opts ...Option) *Pipeline {
	t.Helper()
	p, err := New(db, b, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// startPipeline runs p until the test ends (or stop is called).
func startPipeline(t testing.TB, p *Pipeline) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(60 * time.Second):
				t.Errorf("Run did not return within 60 s of its context ending")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func counter(t testing.TB, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			for k, v := range labels {
				if label(m, k) != v {
					continue next
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

func countRows(t testing.TB, db *store.DB, query string) int {
	t.Helper()
	var n int
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.QueryRow(ctx, query).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// fastRetry keeps transient retries short in tests.
var fastRetry = backoff.Policy{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond}
