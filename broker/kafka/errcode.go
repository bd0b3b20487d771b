package kafka

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/msgx/msgx/broker/driver"
)

// rejected are the Kafka error codes that refuse the record itself: sending
// it again fails the same way. UnknownTopicOrPartition reaches a publish only
// after the client's unknown-topic retries (WithUnknownTopicRetries): the
// topic does not exist and is not auto-created.
var rejected = []error{
	kerr.MessageTooLarge,
	kerr.RecordListTooLarge,
	kerr.InvalidRecord,
	kerr.CorruptMessage,
	kerr.InvalidTimestamp,
	kerr.InvalidTopicException,
	kerr.UnknownTopicOrPartition,
	kerr.TopicAuthorizationFailed,
	kerr.PolicyViolation,
	kerr.UnsupportedForMessageFormat,
}

// classify gives a publish error its class (see docs/adapters/kafka.md).
func classify(err error) error {
	return driver.ClassifyBy(err, errorCode)
}

func errorCode(err error) driver.ErrorCode {
	if driver.IsAny(err, rejected) {
		return driver.Rejected
	}
	switch {
	case kerr.IsRetriable(err), // no leader, not enough replicas, request timed out, ...
		errors.Is(err, kgo.ErrRecordTimeout),
		errors.Is(err, kgo.ErrRecordRetries),
		errors.Is(err, kgo.ErrClientClosed),
		errors.Is(err, context.DeadlineExceeded),
		driver.Disconnected(err):
		return driver.Unavailable
	}
	return driver.Unknown
}
