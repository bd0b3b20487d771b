package app

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/msgx/msgx/broker/brokertest"
	"github.com/msgx/msgx/store/storetest"
)

// The whole stop, the work's and the brokers' close, fits in one
// shutdown-timeout, even when a broker's connection goes silent just before
// the signal so that closing it can only time out.
func TestStopFitsInTheShutdownTimeout(t *testing.T) {
	_, dsn := storetest.NewSchema(t)
	proxy, err := brokertest.NewProxy("127.0.0.1:5672")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	topic := storetest.UniqueName("stop-budget-")
	const budget = 3 * time.Second
	cfg := loadConfig(t, fmt.Sprintf(`
store: {dsn: %q}
admin: {listen: "127.0.0.1:0"}
ingress: {listen: ""}
shutdown-timeout: %s
brokers: {rmq: {kind: rabbitmq, url: "amqp://guest:guest@%s/"}}
streams:
  feed:
    processor: flop
    sources:
      in: {kind: broker, broker: rmq, topic: %s, group: g}
`, dsn, budget, proxy.Addr(), topic))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, err := New(ctx, cfg, registry(), WithLogOutput(io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	waitReadyz(t, a.AdminAddr(), 30*time.Second, "ready", func(code int, _ map[string]string) bool { return code == 200 })

	proxy.Stall()
	began := time.Now()
	cancel()
	select {
	case err := <-done:
		took := time.Since(began)
		t.Logf("stopped in %s (err %v)", took.Round(time.Millisecond), err)
		// A little over the budget for the scheduler, never a second budget.
		if took > budget+time.Second {
			t.Errorf("stop took %s, want at most the shutdown-timeout %s", took, budget)
		}
	case <-time.After(4 * budget):
		t.Fatalf("no stop after %s, with a shutdown-timeout of %s", 4*budget, budget)
	}
}
