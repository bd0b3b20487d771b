package broker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/internal/testkit"
)

// hangDriver is an adapter that hangs: its dead-letter settlement and its
// subscription close block, ignoring their contexts, until the test ends.
type hangDriver struct {
	release chan struct{}
	entered chan struct{} // closed when the dead-letter settlement began
	once    sync.Once
}

func (*hangDriver) Capabilities() driver.Capabilities                        { return driver.Capabilities{} }
func (*hangDriver) Start(context.Context) error                              { return nil }
func (*hangDriver) Publish(context.Context, string, []*driver.Message) error { return nil }
func (*hangDriver) Errors() <-chan error                                     { return nil }
func (*hangDriver) Close(context.Context) error                              { return nil }
func (h *hangDriver) Subscribe(context.Context, driver.SubscriptionSpec) (driver.Subscription, error) {
	return &hangSub{h: h}, nil
}

type hangSub struct {
	h    *hangDriver
	sent bool
}

func (s *hangSub) Receive(ctx context.Context, _ int) ([]driver.Delivery, error) {
	if !s.sent {
		s.sent = true
		return []driver.Delivery{&hangDelivery{h: s.h, msg: driver.Message{Payload: []byte("x")}}}, nil
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

func (s *hangSub) Close(context.Context) error { <-s.h.release; return nil }

type hangDelivery struct {
	h   *hangDriver
	msg driver.Message
}

func (d *hangDelivery) Message() *driver.Message                                      { return &d.msg }
func (d *hangDelivery) Ack(context.Context) error                                     { return nil }
func (d *hangDelivery) Requeue(context.Context, *driver.Message, time.Duration) error { return nil }
func (d *hangDelivery) Release(context.Context, *driver.Message, time.Duration) error { return nil }
func (d *hangDelivery) DeadLetter(context.Context, *driver.Message) error {
	d.h.once.Do(func() { close(d.h.entered) })
	<-d.h.release
	return errors.New("released")
}

// TestStopIsBoundedByItsContext: a settlement and a subscription close that
// hang do not hold Stop beyond its context and the close timeout.
func TestStopIsBoundedByItsContext(t *testing.T) {
	h := &hangDriver{release: make(chan struct{}), entered: make(chan struct{})}
	defer close(h.release)
	b := New("hang", h, WithLogger(testkit.Quiet()), WithClock(clock.Real{}), WithCloseTimeout(100*time.Millisecond))
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	l, err := b.Listen(context.Background(), Subscription{Topic: "t", Group: "g"}, func(context.Context, *Delivery) error {
		return Poison(errors.New("bad"))
	})
	if err != nil {
		t.Fatal(err)
	}
	waitChan(t, h.entered, "the hanging dead-letter settlement")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- l.Stop(ctx) }()
	err = waitChan(t, stopped, "Stop to return despite the hanging adapter")
	if err == nil || !strings.Contains(err.Error(), "not closed in time") {
		t.Errorf("Stop = %v, want the overrunning close reported", err)
	}
}

// TestStopEndsARetryWait: a handler waiting to retry (Pause, on a clock
// that never reaches the retry) gives up as soon as Stop begins, so Stop
// returns long before its own deadline; the delivery is left unsettled and
// comes back to the next listener of the group.
func TestStopEndsARetryWait(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b := startMem(t, clk, WithStallThreshold(0))
	sub := Subscription{Topic: "retry-wait", Group: "g"}
	waiting := make(chan struct{}, 1)
	gaveUp := make(chan error, 1)
	l, err := b.Listen(context.Background(), sub, func(ctx context.Context, d *Delivery) error {
		waiting <- struct{}{}
		err := Pause(ctx, clk, time.Hour)
		gaveUp <- err
		return fmt.Errorf("store: database down; then: %w", err)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.SendConfirmed(context.Background(), sub.Topic, &Message{Key: "k", Payload: []byte("m")}); err != nil {
		t.Fatal(err)
	}
	waitChan(t, waiting, "the handler in its retry wait")
	clk.WaitForWaiters(nil, 1)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	began := time.Now()
	stopped := make(chan error, 1)
	go func() { stopped <- l.Stop(ctx) }()
	if err := waitChan(t, stopped, "Stop"); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took > 2*time.Second {
		t.Errorf("Stop took %s: it waited for the retry instead of ending it", took)
	}
	if err := waitChan(t, gaveUp, "the handler's wait to end"); !errors.Is(err, ErrStopping) {
		t.Errorf("Pause = %v, want ErrStopping", err)
	}

	again := make(chan *Delivery, 1)
	l2, err := b.Listen(context.Background(), sub, func(_ context.Context, d *Delivery) error {
		again <- d
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l2.Stop(context.Background()) }()
	if d := waitChan(t, again, "the unsettled delivery to come back"); string(d.Payload) != "m" {
		t.Errorf("redelivered %q", d.Payload)
	}
}
