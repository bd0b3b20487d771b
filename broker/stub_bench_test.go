package broker_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/internal/testkit"
)

// stubDriver hands out fresh in-memory deliveries as fast as they are asked
// for and settles them by counting, so that a benchmark over it measures the
// portable layer alone.
type stubDriver struct{ acked atomic.Int64 }

func (*stubDriver) Capabilities() driver.Capabilities {
	return driver.Capabilities{Persistent: true, PerKeyOrder: true, NativeKey: true, OffsetCommit: true, Batch: true}
}
func (*stubDriver) Start(context.Context) error                              { return nil }
func (*stubDriver) Publish(context.Context, string, []*driver.Message) error { return nil }
func (*stubDriver) Errors() <-chan error                                     { return nil }
func (*stubDriver) Close(context.Context) error                              { return nil }
func (s *stubDriver) Subscribe(context.Context, driver.SubscriptionSpec) (driver.Subscription, error) {
	return &stubSub{d: s, payload: make([]byte, 200), closed: make(chan struct{})}, nil
}

type stubSub struct {
	d       *stubDriver
	payload []byte
	closed  chan struct{}
	next    int
}

func (s *stubSub) Receive(ctx context.Context, max int) ([]driver.Delivery, error) {
	select {
	case <-s.closed:
		return nil, driver.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	default:
	}
	// Like a real driver: one array of deliveries per receive.
	ds := make([]stubDelivery, max)
	out := make([]driver.Delivery, max)
	for i := range ds {
		ds[i].s = s
		ds[i].msg.Key = stubKeys[s.next%len(stubKeys)]
		ds[i].msg.Payload = s.payload
		s.next++
		out[i] = &ds[i]
	}
	return out, nil
}

func (s *stubSub) Close(context.Context) error { close(s.closed); return nil }

var stubKeys = func() []string {
	ks := make([]string, 1000)
	for i := range ks {
		ks[i] = time.Duration(i).String()
	}
	return ks
}()

type stubDelivery struct {
	s   *stubSub
	msg driver.Message
}

func (d *stubDelivery) Message() *driver.Message                                      { return &d.msg }
func (d *stubDelivery) Ack(context.Context) error                                     { d.s.d.acked.Add(1); return nil }
func (d *stubDelivery) Requeue(context.Context, *driver.Message, time.Duration) error { return nil }
func (d *stubDelivery) DeadLetter(context.Context, *driver.Message) error             { return nil }
func (d *stubDelivery) Release(context.Context, *driver.Message, time.Duration) error { return nil }

// BenchmarkListenerStub measures the port's per-message cost for consume and
// ack over a driver that costs next to nothing: receive, dispatch, handler
// call, metrics, settlement.
func BenchmarkListenerStub(b *testing.B) {
	for _, conc := range []int{1, 4} {
		b.Run("concurrency="+strconv.Itoa(conc), func(b *testing.B) {
			br := broker.New("stub", &stubDriver{}, broker.WithLogger(testkit.Quiet()))
			ctx := context.Background()
			if err := br.Start(ctx); err != nil {
				b.Fatal(err)
			}
			defer br.Stop(ctx)
			var got atomic.Int64
			done := make(chan struct{})
			n := int64(b.N)
			b.ReportAllocs()
			cpu0 := cpuTime()
			b.ResetTimer()
			l, err := br.Listen(ctx, broker.Subscription{Topic: "t", Group: "g", Concurrency: conc, Prefetch: 200}, func(context.Context, *broker.Delivery) error {
				if got.Add(1) == n {
					close(done)
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			<-done
			b.StopTimer()
			// CPU time is steadier than wall time on a shared machine.
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
			_ = l.Stop(ctx)
		})
	}
}

// cpuTime is the CPU time the process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
