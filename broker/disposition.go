package broker

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
)

// Disposition is what happens to a delivery once its handler is done.
type Disposition int

// The dispositions, as decided in exactly one place: decide.
const (
	// Ack: the handler succeeded; the delivery is settled as done.
	Ack Disposition = iota
	// Requeue: an ordinary error; the message is delivered again later with its
	// redelivery count grown by one.
	Requeue
	// DeadLetter: a poison error or exhausted retries; the message goes to the
	// dead-letter destination and is never handed to the handler again.
	DeadLetter
	// NoSettlement: the handler was cancelled or did not complete; the broker
	// redelivers the message later (after a restart or rebalance).
	NoSettlement
	// Conflict: the outcome asked for two dispositions at once; an adapter error
	// is reported and nothing is settled.
	Conflict
)

func (d Disposition) String() string {
	switch d {
	case Ack:
		return "ack"
	case Requeue:
		return "requeue"
	case DeadLetter:
		return "dead_letter"
	case NoSettlement:
		return "no_settlement"
	case Conflict:
		return "conflict"
	}
	return fmt.Sprintf("disposition(%d)", int(d))
}

// ErrConflictingDisposition is reported when an outcome asks for two
// dispositions, or a delivery would be settled twice.
var ErrConflictingDisposition = errors.New("broker: conflicting disposition")

// PoisonError marks an error as unrecoverable for this message (a broken wire
// contract or schema): the message is dead-lettered at once.
type PoisonError struct{ Err error }

func (e *PoisonError) Error() string { return "poison message: " + e.Err.Error() }
func (e *PoisonError) Unwrap() error { return e.Err }

// Poison wraps err so that the port dead-letters the message instead of
// requeueing it.
func Poison(err error) error {
	if err == nil {
		err = errors.New("poison")
	}
	return &PoisonError{Err: err}
}

// IsPoison reports whether err asks for dead-lettering.
func IsPoison(err error) bool {
	var p *PoisonError
	return errors.As(err, &p)
}

// decide is the one place where a handler's outcome becomes a disposition.
// handlerCtx is the context the handler ran with. Only the listener's own
// stop makes an error outcome go unsettled: its cancellation (a stop that ran
// out of time), or an error wrapping ErrStopping once the stop has begun (a
// handler that gave up a retry wait, see Pause). An error that merely wraps
// context.Canceled or ErrStopping while the listener runs is an ordinary
// failure, or the delivery would be held for ever. A poison error from a
// cancelled handler asks for two dispositions at once.
func decide(handlerCtx context.Context, err error) Disposition {
	if err == nil {
		return Ack
	}
	stopping := handlerCtx.Err() != nil || errors.Is(err, ErrStopping) && closed(Stopping(handlerCtx))
	poison := IsPoison(err)
	switch {
	case stopping && poison && errors.Is(err, context.Canceled):
		return Conflict
	case stopping:
		return NoSettlement
	case poison:
		return DeadLetter
	default:
		return Requeue
	}
}

// settleOnce guards a delivery against a second settlement.
type settleOnce struct{ done atomic.Bool }

func (s *settleOnce) claim() error {
	if !s.done.CompareAndSwap(false, true) {
		return ErrConflictingDisposition
	}
	return nil
}
