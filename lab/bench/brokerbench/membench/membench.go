// Package membench is the raw side of `msgx-bench broker --adapter mem`: the
// in-process Server driven without the port.
package membench

import (
	"context"

	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/broker/mem"
)

// Raw drives a Server without the port, as the baseline of `msgx-bench
// broker --adapter mem`.
type Raw struct{ d *mem.Driver }

// NewRaw returns the raw side for s.
func NewRaw(s *mem.Server) *Raw { return &Raw{d: mem.New(s)} }

// Publish sends n messages in batches.
func (r *Raw) Publish(ctx context.Context, topic string, payload []byte, n, batch int) error {
	msgs := make([]*driver.Message, 0, batch)
	for sent := 0; sent < n; sent += batch {
		msgs = msgs[:0]
		for i := 0; i < min(batch, n-sent); i++ {
			msgs = append(msgs, &driver.Message{Payload: payload})
		}
		if err := r.d.Publish(ctx, topic, msgs); err != nil {
			return err
		}
	}
	return nil
}

// Consume receives and acks n messages.
func (r *Raw) Consume(ctx context.Context, topic, group string, n int) error {
	sub, err := r.d.Subscribe(ctx, driver.SubscriptionSpec{Topic: topic, Group: group, Prefetch: 256})
	if err != nil {
		return err
	}
	defer sub.Close(ctx)
	for got := 0; got < n; {
		ds, err := sub.Receive(ctx, 128)
		if err != nil {
			return err
		}
		for _, d := range ds {
			if err := d.Ack(ctx); err != nil {
				return err
			}
		}
		got += len(ds)
	}
	return nil
}

// Close releases the client.
func (r *Raw) Close() error { return r.d.Close(context.Background()) }
