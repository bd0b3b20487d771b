package brokertest

import (
	"bytes"
	"context"
	"testing"

	"github.com/msgx/msgx/broker/driver"
)

// RoundTrip starts d, sends one message through it and receives it back
// (a subscription of its own, made before the send), then closes d: the
// check that a driver built from configuration (TLS, credentials) really
// talks to its broker. A start failure fails the test with the error.
func RoundTrip(t testing.TB, d driver.Broker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout())
	defer cancel()
	if err := d.Start(ctx); err != nil {
		t.Fatalf("start: %v", err)
	}
	defer func() { _ = d.Close(context.Background()) }()
	topic := uniqueName(t, "roundtrip")
	sub, err := d.Subscribe(ctx, driver.SubscriptionSpec{Topic: topic, Group: topic + "-g", DeadLetterTopic: topic + "-dlq", Prefetch: 1})
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	defer func() { _ = sub.Close(context.Background()) }()
	want := []byte("over TLS")
	if err := d.Publish(ctx, topic, []*driver.Message{{Key: "k", Payload: want, Headers: map[string]string{}}}); err != nil {
		t.Fatalf("publish: %v", err)
	}
	got, err := sub.Receive(ctx, 1)
	if err != nil {
		t.Fatalf("receive: %v", err)
	}
	if len(got) != 1 || !bytes.Equal(got[0].Message().Payload, want) {
		t.Fatalf("received %d messages, want one holding %q", len(got), want)
	}
	if err := got[0].Ack(ctx); err != nil {
		t.Fatalf("ack: %v", err)
	}
}
