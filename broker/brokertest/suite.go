package brokertest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/msgx/msgx/backoff"
	"github.com/msgx/msgx/broker"
)

// Case is one conformance case.
type Case struct {
	Num  int
	Name string
	// Needs names the capability the case is gated on ("" = every adapter).
	Needs string
	run   func(t *testing.T, s *suite)
}

// Cases lists the suite in the order of the specification.
func Cases() []Case {
	return []Case{
		{1, "confirmed publish", "", caseConfirmedPublish},
		{2, "round trip", "", caseRoundTrip},
		{3, "completion before ack", "", caseCompletionBeforeAck},
		{4, "requeue", "", caseRequeue},
		{5, "poison", "", casePoison},
		{6, "dead-letter publish failure", "", caseDeadLetterFailure},
		{7, "retry exhaustion", "", caseRetryExhaustion},
		{8, "cancellation", "", caseCancellation},
		{9, "conflicting disposition", "", caseConflict},
		{10, "load balance", "LoadBalance", caseLoadBalance},
		{11, "broadcast", "Broadcast", caseBroadcast},
		{12, "key order", "PerKeyOrder", caseKeyOrder},
		{13, "out-of-order completion", "OffsetCommit", caseOutOfOrderCompletion},
		{14, "batch", "Batch", caseBatch},
		{15, "durable backlog", "Persistent", caseDurableBacklog},
		{16, "delay", "", caseDelay},
		{17, "burst", "", caseBurst},
		{18, "graceful stop", "", caseGracefulStop},
		{19, "reconnect", "", caseReconnect},
		{20, "lifecycle errors", "", caseLifecycleErrors},
		{21, "subscription expiry", "SubscriptionExpiry", caseSubscriptionExpiry},
		{22, "failing settlement does not stall the consumer", "", caseFailingSettlement},
		{23, "forwarded delivery carries no control headers", "", caseForwardedDelivery},
		{24, "delayed message does not delay other keys", "", caseDelayOtherKeys},
		{25, "redelivery count after a crash", "", caseCountAfterCrash},
		{26, "outage is unavailable", "", caseOutageUnavailable},
		{27, "oversized message is rejected", "", caseOversizedRejected},
	}
}

// Options tune the suite for an adapter.
type Options struct {
	// BurstN is the number of messages of the burst case (default 20 000).
	BurstN int
}

type suite struct {
	h    Harness
	opts Options
	caps broker.Capabilities
}

// Result is one cell of the matrix.
type Result struct {
	Num     int    `json:"num"`
	Name    string `json:"name"`
	Outcome string `json:"outcome"` // pass | fail | skipped
	Reason  string `json:"reason,omitempty"`
}

// Run runs every case against the harness's adapter. When MSGX_TCK_REPORT
// names a directory, the outcomes are written there as <adapter>.json for the
// matrix in docs/tck.md.
func Run(t *testing.T, h Harness, opts Options) {
	if opts.BurstN == 0 {
		opts.BurstN = 20000
	}
	s := &suite{h: h, opts: opts}
	// Capabilities are declared at start; read them from a started adapter.
	b := s.start(t)
	s.caps = b.Capabilities()
	stopBroker(t, b)

	var mu sync.Mutex
	results := make([]Result, 0, len(Cases()))
	for _, c := range Cases() {
		res := Result{Num: c.Num, Name: c.Name}
		t.Run(fmt.Sprintf("%02d_%s", c.Num, c.Name), func(t *testing.T) {
			if c.Needs != "" && !capability(s.caps, c.Needs) {
				res.Outcome, res.Reason = "skipped", "capability "+c.Needs+" not declared"
				t.Skipf("adapter %s does not declare %s", h.Name(), c.Needs)
			}
			c.run(t, s)
			if t.Failed() {
				res.Outcome = "fail"
			} else {
				res.Outcome = "pass"
			}
		})
		if res.Outcome == "" {
			res.Outcome = "fail"
		}
		mu.Lock()
		results = append(results, res)
		mu.Unlock()
	}
	if dir := os.Getenv("MSGX_TCK_REPORT"); dir != "" {
		writeReport(t, dir, h, s.caps, results)
	}
}

func capability(c broker.Capabilities, name string) bool {
	switch name {
	case "LoadBalance":
		return c.LoadBalance
	case "Broadcast":
		return c.Broadcast
	case "PerKeyOrder":
		return c.PerKeyOrder
	case "OffsetCommit":
		return c.OffsetCommit
	case "Batch":
		return c.Batch
	case "Persistent":
		return c.Persistent
	case "SubscriptionExpiry":
		return c.SubscriptionExpiry
	}
	panic("brokertest: unknown capability " + name)
}

// Report is what Run writes for one adapter.
type Report struct {
	Adapter      string              `json:"adapter"`
	Target       string              `json:"target,omitempty"`
	Capabilities broker.Capabilities `json:"capabilities"`
	Results      []Result            `json:"results"`
}

func writeReport(t *testing.T, dir string, h Harness, caps broker.Capabilities, results []Result) {
	adapter := h.Name()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Errorf("tck report: %v", err)
		return
	}
	r := Report{Adapter: adapter, Capabilities: caps, Results: results}
	if tg, ok := h.(Targeted); ok {
		r.Target = tg.Target()
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		t.Errorf("tck report: %v", err)
		return
	}
	if err := os.WriteFile(filepath.Join(dir, adapter+".json"), append(data, '\n'), 0o644); err != nil {
		t.Errorf("tck report: %v", err)
	}
}

// fastRetry keeps the requeue cases quick; the policy logic itself is the port's.
func fastRetry(n int) backoff.Policy {
	return backoff.Policy{MaxAttempts: n, Initial: 5 * time.Millisecond, Max: 20 * time.Millisecond}
}

// start returns a started portable broker over a fresh driver, stopped at cleanup.
func (s *suite) start(t *testing.T, opts ...broker.Option) *broker.Broker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout())
	defer cancel()
	drv, err := s.h.NewDriver(ctx)
	if err != nil {
		t.Fatalf("new driver: %v", err)
	}
	opts = append([]broker.Option{broker.WithRetry(fastRetry(10)), broker.WithSettleTimeout(10 * time.Second)}, opts...)
	b := broker.New(s.h.Name(), drv, opts...)
	if err := b.Start(ctx); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { stopBroker(t, b) })
	return b
}

func stopBroker(t testing.TB, b *broker.Broker) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Stop(ctx); err != nil {
		t.Logf("stop broker: %v", err)
	}
}

// topic returns a fresh topic name, created on brokers that need it.
func (s *suite) topic(t *testing.T, parts ...string) string {
	t.Helper()
	name := uniqueName(t, append([]string{s.h.Name()}, parts...)...)
	if tc, ok := s.h.(Topics); ok {
		ctx, cancel := context.WithTimeout(context.Background(), timeout())
		defer cancel()
		if err := tc.CreateTopic(ctx, name); err != nil {
			t.Fatalf("create topic %s: %v", name, err)
		}
		if err := tc.CreateTopic(ctx, name+".dlq"); err != nil {
			t.Fatalf("create topic %s.dlq: %v", name, err)
		}
	}
	return name
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), timeout())
	t.Cleanup(cancel)
	return ctx
}

func send(t *testing.T, b *broker.Broker, topic string, msgs ...*broker.Message) {
	t.Helper()
	if err := b.SendConfirmed(ctxT(t), topic, msgs...); err != nil {
		t.Fatalf("send to %s: %v", topic, err)
	}
}

func msg(key string, id string) *broker.Message {
	return &broker.Message{Key: key, Payload: []byte(id), Headers: map[string]string{broker.HeaderEventID: id}}
}

func listen(t *testing.T, b *broker.Broker, sub broker.Subscription, h broker.Handler) *broker.Listener {
	t.Helper()
	l, err := b.Listen(ctxT(t), sub, h)
	if err != nil {
		t.Fatalf("listen %s/%s: %v", sub.Topic, sub.Group, err)
	}
	return l
}

func stopListener(t *testing.T, l *broker.Listener, grace time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := l.Stop(ctx); err != nil {
		t.Errorf("stop listener: %v", err)
	}
}

// collector records handled deliveries and lets tests wait for conditions.
type collector struct {
	mu     sync.Mutex
	cond   chan struct{}
	seen   map[string]int // event id -> handled count
	order  []*broker.Delivery
	result func(d *broker.Delivery) error
}

func newCollector(result func(d *broker.Delivery) error) *collector {
	return &collector{cond: make(chan struct{}), seen: map[string]int{}, result: result}
}

func (c *collector) handle(ctx context.Context, d *broker.Delivery) error {
	// The result runs before waiters are woken, so whatever it records is
	// visible to the condition they check.
	var err error
	if c.result != nil {
		err = c.result(d)
	}
	c.mu.Lock()
	c.seen[d.Header(broker.HeaderEventID)]++
	c.order = append(c.order, d)
	close(c.cond)
	c.cond = make(chan struct{})
	c.mu.Unlock()
	return err
}

func (c *collector) count(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen[id]
}

// waitFor blocks until cond holds (checked under the collector's lock after every
// delivery) or the suite's timeout passes.
func (c *collector) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(timeout())
	defer deadline.Stop()
	for {
		c.mu.Lock()
		ok := cond()
		ch := c.cond
		c.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("timed out after %v waiting for %s", timeout(), what)
		}
	}
}

func (c *collector) waitCount(t *testing.T, id string, n int) {
	t.Helper()
	c.waitFor(t, fmt.Sprintf("%s handled %d times", id, n), func() bool { return c.seen[id] >= n })
}

func (c *collector) waitDistinct(t *testing.T, n int) {
	t.Helper()
	c.waitFor(t, fmt.Sprintf("%d distinct messages", n), func() bool { return len(c.seen) >= n })
}

// quietPeriod is how long a "never again" check watches for a delivery that
// must not come: a redelivery would come within it (the cases' retry
// backoff is at most 20 ms, and adapters redeliver unsettled deliveries at
// once when a subscription closes).
const quietPeriod = time.Second

// quiet waits the quiet period; the checks after it count by message id.
func quiet() { <-time.After(quietPeriod) }

// drainEvents waits for an event whose error matches.
func waitEvent(t *testing.T, b *broker.Broker, what string, match func(broker.Event) bool) broker.Event {
	t.Helper()
	deadline := time.NewTimer(timeout())
	defer deadline.Stop()
	for {
		select {
		case e := <-b.Events():
			if match(e) {
				return e
			}
		case <-deadline.C:
			t.Fatalf("timed out waiting for lifecycle event: %s", what)
			return broker.Event{}
		}
	}
}
