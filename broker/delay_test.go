package broker

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/internal/testkit"
)

// delayDriver records what it is asked to publish and with which delay.
type delayDriver struct {
	failDriver
	mu    sync.Mutex
	sends []recordedSend
}

type recordedSend struct {
	native bool
	delay  time.Duration
	msg    *driver.Message
}

func (d *delayDriver) Publish(_ context.Context, _ string, msgs []*driver.Message) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sends = append(d.sends, recordedSend{msg: msgs[0]})
	return nil
}

func (d *delayDriver) PublishDelayed(_ context.Context, _ string, msgs []*driver.Message, delay time.Duration) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sends = append(d.sends, recordedSend{native: true, delay: delay, msg: msgs[0]})
	return nil
}

// TestSendDelayedUsesTheNativeDelay: SendDelayed goes to the broker's own
// delay where the adapter has one, still with the not-before header as the
// guard for subscriptions that ignore it; SendConfirmed does not.
func TestSendDelayedUsesTheNativeDelay(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC))
	drv := &delayDriver{}
	b := New("stub", drv, WithClock(clk), WithLogger(testkit.Quiet()))
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer b.Stop(context.Background())
	if err := b.SendDelayed(context.Background(), "t", 90*time.Second, &Message{Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if err := b.SendConfirmed(context.Background(), "t", &Message{Payload: []byte("y")}); err != nil {
		t.Fatal(err)
	}
	drv.mu.Lock()
	defer drv.mu.Unlock()
	if len(drv.sends) != 2 {
		t.Fatalf("%d publishes, want 2", len(drv.sends))
	}
	if s := drv.sends[0]; !s.native || s.delay != 90*time.Second || s.msg.Headers[HeaderNotBefore] != notBeforeHeader(clk.Now().Add(90*time.Second)) {
		t.Errorf("delayed send: native %v, delay %v, not-before %q", s.native, s.delay, s.msg.Headers[HeaderNotBefore])
	}
	if s := drv.sends[1]; s.native {
		t.Errorf("a confirmed send went through the delayed publish")
	}
}
