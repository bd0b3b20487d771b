package driver

import (
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
)

// ErrorCode is the class of a send or settlement failure, which decides what
// the caller does next: an Unavailable broker is the broker's state (wait for
// it, charge the message nothing), a Rejected message is the message's own
// failure (sending it again fails the same way). Every adapter maps its
// client's errors to these, so that callers never inspect a client's errors.
type ErrorCode int

const (
	// Unknown: the adapter could not tell. Callers treat it as a failure of
	// the message that may pass on a later attempt.
	Unknown ErrorCode = iota
	// Unavailable: the broker cannot take messages now (connection refused or
	// lost, no leader, broker shutting down, no answer within the deadline).
	// The message itself is fine.
	Unavailable
	// Rejected: the broker refused this message and will refuse it again
	// (too large, invalid, no route, not authorised for the topic).
	Rejected
)

func (c ErrorCode) String() string {
	switch c {
	case Unknown:
		return "unknown"
	case Unavailable:
		return "unavailable"
	case Rejected:
		return "rejected"
	}
	return fmt.Sprintf("ErrorCode(%d)", int(c))
}

// Error is an adapter's error with its class. It wraps the client's error
// unchanged, so errors.Is and errors.As still reach it.
type Error struct {
	Code ErrorCode
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Classify wraps err with code; a nil err stays nil. An error that already
// carries a class keeps the outermost one.
func Classify(code ErrorCode, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Code: code, Err: err}
}

// ClassifyBy gives err the class code finds for it, unless err already has
// one: an adapter's mapping of its client's errors, applied once at the
// adapter's edge. A nil err stays nil.
func ClassifyBy(err error, code func(error) ErrorCode) error {
	if err == nil || Code(err) != Unknown {
		return err
	}
	return Classify(code(err), err)
}

// IsAny reports whether err matches any of targets (errors.Is): an
// adapter's lists of its client's errors of one class.
func IsAny(err error, targets []error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}

// Code returns the class of err: the outermost Error in its chain, or
// Unknown when it has none.
func Code(err error) ErrorCode {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return Unknown
}

// ErrTooLarge is the cause of a message an adapter refuses before sending it
// because it exceeds the broker's size limit known to the client.
var ErrTooLarge = errors.New("message too large")

// TooLarge returns the Rejected error of a message of size bytes for topic
// that exceeds limit, the broker's size limit as the client knows it. The
// message is refused before the send: the broker would refuse it anyway, and
// some brokers close the connection on an oversized frame.
func TooLarge(topic string, size, limit int) error {
	return Classify(Rejected, fmt.Errorf("%w for %s: %d bytes, the limit is %d", ErrTooLarge, topic, size, limit))
}

// Disconnected reports whether err is a refused, lost or timed-out network
// connection, as the standard library reports them: the broker is
// unreachable, whatever the client. Adapters use it for the errors their
// client passes through from the network unchanged.
func Disconnected(err error) bool {
	if err == nil {
		return false
	}
	var ne net.Error // *net.OpError, *net.DNSError, timeouts
	return errors.As(err, &ne) ||
		errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNABORTED) ||
		errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, net.ErrClosed) ||
		errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF)
}
