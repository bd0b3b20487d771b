// Package driver defines the narrow interface each broker adapter implements.
// Business code never sees it: it uses the portable *broker.Broker, which owns
// every behaviour that is the same for all brokers (disposition, retry policy,
// delay, concurrency, per-key ordering, logging, metrics). An adapter owns only
// topology, its client's lifecycle and the native acknowledgement.
package driver

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// Message is the wire form of a message as it travels through a driver.
type Message struct {
	// Key is the partition key; it may be empty.
	Key string
	// Payload is opaque bytes; drivers must carry any byte sequence unchanged.
	Payload []byte
	// Headers carry the envelope. Drivers carry every header unchanged.
	Headers map[string]string
}

// Capabilities is what an adapter declares about its broker at start. The
// portable layer and the conformance suite act on the declaration only.
type Capabilities struct {
	// Persistent: messages published while no consumer runs are kept for it.
	Persistent bool
	// PerKeyOrder: messages with the same key are delivered in publish order.
	PerKeyOrder bool
	// OffsetCommit: settlement is a committed position (Kafka): the position must
	// never pass an unfinished message.
	OffsetCommit bool
	// Batch: the broker hands out native batches, so batch listeners are allowed.
	Batch bool
	// LoadBalance: consumers of one group share the messages.
	LoadBalance bool
	// Broadcast: each group receives every message.
	Broadcast bool
	// NativeDelay: the broker delays delivery itself. When false the port holds
	// delayed messages in its local scheduler.
	NativeDelay bool
	// SubscriptionExpiry: a per-instance subscription disappears after a TTL.
	SubscriptionExpiry bool
	// CountsRedeliveries: the broker tells a delivery that was handed out
	// before and not settled (a crash, a lost connection, a stop), so the
	// redelivery count includes attempts that ended without a settlement.
	// Without it the count is the number of failed attempts the port settled
	// (requeues), and a message that kills its consumer every time is never
	// dead-lettered.
	CountsRedeliveries bool
	// NativeKey: the broker carries the key in a field of its own, so the port
	// does not mirror it into the msgx-partition-key header (handlers read
	// Delivery.Key; a header the sender set explicitly still travels).
	NativeKey bool
}

// SubscriptionSpec says what to consume.
type SubscriptionSpec struct {
	// Topic is the logical destination messages were sent to.
	Topic string
	// Group names the consumer group: consumers of one group share the messages,
	// distinct groups each receive all of them.
	Group string
	// DeadLetterTopic is where poison and exhausted messages go.
	DeadLetterTopic string
	// Expiry, when positive, asks for a per-instance subscription that the broker
	// removes after it has been unused for that long (SubscriptionExpiry).
	Expiry time.Duration
	// Prefetch bounds the deliveries the broker may hand over unsettled.
	Prefetch int
}

// Broker is one adapter instance: a client connection plus its topology.
type Broker interface {
	// Capabilities is valid after Start.
	Capabilities() Capabilities
	// Start connects. A connection failure is returned, never swallowed.
	Start(ctx context.Context) error
	// Publish sends msgs to topic and returns only after the broker confirmed
	// every one of them. Any unconfirmed message makes it return an error.
	Publish(ctx context.Context, topic string, msgs []*Message) error
	// Subscribe starts consuming.
	Subscribe(ctx context.Context, spec SubscriptionSpec) (Subscription, error)
	// Errors reports asynchronous failures (lost connection, failed reconnect).
	// It may return nil when the driver has none to report.
	Errors() <-chan error
	// Close releases the client. Unsettled deliveries stay unsettled.
	Close(ctx context.Context) error
}

// DelayedPublisher is implemented by drivers whose broker can hold a
// message back itself: PublishDelayed is Publish with delivery no earlier
// than delay from now, the wait done by the broker, so that no consumer
// holds the message meanwhile. A broker that honours the delay only for some
// subscriptions may deliver early to others; the port's not-before header
// (which it still sets) makes those wait in the port.
type DelayedPublisher interface {
	PublishDelayed(ctx context.Context, topic string, msgs []*Message, delay time.Duration) error
}

// Subscription hands out deliveries.
type Subscription interface {
	// Receive blocks until at least one delivery is ready and returns at most max
	// of them. It returns ctx.Err() when ctx ends and ErrClosed after Close.
	Receive(ctx context.Context, max int) ([]Delivery, error)
	// Close stops consuming. Deliveries not yet settled are not settled: the
	// broker redelivers them (to this group) later.
	Close(ctx context.Context) error
}

// Delivery is one received message awaiting exactly one settlement. The portable
// layer guarantees it calls at most one of Ack, Requeue and DeadLetter, once.
type Delivery interface {
	// Message returns the message. Drivers that count redeliveries natively
	// report the count in the redelivery-count header.
	Message() *Message
	// Ack settles the delivery as done.
	Ack(ctx context.Context) error
	// Requeue makes msg (the original with the port's updated envelope headers:
	// redelivery count and not-before time) deliverable again to this subscription's
	// group, and settles this delivery. On error nothing is settled.
	Requeue(ctx context.Context, msg *Message, delay time.Duration) error
	// DeadLetter publishes msg (the original plus reason headers) to the
	// dead-letter destination with confirmation and then settles this delivery.
	// If the dead-letter publish fails it returns the error and does not settle.
	DeadLetter(ctx context.Context, msg *Message) error
	// Release gives the delivery back unsettled so that the broker hands it
	// to this group again after about delay, without waiting for a restart:
	// the port calls it when a settlement kept failing, so that no delivery
	// holds a prefetch slot for ever. It must not come back ahead of the
	// messages behind it for ever (a poison message at the head of a queue
	// would starve the rest). Adapters use the broker's own give-back (a
	// delayed nack, a rewind of the partition) or re-publish msg (the
	// original with the port's routing headers, the redelivery count
	// unchanged) to the group and then settle the delivery.
	Release(ctx context.Context, msg *Message, delay time.Duration) error
}

// ErrNotStarted is wrapped by every adapter's error for an operation on a
// driver that is not running.
var ErrNotStarted = errors.New("not started")

// ErrClosed is returned by Receive after Close.
var ErrClosed = errors.New("subscription closed")

// ErrNotHeld is wrapped by a settlement of a delivery this consumer no longer
// holds (its connection, channel or partition is gone): the broker redelivers
// it anyway, so there is nothing left to settle or release.
var ErrNotHeld = errors.New("delivery no longer held by this consumer; the broker redelivers it")

// ErrSettled is returned by a second settlement of a delivery: it does
// nothing (no second acknowledgement, no second dead letter).
var ErrSettled = errors.New("delivery already settled")

// SettleGuard lets an adapter's delivery refuse a second settlement. Check
// before a settlement's first effect (a dead-letter publish), Claim right
// before the acknowledgement itself.
type SettleGuard struct{ done atomic.Bool }

// Check returns ErrSettled once the delivery was claimed.
func (g *SettleGuard) Check() error {
	if g.done.Load() {
		return ErrSettled
	}
	return nil
}

// Claim marks the delivery settled; it returns ErrSettled if it already was.
func (g *SettleGuard) Claim() error {
	if !g.done.CompareAndSwap(false, true) {
		return ErrSettled
	}
	return nil
}
