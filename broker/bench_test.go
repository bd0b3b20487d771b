package broker_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/broker/mem"
)

// BenchmarkConsumeMem measures the portable layer's per-message cost over the
// in-process adapter (publish, dispatch, handler call, settlement).
func BenchmarkConsumeMem(b *testing.B) {
	srv := mem.NewServer()
	br := broker.New("mem", mem.New(srv))
	ctx := context.Background()
	if err := br.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer br.Stop(ctx)
	msgs := make([]*broker.Message, 100)
	for i := range msgs {
		msgs[i] = &broker.Message{Payload: make([]byte, 200)}
	}
	for sent := 0; sent < b.N; sent += 100 {
		_ = br.SendConfirmed(ctx, "t", msgs...)
	}
	var got atomic.Int64
	done := make(chan struct{})
	n := int64((b.N + 99) / 100 * 100)
	b.ResetTimer()
	_, err := br.Listen(ctx, broker.Subscription{Topic: "t", Group: "g", Prefetch: 200}, func(context.Context, *broker.Delivery) error {
		if got.Add(1) == n {
			close(done)
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	<-done
}
