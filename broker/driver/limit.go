package driver

// Limiter is implemented by an adapter whose client refuses messages above a
// size: the portable layer then knows before a send whether a message can
// go at all, and callers can size what they store for later sending (an
// outbox event) against it.
type Limiter interface {
	// MaxMessageBytes is the largest message the adapter publishes, as
	// MessageBytes counts it. The broker's or a topic's own limit may be
	// lower; a send over it is then refused by the broker (Rejected).
	MaxMessageBytes() int
	// MessageBytes is the size of m as the limit counts it: key, payload,
	// headers and the adapter's framing.
	MessageBytes(m *Message) int
}
