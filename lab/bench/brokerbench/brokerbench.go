// Package brokerbench measures the broker port against the raw client library
// of the same broker doing the same work: confirmed publishes in the same batch
// sizes, and consume with one acknowledgement per message.
package brokerbench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/lab/bench"
)

// Raw is the raw client side of one adapter's benchmark.
type Raw interface {
	// Publish sends n messages of the given payload to topic in batches of
	// batch, waiting for the broker's confirmation of each batch.
	Publish(ctx context.Context, topic string, payload []byte, n, batch int) error
	// Consume receives and acknowledges n messages from topic as group.
	Consume(ctx context.Context, topic, group string, n int) error
	Close() error
}

// Adapter provides both sides for one broker.
type Adapter struct {
	Name string
	// Setup prepares a topic and a consumer group on it before anything is
	// published (a Kafka topic, a RabbitMQ exchange and group queue, ...), if
	// the broker needs that; may be nil.
	Setup func(ctx context.Context, topic, group string) error
	// NewDriver returns an unstarted driver for the port side.
	NewDriver func(ctx context.Context) (driver.Broker, error)
	// NewRaw returns the raw client side.
	NewRaw func(ctx context.Context) (Raw, error)
}

// Config is the workload shape.
type Config struct {
	N           int // messages per variant (default 20 000)
	Size        int // payload bytes (default 200)
	Batch       int // messages per confirmed publish (default 100)
	Concurrency int // port handlers (default 1, like the raw consumer)
	Rounds      int // alternating raw/port rounds; the median is reported (default 5)
}

// Run measures publish and consume through the port and through the raw
// client. It alternates the two sides for cfg.Rounds rounds on fresh topics,
// so that drift on a shared machine hits both alike, and prints one RESULT
// line per variant with the median round, then the ratios of the medians.
func Run(ctx context.Context, a Adapter, cfg Config, out io.Writer) ([]bench.Result, error) {
	if cfg.N <= 0 {
		cfg.N = 20000
	}
	if cfg.Size <= 0 {
		cfg.Size = 200
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 100
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 1
	}
	if cfg.Rounds <= 0 {
		cfg.Rounds = 5
	}
	payload := make([]byte, cfg.Size)
	for i := range payload {
		payload[i] = byte('a' + i%26)
	}
	variants := []string{"raw-publish", "raw-consume", "port-publish", "port-consume"}
	rounds := map[string][]time.Duration{}
	for round := range cfg.Rounds {
		times, err := runRound(ctx, a, cfg, payload, round)
		if err != nil {
			return nil, fmt.Errorf("round %d: %w", round+1, err)
		}
		for i, v := range variants {
			rounds[v] = append(rounds[v], times[i])
		}
	}
	results := make([]bench.Result, len(variants))
	for i, v := range variants {
		ds := rounds[v]
		results[i] = bench.Result{Workload: "broker", Variant: v, N: cfg.N, Elapsed: bench.Percentile(ds, 0.5),
			Extra: [][2]string{{"adapter", a.Name}, {"rounds", strconv.Itoa(cfg.Rounds)}, {"batch", strconv.Itoa(cfg.Batch)}, {"size", strconv.Itoa(cfg.Size)}}}
		results[i].Print(out)
	}
	fmt.Fprintf(out, "RATIO adapter=%s publish_port_over_raw=%s consume_port_over_raw=%s\n", a.Name,
		bench.Ratio(results[2], results[0]), bench.Ratio(results[3], results[1]))
	return results, nil
}

// runRound measures the four variants once and returns their durations in
// the order raw publish, raw consume, port publish, port consume.
func runRound(ctx context.Context, a Adapter, cfg Config, payload []byte, round int) ([4]time.Duration, error) {
	var times [4]time.Duration
	stamp := strconv.FormatInt(time.Now().UnixNano(), 36) + "-" + strconv.Itoa(round)
	rawTopic, portTopic := "bench-raw-"+stamp, "bench-port-"+stamp
	if a.Setup != nil {
		for _, tp := range []string{rawTopic, portTopic, portTopic + ".dlq"} {
			if err := a.Setup(ctx, tp, "bench"); err != nil {
				return times, fmt.Errorf("setup %s: %w", tp, err)
			}
		}
	}

	raw, err := a.NewRaw(ctx)
	if err != nil {
		return times, fmt.Errorf("raw client: %w", err)
	}
	defer raw.Close()
	start := time.Now()
	if err := raw.Publish(ctx, rawTopic, payload, cfg.N, cfg.Batch); err != nil {
		return times, fmt.Errorf("raw publish: %w", err)
	}
	times[0] = time.Since(start)
	start = time.Now()
	if err := raw.Consume(ctx, rawTopic, "bench", cfg.N); err != nil {
		return times, fmt.Errorf("raw consume: %w", err)
	}
	times[1] = time.Since(start)

	drv, err := a.NewDriver(ctx)
	if err != nil {
		return times, fmt.Errorf("driver: %w", err)
	}
	b := broker.New(a.Name, drv, broker.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err := b.Start(ctx); err != nil {
		return times, err
	}
	defer b.Stop(context.WithoutCancel(ctx))
	msgs := make([]*broker.Message, cfg.Batch)
	start = time.Now()
	for sent := 0; sent < cfg.N; sent += cfg.Batch {
		k := min(cfg.Batch, cfg.N-sent)
		for i := 0; i < k; i++ {
			msgs[i] = &broker.Message{Key: strconv.Itoa((sent + i) % 1000), Payload: payload}
		}
		if err := b.SendConfirmed(ctx, portTopic, msgs[:k]...); err != nil {
			return times, fmt.Errorf("port publish: %w", err)
		}
	}
	times[2] = time.Since(start)
	var got atomic.Int64
	done := make(chan struct{})
	sub := broker.Subscription{Topic: portTopic, Group: "bench", Concurrency: cfg.Concurrency, Prefetch: 2 * cfg.Batch}
	start = time.Now()
	l, err := b.Listen(ctx, sub, func(context.Context, *broker.Delivery) error {
		if got.Add(1) == int64(cfg.N) {
			close(done)
		}
		return nil
	})
	if err != nil {
		return times, fmt.Errorf("port listen: %w", err)
	}
	select {
	case <-done:
	case <-ctx.Done():
		return times, fmt.Errorf("port consume: %d of %d: %w", got.Load(), cfg.N, ctx.Err())
	}
	times[3] = time.Since(start)
	_ = l.Stop(ctx)
	return times, nil
}
