package kafka

import (
	"encoding/binary"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/msgx/msgx/broker/driver"
)

// DefaultMaxMessageBytes is the producer's default limit on a record batch,
// and so on one message: Kafka's own default for the broker's
// message.max.bytes and a topic's max.message.bytes (1 MiB + 12 bytes), so
// that what the producer sends the broker takes. franz-go's default (1 000 012
// bytes) is smaller than the broker's; keeping it made a message the broker
// would take fail in the client.
const DefaultMaxMessageBytes = 1_048_588

// WithMaxMessageBytes sets the largest record batch the producer sends, and
// so the largest message (key, value, headers and the batch's framing; see
// MessageBytes), default DefaultMaxMessageBytes. Set it to the smallest
// max.message.bytes of the topics msgx sends to (the broker's
// message.max.bytes unless a topic overrides it): a larger one lets through
// messages the broker refuses, a smaller one refuses messages it would take.
// Consumers fetch at least this much per partition, so that every message a
// producer with this limit wrote can be read.
func WithMaxMessageBytes(n int32) Option { return func(c *config) { c.maxMsgBytes = n } }

// MaxMessageBytes implements driver.Limiter.
func (d *Driver) MaxMessageBytes() int { return int(d.cfg.maxMsgBytes) }

// MessageBytes implements driver.Limiter: the size of m as a record batch of
// its own, as franz-go measures it against ProducerBatchMaxBytes (the batch
// header and the record with its varint lengths): never less, at most a few
// bytes more.
func (d *Driver) MessageBytes(m *driver.Message) int { return MessageBytes(m) }

// MessageBytes is the size of m as a record batch of its own.
func MessageBytes(m *driver.Message) int {
	rec := 1 + 1 + 1 + // attributes, timestamp delta and offset delta (0 for a batch's first record)
		varintLen(len(m.Key)) + len(m.Key) +
		varintLen(len(m.Payload)) + len(m.Payload) +
		varintLen(len(m.Headers))
	for k, v := range m.Headers {
		rec += varintLen(len(k)) + len(k) + varintLen(len(v)) + len(v)
	}
	return batchOverhead + varintLen(rec) + rec
}

// batchOverhead is the record batch header as franz-go counts it against
// the limit before it knows the broker's produce version: 61 bytes and the
// 4 of the request's array length, the largest framing of the versions
// (once it knows a flexible version it counts a few bytes less).
const batchOverhead = 65

func varintLen(n int) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutVarint(b[:], int64(n))
}

// producerLimits are the producer options of the limit. A request carries
// one batch at least, so the client must write that much to a connection.
func (c *config) producerLimits() []kgo.Opt {
	return []kgo.Opt{kgo.ProducerBatchMaxBytes(c.maxMsgBytes), kgo.BrokerMaxWriteBytes(c.connectionBytes())}
}

// consumerLimits are the fetch options of the limit: a partition's share of
// a fetch and the whole fetch hold at least one message of the limit.
func (c *config) consumerLimits() []kgo.Opt {
	return []kgo.Opt{
		kgo.FetchMaxPartitionBytes(max(defaultFetchPartitionBytes, c.maxMsgBytes)),
		kgo.FetchMaxBytes(max(defaultFetchBytes, c.maxMsgBytes)),
		kgo.BrokerMaxReadBytes(c.connectionBytes()),
	}
}

// connectionBytes bounds one request or response on a connection: franz-go's
// default, or a message of the limit with room for a request's framing, up to
// franz-go's ceiling of 1 GiB.
func (c *config) connectionBytes() int32 {
	return min(maxConnectionBytes, max(defaultBrokerMaxBytes, c.maxMsgBytes+1<<20))
}

// MaxMessageBytesCeiling is the largest limit WithMaxMessageBytes takes
// (franz-go refuses larger batches).
const MaxMessageBytesCeiling = 1 << 30

const maxConnectionBytes = 1 << 30

// franz-go's defaults, kept where they are larger than the limit needs.
const (
	defaultBrokerMaxBytes      = 100 << 20
	defaultFetchBytes          = 50 << 20
	defaultFetchPartitionBytes = 1 << 20
)

var _ driver.Limiter = (*Driver)(nil)
