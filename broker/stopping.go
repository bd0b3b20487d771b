package broker

import (
	"context"
	"errors"
)

// ErrStopping is what a handler returns (wrapped) when it gave up waiting —
// for a broker or a database that is down — because its listener began to
// stop (Stopping). The delivery is then left unsettled, as a cancelled
// handler's is, and redelivered later; nothing is charged to it.
var ErrStopping = errors.New("broker: listener stopping")

// Stopping returns a channel that is closed when the listener running the
// handler of ctx begins to stop; nil (never ready) when ctx is not a
// handler's. A stop waits for in-flight handlers (until its own deadline)
// before it cancels their context, so that work under way can finish; a
// handler that is only waiting selects on this channel too and returns
// ErrStopping at once, instead of holding the stop for its whole deadline.
func Stopping(ctx context.Context) <-chan struct{} {
	d, _ := ctx.Value(deliveryKey{}).(*Delivery)
	if d == nil || d.l == nil {
		return nil
	}
	return d.l.recvCtx.Done()
}

// outcome is decide for a handler of l: an ErrStopping returned once l
// began to stop leaves the delivery unsettled. Returned while l runs, it is
// an ordinary error: a delivery is never left unsettled by a running
// listener, which would hold it for ever.
func (l *Listener) outcome(err error) Disposition {
	if l.recvCtx.Err() != nil && errors.Is(err, ErrStopping) && !IsPoison(err) {
		return NoSettlement
	}
	return decide(l.handlerCtx, err)
}
