// Package kafkabench is the Kafka side of `msgx-bench broker`: the port over
// the Kafka driver beside a raw franz-go client doing the same work, against
// a given cluster or an in-process kfake cluster.
package kafkabench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/broker/kafka"
	"github.com/msgx/msgx/lab/bench/brokerbench"
)

// Partitions of every benchmark topic.
const Partitions = 4

// pollMax is what the raw consumer takes per poll: the port's prefetch in the
// benchmark (2 × the publish batch of 100), which bounds the driver's polls.
const pollMax = 200

// New returns the benchmark adapter. seeds is a comma-separated broker list;
// when empty an in-process kfake cluster is started and stopped by cleanup.
func New(ctx context.Context, seeds string) (brokerbench.Adapter, func(), error) {
	var addrs []string
	cleanup := func() {}
	if seeds == "" {
		kf, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			return brokerbench.Adapter{}, nil, fmt.Errorf("kfake: %w", err)
		}
		addrs = kf.ListenAddrs()
		cleanup = kf.Close
	} else {
		addrs = strings.Split(seeds, ",")
	}
	admCl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		cleanup()
		return brokerbench.Adapter{}, nil, err
	}
	adm := kadm.NewClient(admCl)
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	a := brokerbench.Adapter{
		Name: "kafka",
		Setup: func(ctx context.Context, topic, _ string) error {
			resp, err := adm.CreateTopic(ctx, Partitions, -1, nil, topic)
			if err != nil {
				return err
			}
			return resp.Err
		},
		NewDriver: func(context.Context) (driver.Broker, error) {
			return kafka.New(kafka.SeedBrokers(addrs...), kafka.WithLogger(logger)), nil
		},
		NewRaw: func(context.Context) (brokerbench.Raw, error) {
			return &Raw{seeds: addrs}, nil
		},
	}
	return a, func() { admCl.Close(); cleanup() }, nil
}

// Raw is franz-go used directly with the driver's settings: an idempotent
// acks=all producer without linger publishing with ProduceSync, and a group
// consumer marking every record for the periodic commit.
type Raw struct {
	seeds []string
	prod  *kgo.Client
	cons  []*kgo.Client
}

// Publish sends n keyed messages in ProduceSync batches of batch.
func (r *Raw) Publish(ctx context.Context, topic string, payload []byte, n, batch int) error {
	if r.prod == nil {
		cl, err := kgo.NewClient(kgo.SeedBrokers(r.seeds...), kgo.ProducerLinger(0))
		if err != nil {
			return err
		}
		r.prod = cl
	}
	recs := make([]*kgo.Record, 0, batch)
	for sent := 0; sent < n; sent += batch {
		recs = recs[:0]
		for i := sent; i < min(sent+batch, n); i++ {
			recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(strconv.Itoa(i % 1000)), Value: payload})
		}
		if err := r.prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			return err
		}
	}
	return nil
}

// Consume receives n records as group, marking each one for the commit that
// runs every 5 s (the driver's default commit interval).
func (r *Raw) Consume(ctx context.Context, topic, group string, n int) error {
	// A group of its own: the port's consumer later joins group on another
	// topic, and must not wait for this member to rejoin a shared group.
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.seeds...),
		kgo.ConsumerGroup(group+"-raw"), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(kafka.DefaultFetchMaxWait),
		kgo.AutoCommitMarks(), kgo.AutoCommitInterval(kafka.DefaultCommitInterval))
	if err != nil {
		return err
	}
	// Closed by Close, outside the measured time, as the port's listener is.
	defer cl.Close()
	for got := 0; got < n; {
		fs := cl.PollRecords(ctx, pollMax)
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = errors.Join(ferr, err) })
		if ferr != nil {
			return ferr
		}
		fs.EachRecord(func(rec *kgo.Record) {
			cl.MarkCommitRecords(rec)
			got++
		})
	}
	return nil
}

// Close releases the clients.
func (r *Raw) Close() error {
	for _, cl := range r.cons {
		cl.Close()
	}
	if r.prod != nil {
		r.prod.Close()
	}
	return nil
}
