package broker

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/msgx/msgx/backoff"
	"github.com/msgx/msgx/broker/mem"
	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/internal/testkit"
)

func TestDecide(t *testing.T) {
	live := context.Background()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	begun := make(chan struct{})
	close(begun)
	stopping := context.WithValue(live, stoppingKey{}, (<-chan struct{})(begun))
	errX := errors.New("x")
	cases := []struct {
		name string
		ctx  context.Context
		err  error
		want Disposition
	}{
		{"success", live, nil, Ack},
		{"success after cancel is still a completion", cancelled, nil, Ack},
		{"ordinary error", live, errX, Requeue},
		{"poison", live, Poison(errX), DeadLetter},
		{"wrapped poison", live, fmt.Errorf("decode: %w", Poison(errX)), DeadLetter},
		{"cancellation while the listener runs is an ordinary failure", live, context.Canceled, Requeue},
		{"wrapped cancellation while the listener runs", live, fmt.Errorf("db: %w", context.Canceled), Requeue},
		{"cancelled by the listener", cancelled, context.Canceled, NoSettlement},
		{"error from a cancelled handler", cancelled, errX, NoSettlement},
		{"poison and cancellation by the listener", cancelled, errors.Join(Poison(errX), context.Canceled), Conflict},
		{"poison and a cancellation of its own", live, errors.Join(Poison(errX), context.Canceled), DeadLetter},
		{"deadline of the handler's own call", live, context.DeadlineExceeded, Requeue},
		{"a retry wait given up while the listener runs", live, fmt.Errorf("wait: %w", ErrStopping), Requeue},
		{"a retry wait given up for the stop", stopping, fmt.Errorf("wait: %w", ErrStopping), NoSettlement},
		{"another error once the stop began", stopping, errX, Requeue},
	}
	for _, c := range cases {
		if got := decide(c.ctx, c.err); got != c.want {
			t.Errorf("%s: decide = %s, want %s", c.name, got, c.want)
		}
	}
}

func TestSettleOnce(t *testing.T) {
	var s settleOnce
	if err := s.claim(); err != nil {
		t.Fatalf("first claim: %v", err)
	}
	if err := s.claim(); !errors.Is(err, ErrConflictingDisposition) {
		t.Fatalf("second claim = %v, want ErrConflictingDisposition", err)
	}
}

// startMem returns a started broker on a fake clock over a fresh in-process server.
func startMem(t *testing.T, clk clock.Clock, opts ...Option) *Broker {
	t.Helper()
	srv := mem.NewServer()
	b := New("mem", mem.New(srv), append([]Option{WithClock(clk), WithLogger(testkit.Quiet())}, opts...)...)
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = b.Stop(ctx)
	})
	return b
}

func waitChan[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}

func TestDelayedDeliveryWaitsForTheClock(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC))
	// The stall watchdog would be a second waiter on the clock: off, so that
	// the waiter awaited below is the delayed message's.
	b := startMem(t, clk, WithStallThreshold(0))
	got := make(chan time.Time, 1)
	if _, err := b.Listen(context.Background(), Subscription{Topic: "t", Group: "g"}, func(_ context.Context, d *Delivery) error {
		got <- clk.Now()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	sentAt := clk.Now()
	if err := b.SendDelayed(context.Background(), "t", 10*time.Second, &Message{Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	defer close(done)
	if !clk.WaitForWaiters(done, 1) {
		t.Fatal("listener never waited on the clock")
	}
	select {
	case <-got:
		t.Fatal("delayed message delivered before its time")
	default:
	}
	clk.Advance(9 * time.Second)
	select {
	case <-got:
		t.Fatal("delayed message delivered a second early")
	default:
	}
	clk.Advance(time.Second)
	at := waitChan(t, got, "delayed delivery")
	if at.Sub(sentAt) < 10*time.Second {
		t.Fatalf("delivered at +%v", at.Sub(sentAt))
	}
}

func TestRequeueBackoffFollowsThePolicy(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC))
	policy := backoff.Policy{MaxAttempts: 3, Initial: time.Second, Max: time.Minute}
	// The stall watchdog would be a second waiter on the clock: off, so that
	// the waiter awaited below is the requeued message's.
	b := startMem(t, clk, WithRetry(policy), WithStallThreshold(0))
	calls := make(chan int, 10)
	if _, err := b.Listen(context.Background(), Subscription{Topic: "t", Group: "g"}, func(_ context.Context, d *Delivery) error {
		calls <- d.RedeliveryCount
		return errors.New("still broken")
	}); err != nil {
		t.Fatal(err)
	}
	dead := make(chan *Delivery, 1)
	if _, err := b.Listen(context.Background(), Subscription{Topic: "t.dlq", Group: "dlq"}, func(_ context.Context, d *Delivery) error {
		dead <- d
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := b.SendConfirmed(context.Background(), "t", &Message{Key: "k", Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	defer close(done)
	if c := waitChan(t, calls, "first attempt"); c != 0 {
		t.Fatalf("first attempt count %d", c)
	}
	// Attempt 2 is due 1 s later, attempt 3 another 2 s later.
	for i, wait := range []time.Duration{time.Second, 2 * time.Second} {
		if !clk.WaitForWaiters(done, 1) {
			t.Fatal("requeued message not held by the scheduler")
		}
		clk.Advance(wait - time.Millisecond)
		select {
		case <-calls:
			t.Fatalf("attempt %d ran before its backoff", i+2)
		default:
		}
		clk.Advance(time.Millisecond)
		if c := waitChan(t, calls, fmt.Sprintf("attempt %d", i+2)); c != i+1 {
			t.Fatalf("attempt %d saw redelivery count %d", i+2, c)
		}
	}
	d := waitChan(t, dead, "dead letter")
	if d.Header(HeaderDeadClass) != "exhausted" || d.Header(HeaderDeadAttempts) != "3" {
		t.Fatalf("dead letter headers: %v", d.Headers)
	}
}

func TestPanicIsAFailureOfTheMessage(t *testing.T) {
	b := startMem(t, clock.Real{}, WithRetry(backoff.Policy{MaxAttempts: 5}))
	var mu sync.Mutex
	calls := 0
	ok := make(chan struct{})
	if _, err := b.Listen(context.Background(), Subscription{Topic: "t", Group: "g"}, func(_ context.Context, d *Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls == 1 {
			panic("bug in handler")
		}
		close(ok)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := b.SendConfirmed(context.Background(), "t", &Message{Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	waitChan(t, ok, "redelivery after panic")
}

func TestSameKeyIsSerialisedAcrossWorkers(t *testing.T) {
	b := startMem(t, clock.Real{})
	const keys, per = 20, 100
	var mu sync.Mutex
	last := map[string]int{}
	active := map[string]bool{}
	violations := 0
	done := make(chan struct{})
	total := 0
	if _, err := b.Listen(context.Background(), Subscription{Topic: "t", Group: "g", Concurrency: 8}, func(_ context.Context, d *Delivery) error {
		mu.Lock()
		if active[d.Key] {
			violations++
		}
		active[d.Key] = true
		seq := int(d.Payload[0])
		if prev, ok := last[d.Key]; ok && seq != prev+1 {
			violations++
		}
		last[d.Key] = seq
		mu.Unlock()
		runtime.Gosched() // give another worker the chance to break the rule

		mu.Lock()
		active[d.Key] = false
		total++
		if total == keys*per {
			close(done)
		}
		mu.Unlock()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < per; i++ {
		var ms []*Message
		for k := 0; k < keys; k++ {
			ms = append(ms, &Message{Key: fmt.Sprint("k", k), Payload: []byte{byte(i)}})
		}
		if err := b.SendConfirmed(context.Background(), "t", ms...); err != nil {
			t.Fatal(err)
		}
	}
	waitChan(t, done, "all messages")
	if violations != 0 {
		t.Fatalf("%d per-key violations", violations)
	}
}

func TestBatchListenerNeedsTheCapability(t *testing.T) {
	b := startMem(t, clock.Real{})
	if _, err := b.ListenBatch(context.Background(), Subscription{Topic: "t", Group: "g", Expiry: time.Second}, func(context.Context, []*Delivery) error { return nil }); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("expiry on an adapter without SubscriptionExpiry: %v, want ErrUnsupported", err)
	}
}

// The handler's context carries the delivery (for Logger) and is cancelled
// with the listener's handler context, also through contexts derived from it.
func TestHandlerContextCarriesTheDeliveryAndIsCancelledOnStop(t *testing.T) {
	b := startMem(t, clock.Real{})
	type seen struct {
		same bool
		err  error
	}
	got := make(chan seen, 1)
	started := make(chan struct{})
	if _, err := b.Listen(context.Background(), Subscription{Topic: "t", Group: "g"}, func(ctx context.Context, d *Delivery) error {
		child, cancel := context.WithCancel(ctx)
		defer cancel()
		close(started)
		<-child.Done()
		got <- seen{same: ctx.Value(deliveryKey{}) == d, err: child.Err()}
		return child.Err()
	}); err != nil {
		t.Fatal(err)
	}
	if err := b.SendConfirmed(context.Background(), "t", &Message{Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	waitChan(t, started, "handler start")
	// Stop runs out of time at once and cancels the running handler.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_ = b.Stop(ctx)
	s := waitChan(t, got, "cancelled handler")
	if !s.same {
		t.Error("the handler's context does not carry its delivery")
	}
	if !errors.Is(s.err, context.Canceled) {
		t.Errorf("derived context ended with %v, want context.Canceled", s.err)
	}
}

// The metrics a listener tallies per goroutine reach the registry: every
// handler run in the histogram and every settlement by disposition, as soon
// as the listener is idle.
func TestListenerMetricsReachTheRegistry(t *testing.T) {
	for _, conc := range []int{1, 3} {
		t.Run(fmt.Sprint("concurrency=", conc), func(t *testing.T) {
			reg := prometheus.NewRegistry()
			b := startMem(t, clock.Real{}, WithRegisterer(reg), WithRetry(backoff.Policy{MaxAttempts: 1}))
			const n = 600 // more than one flush's worth
			var handled atomic.Int64
			if _, err := b.Listen(context.Background(), Subscription{Topic: "t", Group: "g", Concurrency: conc}, func(_ context.Context, d *Delivery) error {
				handled.Add(1)
				if d.Payload[0] == 1 {
					return errors.New("fails")
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			for i := range n {
				fail := byte(0)
				if i%100 == 0 {
					fail = 1
				}
				if err := b.SendConfirmed(context.Background(), "t", &Message{Key: fmt.Sprint(i % 7), Payload: []byte{fail}}); err != nil {
					t.Fatal(err)
				}
			}
			want := map[string]float64{"ack": n - n/100, "dead_letter": n / 100}
			deadline := time.Now().Add(10 * time.Second)
			for {
				count, settled := gatherListener(t, reg)
				if count == n && settled["ack"] == want["ack"] && settled["dead_letter"] == want["dead_letter"] {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("handled %d; histogram count %d, settled %v; want %d and %v", handled.Load(), count, settled, n, want)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

// TestHandlerTimesStayWithTheirHandlers: deliveries handled back to back are
// timed with one clock read each, from the end of the previous handler; a
// slow handler's time is its own and does not spill into the next one's.
func TestHandlerTimesStayWithTheirHandlers(t *testing.T) {
	reg := prometheus.NewRegistry()
	b := startMem(t, clock.Real{}, WithRegisterer(reg))
	const n, slow = 51, 25
	const slowFor = 300 * time.Millisecond
	var handled atomic.Int64
	for i := range n {
		if err := b.SendConfirmed(context.Background(), "t", &Message{Payload: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Listen(context.Background(), Subscription{Topic: "t", Group: "g", Prefetch: 100}, func(_ context.Context, d *Delivery) error {
		if d.Payload[0] == slow {
			// The handler's own work: measured time, not a wait for a
			// condition. Long enough that a fast handler descheduled on a
			// busy machine never comes near it.
			for start := time.Now(); time.Since(start) < slowFor; {
			}
		}
		handled.Add(1)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		h := gatherHandlerHistogram(t, reg)
		if h.GetSampleCount() == n {
			// Were the slow handler's time to spill into the next one, two
			// handlers would take longer than 128 ms.
			fast := h.GetBucket()[4] // le 128 ms
			if fast.GetUpperBound() != 0.128 || fast.GetCumulativeCount() != n-1 {
				t.Fatalf("%d of %d handlers within %v s; want all but the slow one", fast.GetCumulativeCount(), n, fast.GetUpperBound())
			}
			if h.GetBucket()[5].GetCumulativeCount() != n || h.GetSampleSum() < slowFor.Seconds() {
				t.Fatalf("the slow handler is not in the (128 ms, 512 ms] bucket: %v", h)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("handled %d; histogram count %d", handled.Load(), h.GetSampleCount())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// gatherHandlerHistogram returns the handler histogram of topic t, group g.
func gatherHandlerHistogram(t *testing.T, reg *prometheus.Registry) *dto.Histogram {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "msgx_broker_handler_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			return m.GetHistogram()
		}
	}
	return &dto.Histogram{}
}

// gatherListener returns the handler histogram's count and the settled
// counters by disposition for topic t, group g.
func gatherListener(t *testing.T, reg *prometheus.Registry) (uint64, map[string]float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var count uint64
	settled := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			if labels["topic"] != "t" || labels["group"] != "g" {
				continue
			}
			switch mf.GetName() {
			case "msgx_broker_handler_seconds":
				count = m.GetHistogram().GetSampleCount()
			case "msgx_broker_settled_total":
				settled[labels["disposition"]] = m.GetCounter().GetValue()
			}
		}
	}
	return count, settled
}

// TestTwoBrokersOfOneNameOnOneRegistry: the second one's Start fails with an
// error instead of panicking at New.
func TestTwoBrokersOfOneNameOnOneRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	srv := mem.NewServer()
	b1 := New("mem", mem.New(srv), WithRegisterer(reg), WithLogger(testkit.Quiet()))
	if err := b1.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer b1.Stop(context.Background())
	b2 := New("mem", mem.New(srv), WithRegisterer(reg), WithLogger(testkit.Quiet()))
	if err := b2.Start(context.Background()); err == nil {
		_ = b2.Stop(context.Background())
		t.Fatal("a second broker of the same name on one registry started")
	}
}

// TestBatchExhaustionIsWholeBatch: a failing batch holding one message on its
// last attempt and one on its first is dead-lettered whole, never split into
// dead letters and requeues.
func TestBatchExhaustionIsWholeBatch(t *testing.T) {
	b := startMem(t, clock.Real{})
	ctx := context.Background()
	dead := make(chan string, 4)
	if _, err := b.Listen(ctx, Subscription{Topic: "t.dlq", Group: "reader"}, func(_ context.Context, d *Delivery) error {
		dead <- string(d.Payload)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	firstRun := make(chan struct{})
	sendB := make(chan struct{})
	var mu sync.Mutex
	var batches [][]string
	_, err := b.ListenBatch(ctx, Subscription{Topic: "t", Group: "g", BatchSize: 10, Retry: backoff.Policy{MaxAttempts: 2}},
		func(_ context.Context, ds []*Delivery) error {
			mu.Lock()
			var ids []string
			for _, d := range ds {
				ids = append(ids, string(d.Payload))
			}
			batches = append(batches, ids)
			n := len(batches)
			mu.Unlock()
			if n == 1 {
				close(firstRun)
				<-sendB // b is sent while a's first batch fails, so a's requeue lands behind it
			}
			return errors.New("batch failed")
		})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.SendConfirmed(ctx, "t", &Message{Payload: []byte("a")}); err != nil {
		t.Fatal(err)
	}
	waitChan(t, firstRun, "the first batch")
	if err := b.SendConfirmed(ctx, "t", &Message{Payload: []byte("b")}); err != nil {
		t.Fatal(err)
	}
	close(sendB)
	got := map[string]bool{waitChan(t, dead, "a dead letter"): true, waitChan(t, dead, "a second dead letter"): true}
	if !got["a"] || !got["b"] {
		t.Fatalf("dead letters %v, want a and b", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(batches) != 2 || len(batches[1]) != 2 {
		t.Errorf("batches %v, want [[a] [b a]]: the second batch was split", batches)
	}
}
