package kafkabench_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/lab/bench/brokerbench"
	"github.com/msgx/msgx/lab/bench/brokerbench/kafkabench"
)

// TestBenchRuns runs the benchmark end to end on kfake (MSGX_BENCH_N raises N
// for profiling with -cpuprofile).
func TestBenchRuns(t *testing.T) {
	n := 2000
	if s := os.Getenv("MSGX_BENCH_N"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, cleanup, err := kafkabench.New(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	var out io.Writer = io.Discard
	if testing.Verbose() {
		out = os.Stdout
	}
	res, err := brokerbench.Run(ctx, a, brokerbench.Config{N: n}, out)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 4 {
		t.Fatalf("got %d results, want 4", len(res))
	}
	for _, r := range res {
		if r.N != n || r.PerSec() <= 0 {
			t.Errorf("result %s: n=%d per_sec=%.0f", r.Variant, r.N, r.PerSec())
		}
	}
}

// The benchmarks below split the port's cost from the driver's: the same
// work through the raw client, through the driver alone (Receive + Ack, no
// port), and through the port.

var quiet = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

type benchEnv struct {
	a       brokerbench.Adapter
	topic   string
	payload []byte
}

func newBenchEnv(b *testing.B, n int) *benchEnv {
	b.Helper()
	ctx := context.Background()
	a, cleanup, err := kafkabench.New(ctx, "")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cleanup)
	e := &benchEnv{a: a, topic: "b-" + strconv.FormatInt(time.Now().UnixNano(), 36), payload: make([]byte, 200)}
	if err := a.Setup(ctx, e.topic, "g"); err != nil {
		b.Fatal(err)
	}
	if n > 0 {
		drv, _ := a.NewDriver(ctx)
		if err := drv.Start(ctx); err != nil {
			b.Fatal(err)
		}
		defer drv.Close(ctx)
		for sent := 0; sent < n; sent += 100 {
			ms := make([]*driver.Message, 0, 100)
			for i := sent; i < min(sent+100, n); i++ {
				k := strconv.Itoa(i % 1000)
				ms = append(ms, &driver.Message{Key: k, Payload: e.payload, Headers: map[string]string{broker.HeaderPartitionKey: k}})
			}
			if err := drv.Publish(ctx, e.topic, ms); err != nil {
				b.Fatal(err)
			}
		}
	}
	return e
}

func BenchmarkConsumeRaw(b *testing.B) {
	e := newBenchEnv(b, b.N)
	raw, _ := e.a.NewRaw(context.Background())
	defer raw.Close()
	b.ResetTimer()
	if err := raw.Consume(context.Background(), e.topic, "g", b.N); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkConsumeDriver(b *testing.B) {
	e := newBenchEnv(b, b.N)
	ctx := context.Background()
	drv, _ := e.a.NewDriver(ctx)
	if err := drv.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer drv.Close(ctx)
	b.ResetTimer()
	sub, err := drv.Subscribe(ctx, driver.SubscriptionSpec{Topic: e.topic, Group: "g", DeadLetterTopic: e.topic + ".dlq", Prefetch: 200})
	if err != nil {
		b.Fatal(err)
	}
	for got := 0; got < b.N; {
		ds, err := sub.Receive(ctx, 1)
		if err != nil {
			b.Fatal(err)
		}
		for _, d := range ds {
			_ = d.Message()
			if err := d.Ack(ctx); err != nil {
				b.Fatal(err)
			}
		}
		got += len(ds)
	}
}

func BenchmarkConsumePort(b *testing.B) {
	e := newBenchEnv(b, b.N)
	ctx := context.Background()
	drv, _ := e.a.NewDriver(ctx)
	p := broker.New("kafka", drv, broker.WithLogger(quiet))
	if err := p.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer p.Stop(ctx)
	done := make(chan struct{})
	var got atomic.Int64
	b.ResetTimer()
	if _, err := p.Listen(ctx, broker.Subscription{Topic: e.topic, Group: "g", Prefetch: 200}, func(context.Context, *broker.Delivery) error {
		if got.Add(1) == int64(b.N) {
			close(done)
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	<-done
}

// benchPublish publishes b.N keyed messages in batches of 100; publish gets
// the keys of one batch.
func benchPublish(b *testing.B, publish func(ctx context.Context, keys []string) error) {
	b.Helper()
	ctx := context.Background()
	keys := make([]string, 0, 100)
	b.ResetTimer()
	for sent := 0; sent < b.N; sent += 100 {
		keys = keys[:0]
		for i := sent; i < min(sent+100, b.N); i++ {
			keys = append(keys, strconv.Itoa(i%1000))
		}
		if err := publish(ctx, keys); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPublishRaw(b *testing.B) {
	e := newBenchEnv(b, 0)
	raw, _ := e.a.NewRaw(context.Background())
	defer raw.Close()
	benchPublish(b, func(ctx context.Context, keys []string) error {
		return raw.Publish(ctx, e.topic, e.payload, len(keys), len(keys))
	})
}

func BenchmarkPublishDriver(b *testing.B) {
	e := newBenchEnv(b, 0)
	ctx := context.Background()
	drv, _ := e.a.NewDriver(ctx)
	if err := drv.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer drv.Close(ctx)
	benchPublish(b, func(ctx context.Context, keys []string) error {
		ms := make([]*driver.Message, len(keys))
		for i, k := range keys {
			ms[i] = &driver.Message{Key: k, Payload: e.payload}
		}
		return drv.Publish(ctx, e.topic, ms)
	})
}

func BenchmarkPublishPort(b *testing.B) {
	e := newBenchEnv(b, 0)
	ctx := context.Background()
	drv, _ := e.a.NewDriver(ctx)
	p := broker.New("kafka", drv, broker.WithLogger(quiet))
	if err := p.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer p.Stop(ctx)
	benchPublish(b, func(ctx context.Context, keys []string) error {
		ms := make([]*broker.Message, len(keys))
		for i, k := range keys {
			ms[i] = &broker.Message{Key: k, Payload: e.payload}
		}
		return p.SendConfirmed(ctx, e.topic, ms...)
	})
}
