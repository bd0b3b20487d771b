package driver

import "strconv"

// Envelope header names: the one definition that the port and every adapter
// use. Adapters carry them unchanged.
const (
	HeaderType            = "msgx-type"
	HeaderRequestID       = "request-id"
	HeaderTenantID        = "tenant-id"
	HeaderCorrelationID   = "msgx-correlation-id"
	HeaderPartitionKey    = "msgx-partition-key"
	HeaderEventID         = "msgx-event-id"
	HeaderRedeliveryCount = "msgx-redelivery-count"

	// HeaderNotBefore holds the earliest delivery time in Unix milliseconds.
	HeaderNotBefore = "msgx-not-before"
	// HeaderForGroup restricts a requeued copy to the group that requeued it.
	HeaderForGroup = "msgx-for-group"
)

// CountRedelivery adds one to the redelivery count in h (allocated when
// nil): an adapter whose broker tells that a delivery was handed out before
// and not settled (a crash, a lost connection, a stop) counts that attempt.
func CountRedelivery(h map[string]string) map[string]string {
	if h == nil {
		h = make(map[string]string, 1)
	}
	n, _ := strconv.Atoi(h[HeaderRedeliveryCount])
	h[HeaderRedeliveryCount] = strconv.Itoa(max(n, 0) + 1)
	return h
}

// DeadLetterGroup is the group under which adapters keep a dead-letter
// topic's messages for a reader that subscribes later, on brokers that keep
// nothing for a topic without subscribers (RabbitMQ, MQTT, Pulsar): listen to
// the dead-letter topic in this group to read them. On brokers that retain a
// topic's messages for new groups (Kafka, NATS) any group reads them.
const DeadLetterGroup = "msgx-dead-letters"

// ControlHeaders are the headers the port uses to steer a message
// (redelivery count, not-before time, addressed group). They travel on the
// wire but never reach a handler, and a send never carries the sender's
// values of them.
var ControlHeaders = [...]string{HeaderRedeliveryCount, HeaderNotBefore, HeaderForGroup}
