package pulsar

import (
	"context"
	"errors"
	"strings"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/msgx/msgx/broker/driver"
)

// classify gives a publish error its class (see docs/adapters/pulsar.md).
func classify(err error) error {
	return driver.ClassifyBy(err, errorCode)
}

func errorCode(err error) driver.ErrorCode {
	var perr *pulsar.Error
	if errors.As(err, &perr) {
		switch perr.Result() {
		case pulsar.MessageTooBig,
			pulsar.InvalidMessage, // also metadata over the size limit
			pulsar.InvalidTopicName,
			pulsar.TopicNotFound,
			pulsar.TopicTerminated,
			pulsar.AuthorizationError,
			pulsar.SchemaFailure,
			// The topic's backlog quota refuses producers until its
			// subscriptions catch up: the message is refused, whatever the
			// state of the broker.
			pulsar.ProducerBlockedQuotaExceededError,
			pulsar.ProducerBlockedQuotaExceededException:
			return driver.Rejected
		case pulsar.TimeoutError, // send timeout, send context expired
			pulsar.ConnectError,
			pulsar.ReadError,
			pulsar.LookupError,
			pulsar.NotConnectedError,
			pulsar.ServiceUnitNotReady,
			pulsar.TooManyLookupRequestException,
			pulsar.BrokerMetadataError,
			pulsar.BrokerPersistenceError,
			pulsar.ProducerClosed,
			pulsar.AlreadyClosedError:
			return driver.Unavailable
		}
	}
	switch serverError(err) {
	case "AuthorizationError", "TopicNotFound", "TopicTerminatedError", "InvalidTopicName",
		"IncompatibleSchema", "NotAllowedError",
		"ProducerBlockedQuotaExceededError", "ProducerBlockedQuotaExceededException":
		return driver.Rejected
	case "ServiceNotReady", "MetadataError", "PersistenceError", "TooManyRequests":
		return driver.Unavailable
	}
	switch {
	case errors.Is(err, ErrClosed),
		errors.Is(err, driver.ErrNotStarted),
		errors.Is(err, context.DeadlineExceeded),
		driver.Disconnected(err):
		return driver.Unavailable
	}
	return driver.Unknown
}

// serverError is the name of the broker's error in an answer to a request
// (creating a producer, a lookup), or "". The client passes those on only as
// text, "server error: <name>: <message>", and matches the names in that
// text itself; so does this.
func serverError(err error) string {
	const prefix = "server error: "
	msg := err.Error()
	i := strings.Index(msg, prefix)
	if i < 0 {
		return ""
	}
	name, _, _ := strings.Cut(msg[i+len(prefix):], ":")
	return name
}
