package kafka_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/broker/kafka"
)

// incompressible returns n random hex bytes: the producer's compression
// leaves them as large on the wire.
func incompressible(n int) []byte {
	b := make([]byte, (n+1)/2)
	_, _ = rand.Read(b)
	return []byte(hex.EncodeToString(b)[:n])
}

// The producer's limit is Kafka's default message.max.bytes, not franz-go's
// smaller default: a 1 010 100-byte message, which a topic with the default
// max.message.bytes takes, is published, and read back by a consumer. The
// driver counts a message against the limit as franz-go does: one of
// exactly the limit goes, one a few bytes over it is refused before the send.
func TestMaxMessageBytes(t *testing.T) {
	c := newCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	topic := "limit-" + randomSuffix()
	if err := c.createTopic(ctx, topic, 1); err != nil {
		t.Fatal(err)
	}
	d := c.started(t, ctx)
	if got := d.MaxMessageBytes(); got != 1_048_588 {
		t.Fatalf("default limit %d", got)
	}
	big := &driver.Message{Key: "k", Payload: incompressible(1_010_100), Headers: map[string]string{"h": "v"}}
	if err := d.Publish(ctx, topic, []*driver.Message{big}); err != nil {
		t.Fatalf("publish of 1 010 100 bytes: %v", err)
	}
	sub, err := d.Subscribe(ctx, driver.SubscriptionSpec{Topic: topic, Group: "g-" + randomSuffix(), Prefetch: 4})
	if err != nil {
		t.Fatal(err)
	}
	ds, err := sub.Receive(ctx, 1)
	if err != nil || len(ds) != 1 || len(ds[0].Message().Payload) != 1_010_100 {
		t.Fatalf("received %d deliveries: %v", len(ds), err)
	}

	const limit = 600_000
	small := c.started(t, ctx, kafka.WithMaxMessageBytes(limit))
	m := &driver.Message{Key: "key", Headers: map[string]string{"a": "b", "msgx-x": "y"}}
	for n := limit; small.MessageBytes(m) != limit; {
		// The varint lengths grow with the payload: adjust until exact.
		n += limit - small.MessageBytes(m)
		m.Payload = incompressible(n)
	}
	if n := small.MessageBytes(m); n != limit {
		t.Fatalf("sized %d, want %d", n, limit)
	}
	if err := small.Publish(ctx, topic, []*driver.Message{m}); err != nil {
		t.Fatalf("a message of exactly the limit: %v", err)
	}
	// Once the client knows the broker's (flexible) produce version it
	// counts a few bytes less of framing than before: 8 bytes over is over.
	m.Payload = append(m.Payload, incompressible(8)...)
	if err := small.Publish(ctx, topic, []*driver.Message{m}); !errors.Is(err, kerr.MessageTooLarge) {
		t.Fatalf("a message 8 bytes over the limit: %v", err)
	}
}
