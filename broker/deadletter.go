package broker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/msgx/msgx/broker/driver"
)

// Headers of a dead-letter copy sent by reference, and of the source
// position the port's own dead letters carry.
const (
	// HeaderDeadPartition and HeaderDeadOffset are where the message was
	// consumed from, on brokers with log positions (Kafka): with
	// HeaderDeadTopic they find the original while the topic retains it.
	HeaderDeadPartition = "msgx-dead-partition"
	HeaderDeadOffset    = "msgx-dead-offset"
	// HeaderDeadPayloadOmitted is set on a copy sent by reference: the
	// payload is left out, and the value says why.
	HeaderDeadPayloadOmitted = "msgx-dead-payload-omitted"
	// HeaderDeadPayloadSize and HeaderDeadPayloadSHA256 are the left-out
	// payload's length in bytes and its SHA-256 (hex).
	HeaderDeadPayloadSize   = "msgx-dead-payload-size"
	HeaderDeadPayloadSHA256 = "msgx-dead-payload-sha256"
	// HeaderDeadHeadersOmitted counts the original's own headers (those not
	// named msgx-*) left out of a copy that did not fit even without its
	// payload.
	HeaderDeadHeadersOmitted = "msgx-dead-headers-omitted"
)

// MessageBytes returns the size of m as the adapter counts it against its
// limit, and the limit: the largest message the adapter sends (0 and 0 when
// the adapter declares no limit, driver.Limiter). A send over the limit is
// refused, so callers that store messages for a later send (an outbox) check
// them against it first.
func (b *Broker) MessageBytes(m *Message) (size, limit int) {
	lim, ok := b.drv.(driver.Limiter)
	if !ok {
		return 0, 0
	}
	return lim.MessageBytes((*driver.Message)(m)), lim.MaxMessageBytes()
}

// ByReference returns the dead-letter copy of m without its payload: every
// header of m, plus the payload's size and SHA-256 and why it was left out.
// With the source's topic, partition and offset among m's headers, the copy
// still finds the original. A contract error is never retried, so a copy
// that cannot go whole goes like this instead of not at all.
func ByReference(m *Message, why string) *Message {
	h := make(map[string]string, len(m.Headers)+3)
	for k, v := range m.Headers {
		h[k] = v
	}
	sum := sha256.Sum256(m.Payload)
	h[HeaderDeadPayloadOmitted] = why
	h[HeaderDeadPayloadSize] = strconv.Itoa(len(m.Payload))
	h[HeaderDeadPayloadSHA256] = hex.EncodeToString(sum[:])
	return &Message{Key: m.Key, Headers: h}
}

// byReference is ByReference, and when even that exceeds the adapter's
// limit, without the original's own headers too (the msgx-* ones, which say
// where it came from and why it is dead, stay).
func (b *Broker) byReference(m *Message, why string) *Message {
	ref := ByReference(m, why)
	if size, limit := b.MessageBytes(ref); limit == 0 || size <= limit {
		return ref
	}
	dropped := 0
	for k := range ref.Headers {
		if !strings.HasPrefix(k, "msgx-") {
			delete(ref.Headers, k)
			dropped++
		}
	}
	ref.Headers[HeaderDeadHeadersOmitted] = strconv.Itoa(dropped)
	return ref
}

// fitDeadLetter returns m, or its copy by reference when m exceeds the
// adapter's limit.
func (b *Broker) fitDeadLetter(m *Message) (*Message, bool) {
	size, limit := b.MessageBytes(m)
	if limit == 0 || size <= limit {
		return m, false
	}
	return b.byReference(m, fmt.Sprintf("the copy of %d bytes exceeds the adapter's limit of %d", size, limit)), true
}

// SendDeadLetter sends dead-letter copies to topic, confirmed, and returns
// how many went by reference (see ByReference): those that exceed the
// adapter's limit, and those the broker refuses (Rejected: its or the
// topic's limit is below the adapter's). A refused send is tried again one
// message at a time, so only the copies that do not fit lose their payload
// (the others may then be written twice: dead letters are at least once).
// Any other failure is returned as it is; the caller tries again later (an
// Unavailable broker is the broker's state: wait for it).
//
// Every copy that goes by reference is logged and counted
// (msgx_broker_dead_letter_by_reference_total).
func (b *Broker) SendDeadLetter(ctx context.Context, topic string, msgs ...*Message) (byRef int, err error) {
	wire := make([]*Message, len(msgs))
	ref := make([]bool, len(msgs))
	for i, m := range msgs {
		wire[i], ref[i] = b.fitDeadLetter(m)
	}
	err = b.SendConfirmed(ctx, topic, wire...)
	if err != nil && IsRejected(err) {
		err = nil
		for i := range wire {
			if err = b.SendConfirmed(ctx, topic, wire[i]); err == nil {
				continue
			}
			if ref[i] || !IsRejected(err) {
				break
			}
			wire[i], ref[i] = b.byReference(wire[i], "refused by the broker: "+truncate(err.Error(), 512)), true
			if err = b.SendConfirmed(ctx, topic, wire[i]); err != nil {
				break
			}
		}
	}
	if err != nil {
		return 0, err
	}
	for i, r := range ref {
		if r {
			byRef++
			b.deadByReference(topic, wire[i])
		}
	}
	return byRef, nil
}

// deadByReference logs and counts a dead-letter copy sent by reference.
func (b *Broker) deadByReference(topic string, ref *Message) {
	b.met.deadByRef.WithLabelValues(topic).Inc()
	b.opts.logger.Warn("dead-letter copy sent by reference, without its payload", "adapter", b.name, "dlq_topic", topic,
		"source_topic", ref.Headers[HeaderDeadTopic], "source_partition", ref.Headers[HeaderDeadPartition],
		"source_offset", ref.Headers[HeaderDeadOffset], "payload_bytes", ref.Headers[HeaderDeadPayloadSize],
		"payload_sha256", ref.Headers[HeaderDeadPayloadSHA256], "reason", ref.Headers[HeaderDeadPayloadOmitted])
}
