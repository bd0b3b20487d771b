// Package natsbench is both sides of `msgx-bench broker --adapter nats`: the
// port over a Driver and the raw jetstream client doing the same work.
package natsbench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	natsio "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgx/msgx/broker/driver"
	natsbroker "github.com/msgx/msgx/broker/nats"
	"github.com/msgx/msgx/lab/bench/brokerbench"
)

// Adapter returns both sides of `msgx-bench broker --adapter nats` against
// the server at url (the local default when empty): the port over a Driver and
// the raw jetstream client doing the same work. Streams live under a subject
// prefix of their own and are deleted by the returned cleanup.
func Adapter(ctx context.Context, url string, prefetch int) (brokerbench.Adapter, func(), error) {
	if url == "" {
		url = natsio.DefaultURL
	}
	prefix := "msgxbench." + strconv.FormatInt(time.Now().UnixNano(), 36)
	opts := []natsbroker.Option{natsbroker.WithURL(url), natsbroker.WithSubjectPrefix(prefix)}
	admin := natsbroker.New(opts...)
	if err := admin.Start(ctx); err != nil {
		return brokerbench.Adapter{}, nil, err
	}
	cleanup := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = deleteStreams(ctx, url, prefix)
		_ = admin.Close(ctx)
	}
	return brokerbench.Adapter{
		Name: "nats",
		// Create the group before the publish phase, so that it also holds
		// under interest retention.
		Setup:     admin.EnsureGroup,
		NewDriver: func(context.Context) (driver.Broker, error) { return natsbroker.New(opts...), nil },
		NewRaw: func(context.Context) (brokerbench.Raw, error) {
			return newBenchRaw(url, admin, prefetch)
		},
	}, cleanup, nil
}

// deleteStreams removes every stream under the benchmark's subject prefix.
func deleteStreams(ctx context.Context, url, prefix string) error {
	nc, err := natsio.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	names := js.StreamNames(ctx, jetstream.WithStreamListSubject(prefix+".>"))
	var all []string
	for n := range names.Name() {
		all = append(all, n)
	}
	errs := []error{names.Err()}
	for _, n := range all {
		errs = append(errs, js.DeleteStream(ctx, n))
	}
	return errors.Join(errs...)
}

// benchRaw is the raw jetstream client: batches of async publishes each
// waiting for all their acks, and a pull consumer acking every message, as
// the driver does.
type benchRaw struct {
	nc       *natsio.Conn
	js       jetstream.JetStream
	names    *natsbroker.Driver
	prefetch int
}

func newBenchRaw(url string, names *natsbroker.Driver, prefetch int) (*benchRaw, error) {
	nc, err := natsio.Connect(url)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &benchRaw{nc: nc, js: js, names: names, prefetch: max(prefetch, 1)}, nil
}

func (r *benchRaw) Publish(ctx context.Context, topic string, payload []byte, n, batch int) error {
	subj, err := r.names.Subject(topic)
	if err != nil {
		return err
	}
	futures := make([]jetstream.PubAckFuture, 0, batch)
	for sent := 0; sent < n; sent += batch {
		futures = futures[:0]
		for i := 0; i < min(batch, n-sent); i++ {
			// The same bytes as the port's message: the bench's port messages
			// carry a key, which travels in this one header.
			h := natsio.Header{driver.HeaderPartitionKey: []string{strconv.Itoa((sent + i) % 1000)}}
			f, err := r.js.PublishMsgAsync(&natsio.Msg{Subject: subj, Data: payload, Header: h})
			if err != nil {
				return err
			}
			futures = append(futures, f)
		}
		for _, f := range futures {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				return err
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return nil
}

func (r *benchRaw) Consume(ctx context.Context, topic, group string, n int) error {
	stream, err := r.names.StreamName(topic)
	if err != nil {
		return err
	}
	cons, err := r.js.Consumer(ctx, stream, natsbroker.ConsumerName(group))
	if err != nil {
		return err
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(r.prefetch))
	if err != nil {
		return err
	}
	defer it.Stop()
	for got := 0; got < n; got++ {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return fmt.Errorf("after %d messages: %w", got, err)
		}
		if err := m.Ack(); err != nil {
			return err
		}
	}
	return nil
}

func (r *benchRaw) Close() error {
	r.nc.Close()
	return nil
}
