package broker

import (
	"context"
	"errors"

	"github.com/msgx/msgx/broker/driver"
)

// ErrorCode is the class of a send failure (see driver.ErrorCode): the one
// vocabulary callers use to tell a broker that is down from a message the
// broker refuses.
type ErrorCode = driver.ErrorCode

// The error classes.
const (
	Unknown     = driver.Unknown
	Unavailable = driver.Unavailable
	Rejected    = driver.Rejected
)

// Code returns the class of an error returned by SendConfirmed, SendDelayed
// or Ping. ErrNotStarted and a send that ran out of its deadline are
// Unavailable: the broker did not answer, which says nothing of the message.
func Code(err error) ErrorCode {
	if err == nil {
		return Unknown
	}
	if c := driver.Code(err); c != Unknown {
		return c
	}
	if errors.Is(err, ErrNotStarted) || errors.Is(err, context.DeadlineExceeded) {
		return Unavailable
	}
	return Unknown
}

// IsUnavailable reports whether err says the broker cannot take messages now.
func IsUnavailable(err error) bool { return Code(err) == Unavailable }

// IsRejected reports whether err says the broker refused the message itself.
func IsRejected(err error) bool { return Code(err) == Rejected }
