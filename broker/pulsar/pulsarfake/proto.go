package pulsarfake

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// Command types of BaseCommand.Type in PulsarApi.proto. In BaseCommand the
// sub-command of type N is carried in field number N.
const (
	typeConnect            = 2
	typeConnected          = 3
	typeSubscribe          = 4
	typeProducer           = 5
	typeSend               = 6
	typeSendReceipt        = 7
	typeSendError          = 8
	typeMessage            = 9
	typeAck                = 10
	typeFlow               = 11
	typeUnsubscribe        = 12
	typeSuccess            = 13
	typeError              = 14
	typeCloseProducer      = 15
	typeCloseConsumer      = 16
	typeProducerSuccess    = 17
	typePing               = 18
	typePong               = 19
	typeRedeliver          = 20
	typePartitionedMeta    = 21
	typePartitionedMetaRes = 22
	typeLookup             = 23
	typeLookupRes          = 24
	typeGetLastMessageID   = 29
	typeGetLastMessageRes  = 30
	typeAckResponse        = 38
)

// typeNames names the command types for logs.
var typeNames = map[uint64]string{
	2: "CONNECT", 3: "CONNECTED", 4: "SUBSCRIBE", 5: "PRODUCER", 6: "SEND", 7: "SEND_RECEIPT",
	8: "SEND_ERROR", 9: "MESSAGE", 10: "ACK", 11: "FLOW", 12: "UNSUBSCRIBE", 13: "SUCCESS",
	14: "ERROR", 15: "CLOSE_PRODUCER", 16: "CLOSE_CONSUMER", 17: "PRODUCER_SUCCESS", 18: "PING",
	19: "PONG", 20: "REDELIVER_UNACKNOWLEDGED_MESSAGES", 21: "PARTITIONED_METADATA",
	22: "PARTITIONED_METADATA_RESPONSE", 23: "LOOKUP", 24: "LOOKUP_RESPONSE", 25: "CONSUMER_STATS",
	26: "CONSUMER_STATS_RESPONSE", 27: "REACHED_END_OF_TOPIC", 28: "SEEK", 29: "GET_LAST_MESSAGE_ID",
	30: "GET_LAST_MESSAGE_ID_RESPONSE", 31: "ACTIVE_CONSUMER_CHANGE", 32: "GET_TOPICS_OF_NAMESPACE",
	33: "GET_TOPICS_OF_NAMESPACE_RESPONSE", 34: "GET_SCHEMA", 35: "GET_SCHEMA_RESPONSE",
	36: "AUTH_CHALLENGE", 37: "AUTH_RESPONSE", 38: "ACK_RESPONSE", 39: "GET_OR_CREATE_SCHEMA",
	40: "GET_OR_CREATE_SCHEMA_RESPONSE", 50: "NEW_TXN", 52: "ADD_PARTITION_TO_TXN",
	54: "ADD_SUBSCRIPTION_TO_TXN", 56: "END_TXN", 58: "END_TXN_ON_PARTITION",
	60: "END_TXN_ON_SUBSCRIPTION", 62: "TC_CLIENT_CONNECT_REQUEST", 64: "WATCH_TOPIC_LIST",
	67: "WATCH_TOPIC_LIST_CLOSE",
}

func typeName(t uint64) string {
	if n, ok := typeNames[t]; ok {
		return n
	}
	return fmt.Sprintf("type(%d)", t)
}

// requestIDField gives, for requests the fake does not model, the field number
// of their request_id, so that it can still answer them with an ERROR.
var requestIDField = map[uint64]protowire.Number{
	25: 1, // CONSUMER_STATS
	28: 2, // SEEK
	32: 1, // GET_TOPICS_OF_NAMESPACE
	34: 1, // GET_SCHEMA
	39: 1, // GET_OR_CREATE_SCHEMA
	50: 1, // NEW_TXN
	52: 1, // ADD_PARTITION_TO_TXN
	54: 1, // ADD_SUBSCRIPTION_TO_TXN
	56: 1, // END_TXN
	62: 1, // TC_CLIENT_CONNECT_REQUEST
	64: 1, // WATCH_TOPIC_LIST
	67: 1, // WATCH_TOPIC_LIST_CLOSE
}

// ServerError values of PulsarApi.proto used by the fake.
const (
	errUnknown            = 0
	errAuthorization      = 4
	errConsumerBusy       = 5
	errChecksumCode       = 9
	errTopicNotFound      = 11
	errSubscriptionNotFnd = 12
	errConsumerNotFound   = 13
	errNotAllowed         = 22
)

// Subscription types (CommandSubscribe.SubType).
const (
	subExclusive = 0
	subShared    = 1
	subFailover  = 2
	subKeyShared = 3
)

// field is one decoded protobuf field: v for varint and fixed types, b for
// length-delimited ones.
type field struct {
	num protowire.Number
	v   uint64
	b   []byte
}

// fields is a decoded protobuf message. The fake reads only the few fields it
// needs, so a flat list is simpler than generated types.
type fields []field

var errMalformed = errors.New("pulsarfake: malformed protobuf")

func decode(b []byte) (fields, error) {
	var fs fields
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, errMalformed
		}
		b = b[n:]
		f := field{num: num}
		switch typ {
		case protowire.VarintType:
			f.v, n = protowire.ConsumeVarint(b)
		case protowire.Fixed32Type:
			var v uint32
			v, n = protowire.ConsumeFixed32(b)
			f.v = uint64(v)
		case protowire.Fixed64Type:
			f.v, n = protowire.ConsumeFixed64(b)
		case protowire.BytesType:
			f.b, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return nil, errMalformed
		}
		b = b[n:]
		fs = append(fs, f)
	}
	return fs, nil
}

// uint returns the last value of a scalar field (protobuf's "last one wins").
func (fs fields) uint(num protowire.Number) (uint64, bool) {
	for i := len(fs) - 1; i >= 0; i-- {
		if fs[i].num == num {
			return fs[i].v, true
		}
	}
	return 0, false
}

func (fs fields) u64(num protowire.Number) uint64 {
	v, _ := fs.uint(num)
	return v
}

func (fs fields) bytes(num protowire.Number) []byte {
	for i := len(fs) - 1; i >= 0; i-- {
		if fs[i].num == num {
			return fs[i].b
		}
	}
	return nil
}

func (fs fields) str(num protowire.Number) string { return string(fs.bytes(num)) }

func (fs fields) boolean(num protowire.Number) bool { return fs.u64(num) != 0 }

// all returns every occurrence of a repeated length-delimited field.
func (fs fields) all(num protowire.Number) [][]byte {
	var out [][]byte
	for _, f := range fs {
		if f.num == num {
			out = append(out, f.b)
		}
	}
	return out
}

// sub decodes a nested message field; a missing field decodes as empty.
func (fs fields) sub(num protowire.Number) (fields, error) {
	return decode(fs.bytes(num))
}

// msg builds a protobuf message.
type msg []byte

func (m msg) uint(num protowire.Number, v uint64) msg {
	m = protowire.AppendTag(m, num, protowire.VarintType)
	return protowire.AppendVarint(m, v)
}

// int encodes a signed int32/int64 field the way protobuf does (two's complement).
func (m msg) int(num protowire.Number, v int64) msg { return m.uint(num, uint64(v)) }

func (m msg) boolean(num protowire.Number, v bool) msg {
	var x uint64
	if v {
		x = 1
	}
	return m.uint(num, x)
}

func (m msg) bytes(num protowire.Number, b []byte) msg {
	m = protowire.AppendTag(m, num, protowire.BytesType)
	return protowire.AppendBytes(m, b)
}

func (m msg) str(num protowire.Number, s string) msg {
	m = protowire.AppendTag(m, num, protowire.BytesType)
	return protowire.AppendString(m, s)
}

func (m msg) sub(num protowire.Number, s msg) msg { return m.bytes(num, s) }

// baseCommand wraps a sub-command in a BaseCommand of type t.
func baseCommand(t uint64, sub msg) msg {
	return msg(nil).uint(1, t).sub(protowire.Number(t), sub)
}

// messageIDData encodes MessageIdData{ledgerId, entryId}.
func messageIDData(ledger, entry uint64) msg {
	return msg(nil).uint(1, ledger).uint(2, entry)
}

// messageID is a decoded MessageIdData.
type messageID struct {
	ledger, entry uint64
	// ackSet is set when the client acknowledges part of a batch.
	ackSet bool
}

func decodeMessageID(b []byte) (messageID, error) {
	fs, err := decode(b)
	if err != nil {
		return messageID{}, err
	}
	return messageID{ledger: fs.u64(1), entry: fs.u64(2), ackSet: hasField(fs, 5)}, nil
}

func hasField(fs fields, num protowire.Number) bool {
	for _, f := range fs {
		if f.num == num {
			return true
		}
	}
	return false
}
