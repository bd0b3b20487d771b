package rabbitmq

import (
	"context"
	"errors"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/msgx/msgx/broker/driver"
)

// classify gives a publish error its class (see docs/adapters/rabbitmq.md).
func classify(err error) error {
	return driver.ClassifyBy(err, errorCode)
}

func errorCode(err error) driver.ErrorCode {
	switch {
	case errors.Is(err, ErrReturned), errors.Is(err, ErrNacked):
		return driver.Rejected
	case errors.Is(err, ErrClosed), errors.Is(err, context.DeadlineExceeded):
		return driver.Unavailable
	}
	var aerr *amqp.Error
	if errors.As(err, &aerr) {
		switch aerr.Code {
		case amqp.ContentTooLarge, // 311
			amqp.NoRoute,            // 312
			amqp.NoConsumers,        // 313
			amqp.AccessRefused,      // 403: not authorised for the exchange
			amqp.NotFound,           // 404: no such exchange
			amqp.PreconditionFailed: // 406: over the broker's max_message_size, among others
			return driver.Rejected
		case amqp.ConnectionForced: // 320: the broker is shutting down or closed the connection
			return driver.Unavailable
		case amqp.ChannelError: // 504: amqp.ErrClosed, the channel or connection is not open
			return driver.Unavailable
		case amqp.FrameError:
			// The client reports a lost connection (read or write failed)
			// as a frame error of its own; one the server sends is a
			// protocol error.
			if !aerr.Server {
				return driver.Unavailable
			}
		}
	}
	if driver.Disconnected(err) {
		return driver.Unavailable
	}
	return driver.Unknown
}
