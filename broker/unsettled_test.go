package broker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgx/msgx/backoff"
	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/internal/testkit"
)

// failDriver hands out one delivery whose acknowledgement and release both
// fail: the delivery stays held until its listener stops.
type failDriver struct{}

func (failDriver) Capabilities() driver.Capabilities                        { return driver.Capabilities{} }
func (failDriver) Start(context.Context) error                              { return nil }
func (failDriver) Publish(context.Context, string, []*driver.Message) error { return nil }
func (failDriver) Errors() <-chan error                                     { return nil }
func (failDriver) Close(context.Context) error                              { return nil }
func (failDriver) Subscribe(context.Context, driver.SubscriptionSpec) (driver.Subscription, error) {
	return &failSub{}, nil
}

type failSub struct{ sent bool }

func (s *failSub) Receive(ctx context.Context, _ int) ([]driver.Delivery, error) {
	if !s.sent {
		s.sent = true
		return []driver.Delivery{&failDelivery{msg: driver.Message{Payload: []byte("x")}}}, nil
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

func (s *failSub) Close(context.Context) error { return nil }

type failDelivery struct{ msg driver.Message }

var errLinkDown = errors.New("link down")

func (d *failDelivery) Message() *driver.Message  { return &d.msg }
func (d *failDelivery) Ack(context.Context) error { return errLinkDown }
func (d *failDelivery) Requeue(context.Context, *driver.Message, time.Duration) error {
	return errLinkDown
}
func (d *failDelivery) Release(context.Context, *driver.Message, time.Duration) error {
	return errLinkDown
}
func (d *failDelivery) DeadLetter(context.Context, *driver.Message) error { return errLinkDown }

// oldestUnsettledAge returns msgx_broker_oldest_unsettled_seconds of topic t,
// group g, and whether the series exists.
func oldestUnsettledAge(t *testing.T, reg *prometheus.Registry) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "msgx_broker_oldest_unsettled_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			if labels["topic"] == "t" && labels["group"] == "g" {
				return m.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

// waitForWatchdog waits, bounded, until something waits on clk: the
// watchdog, the listener's only user of the clock here.
func waitForWatchdog(t *testing.T, clk *clock.Fake) {
	t.Helper()
	bound := make(chan struct{})
	timer := time.AfterFunc(10*time.Second, func() { close(bound) })
	defer timer.Stop()
	if !clk.WaitForWaiters(bound, 1) {
		t.Fatal("the watchdog never waited on the clock")
	}
}

// waitStalled returns the next ErrStalled event, skipping other events.
func waitStalled(t *testing.T, b *Broker) Event {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case e := <-b.Events():
			if errors.Is(e.Err, ErrStalled) {
				return e
			}
		case <-deadline:
			t.Fatal("no ErrStalled event")
			return Event{}
		}
	}
}

// noStalled checks, over a bounded quiet period, that no ErrStalled event
// is reported.
func noStalled(t *testing.T, b *Broker, what string) {
	t.Helper()
	quiet := time.After(300 * time.Millisecond)
	for {
		select {
		case e := <-b.Events():
			if errors.Is(e.Err, ErrStalled) {
				t.Fatalf("%s: %v", what, e.Err)
			}
		case <-quiet:
			return
		}
	}
}

// TestHandlerThatDoesNotReturnShowsItsAge: the gauge is the age, on the
// broker's clock, of the delivery whose handler runs; the stall event comes
// once the threshold is crossed, once, and the age falls to zero when the
// delivery is settled.
func TestHandlerThatDoesNotReturnShowsItsAge(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC))
	reg := prometheus.NewRegistry()
	b := startMem(t, clk, WithRegisterer(reg), WithStallThreshold(time.Minute))
	started, finish := make(chan struct{}), make(chan struct{})
	if _, err := b.Listen(context.Background(), Subscription{Topic: "t", Group: "g"}, func(_ context.Context, d *Delivery) error {
		close(started)
		<-finish
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if age, ok := oldestUnsettledAge(t, reg); !ok || age != 0 {
		t.Fatalf("idle listener: age %v (series %v), want 0", age, ok)
	}
	if err := b.SendConfirmed(context.Background(), "t", &Message{Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	waitChan(t, started, "handler start")
	waitForWatchdog(t, clk)
	clk.Advance(59 * time.Second)
	if age, _ := oldestUnsettledAge(t, reg); age != 59 {
		t.Fatalf("age after 59 s = %v", age)
	}
	noStalled(t, b, "before the threshold")
	clk.Advance(31 * time.Second)
	if age, _ := oldestUnsettledAge(t, reg); age != 90 {
		t.Fatalf("age after 90 s = %v", age)
	}
	waitStalled(t, b)
	clk.Advance(10 * time.Minute)
	noStalled(t, b, "the same stall reported twice")

	close(finish)
	for wait := time.Now().Add(10 * time.Second); ; {
		if age, _ := oldestUnsettledAge(t, reg); age == 0 {
			return
		}
		if time.Now().After(wait) {
			t.Fatal("the age did not fall to 0 once the delivery was settled")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestHeldDeliveryShowsItsAge: a delivery whose settlement and release both
// failed stays held; its age grows on the gauge and crosses the threshold
// as an event, and the series goes with the listener.
func TestHeldDeliveryShowsItsAge(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC))
	reg := prometheus.NewRegistry()
	b := New("stub", failDriver{}, WithClock(clk), WithLogger(testkit.Quiet()), WithRegisterer(reg),
		WithSettleRetry(backoff.Policy{MaxAttempts: 1}), WithStallThreshold(2*time.Minute))
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer b.Stop(context.Background())
	l, err := b.Listen(context.Background(), Subscription{Topic: "t", Group: "g"}, func(context.Context, *Delivery) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	// The failed settlement is reported; then the delivery is held.
	deadline := time.After(10 * time.Second)
	for l.stuck.Load() == 0 {
		select {
		case <-b.Events():
		case <-deadline:
			t.Fatal("the delivery was never held")
		}
	}
	waitForWatchdog(t, clk)
	clk.Advance(3 * time.Minute)
	if age, _ := oldestUnsettledAge(t, reg); age != 180 {
		t.Fatalf("age of the held delivery after 3 min = %v, want 180", age)
	}
	e := waitStalled(t, b)
	if e.Topic != "t" || e.Group != "g" {
		t.Errorf("stall event for %q/%q", e.Topic, e.Group)
	}
	if err := l.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if age, ok := oldestUnsettledAge(t, reg); ok {
		t.Errorf("a stopped listener still shows an age of %v", age)
	}
}
