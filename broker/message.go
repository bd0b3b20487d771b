package broker

import (
	"strconv"
	"time"

	"github.com/msgx/msgx/broker/driver"
)

// Envelope header names (defined once, in the driver package). Every adapter
// carries them unchanged.
const (
	HeaderType          = driver.HeaderType
	HeaderRequestID     = driver.HeaderRequestID
	HeaderTenantID      = driver.HeaderTenantID
	HeaderCorrelationID = driver.HeaderCorrelationID
	HeaderPartitionKey  = driver.HeaderPartitionKey
	HeaderEventID       = driver.HeaderEventID

	// Control headers: the port steers a message with them on the wire, but a
	// handler never sees them (Delivery.RedeliveryCount carries the count) and
	// a send drops the sender's values, so a forwarded delivery cannot carry
	// them by accident.

	// HeaderRedeliveryCount carries the redelivery count.
	HeaderRedeliveryCount = driver.HeaderRedeliveryCount
	// HeaderNotBefore holds the earliest delivery time in Unix milliseconds; the
	// port's local scheduler holds a delivery until then.
	HeaderNotBefore = driver.HeaderNotBefore
	// HeaderForGroup restricts a requeued copy to the group that requeued it.
	// Every adapter requeues to a destination of the group's own; the header
	// still keeps a copy that reaches another group (one requeued to a shared
	// topic by an older version, or moved there by hand) from running twice.
	HeaderForGroup = driver.HeaderForGroup

	// Dead-letter reason headers.
	HeaderDeadClass     = "msgx-dead-class"  // poison | exhausted
	HeaderDeadReason    = "msgx-dead-reason" // the handler's error text
	HeaderDeadTopic     = "msgx-dead-topic"  // where the message was consumed from
	HeaderDeadGroup     = "msgx-dead-group"
	HeaderDeadAttempts  = "msgx-dead-attempts"
	HeaderDeadTimestamp = "msgx-dead-at" // RFC 3339
)

// DeadLetterGroup is the group to listen in to read a dead-letter topic's
// messages: on brokers that keep nothing for a topic without subscribers
// (RabbitMQ, MQTT, Pulsar) the adapters keep dead letters under it until
// they are read.
const DeadLetterGroup = driver.DeadLetterGroup

// Message is what business code sends and receives.
type Message struct {
	// Key is the partition key; messages with the same key keep their order on
	// brokers that declare PerKeyOrder.
	Key string
	// Payload is opaque bytes.
	Payload []byte
	// Headers carry the envelope (see the Header constants) and anything else.
	Headers map[string]string
}

// Header returns the named header or "".
func (m *Message) Header(name string) string {
	if m == nil || m.Headers == nil {
		return ""
	}
	return m.Headers[name]
}

// SetHeader sets a header, allocating the map if needed.
func (m *Message) SetHeader(name, value string) {
	if m.Headers == nil {
		m.Headers = make(map[string]string, 4)
	}
	m.Headers[name] = value
}

// Delivery is a received message as the handler sees it. Handlers return an
// error (or nil); they never settle a delivery themselves.
type Delivery struct {
	Message
	// Topic and Group the delivery was consumed from.
	Topic, Group string
	// RedeliveryCount is the number of earlier handler attempts at this
	// message that did not succeed: 0 on the first delivery, one more per
	// requeue, and, where the adapter declares CountsRedeliveries, one more
	// per attempt that ended without a settlement (a crash, a lost
	// connection, a stop). The retry policy counts attempts as
	// RedeliveryCount + 1.
	RedeliveryCount int

	notBefore int64  // Unix ms of the not-before control header, 0 if none
	forGroup  string // the for-group control header
	drv       driver.Delivery
	l         *Listener // for the handler's context, see deliveryCtx
	settled   settleOnce
	cohort    *cohort // while the port holds it unsettled, see unsettled
}

// initDelivery fills out (allocated by the caller, often in bulk) from d and
// takes the control headers out of the headers the handler sees.
func initDelivery(out *Delivery, d driver.Delivery, l *Listener) {
	m := d.Message()
	out.Message, out.Topic, out.Group, out.drv, out.l = Message(*m), l.sub.Topic, l.sub.Group, d, l
	h := m.Headers
	if len(h) == 0 {
		return
	}
	if s, ok := h[HeaderRedeliveryCount]; ok {
		if n, err := strconv.Atoi(s); err == nil && n > 0 {
			out.RedeliveryCount = n
		}
		delete(h, HeaderRedeliveryCount)
	}
	if s, ok := h[HeaderNotBefore]; ok {
		if ms, err := strconv.ParseInt(s, 10, 64); err == nil && ms > 0 {
			out.notBefore = ms
		}
		delete(h, HeaderNotBefore)
	}
	if g, ok := h[HeaderForGroup]; ok {
		out.forGroup = g
		delete(h, HeaderForGroup)
	}
}

// hasControlHeaders reports whether h holds any control header.
func hasControlHeaders(h map[string]string) bool {
	if len(h) == 0 {
		return false
	}
	for _, name := range driver.ControlHeaders {
		if _, ok := h[name]; ok {
			return true
		}
	}
	return false
}

// notBeforeTime returns the earliest delivery time the envelope asks for.
func (d *Delivery) notBeforeTime() (time.Time, bool) {
	if d.notBefore == 0 {
		return time.Time{}, false
	}
	return time.UnixMilli(d.notBefore), true
}

// notBeforeHeader encodes t in whole milliseconds, rounded up so that a delivery
// is never released before t.
func notBeforeHeader(t time.Time) string {
	return strconv.FormatInt((t.UnixNano()+int64(time.Millisecond)-1)/int64(time.Millisecond), 10)
}

// copyForResend returns the wire message with a fresh header map that the port
// may change without touching the delivery the handler saw.
func (d *Delivery) copyForResend() *driver.Message {
	h := make(map[string]string, len(d.Headers)+4)
	for k, v := range d.Headers {
		h[k] = v
	}
	return &driver.Message{Key: d.Key, Payload: d.Payload, Headers: h}
}
