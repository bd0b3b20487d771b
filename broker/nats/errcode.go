package nats

import (
	"context"
	"errors"

	natsio "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgx/msgx/broker/driver"
)

// unavailable are nats.go's errors for a connection that cannot carry a
// publish now, or a server that did not answer in time.
var unavailable = []error{
	natsio.ErrConnectionClosed,
	natsio.ErrConnectionDraining,
	natsio.ErrConnectionReconnecting,
	natsio.ErrDisconnected,
	natsio.ErrNoServers,
	natsio.ErrStaleConnection,
	natsio.ErrReconnectBufExceeded,
	natsio.ErrTimeout,
	context.DeadlineExceeded,
}

// rejected are its errors for a message the server refuses and will refuse
// again. No responders (ErrNoStreamResponse once jetstream has retried it
// over a leadership change; ErrNoResponders from an asynchronous publish)
// means no stream captures the subject, and Publish never creates one: the
// destination does not exist, as an unknown Kafka topic does not.
var rejected = []error{
	natsio.ErrMaxPayload,
	natsio.ErrBadSubject,
	natsio.ErrInvalidMsg,
	natsio.ErrHeadersNotSupported,
	natsio.ErrPermissionViolation,
	natsio.ErrNoResponders,
	jetstream.ErrNoStreamResponse,
	jetstream.ErrStreamMessageExceedsMaximum,
	jetstream.ErrMaxBytesExceeded,
}

// classify gives a publish error its class (see docs/adapters/nats.md).
func classify(err error) error {
	return driver.ClassifyBy(err, errorCode)
}

func errorCode(err error) driver.ErrorCode {
	if driver.IsAny(err, rejected) {
		return driver.Rejected
	}
	if driver.IsAny(err, unavailable) {
		return driver.Unavailable
	}
	// A PubAck with an error: 4xx, the stream refused the message (sealed,
	// too large, ...); 503, JetStream cannot take it now.
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch {
		case apiErr.Code == 503:
			return driver.Unavailable
		case apiErr.Code >= 400 && apiErr.Code < 500:
			return driver.Rejected
		}
	}
	if driver.Disconnected(err) {
		return driver.Unavailable
	}
	return driver.Unknown
}
