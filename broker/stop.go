package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/msgx/msgx/clock"
)

// Stop stops receiving, waits for in-flight handlers until ctx ends, then
// cancels them: whatever they return after that is not settled. It closes the
// adapter subscription, so unsettled messages are redelivered to the group.
// Every step is bounded: the close by ctx, or by the close timeout when ctx
// ended during the wait for the handlers; a close that overruns goes on in
// the background and Stop reports it.
func (l *Listener) Stop(ctx context.Context) error {
	l.stopped.Do(func() {
		l.stopRecv()
		done := make(chan struct{})
		go func() { l.loop.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			l.closing.Store(true)
		}
		l.cancelH()
		// Closing the subscription gives the stuck deliveries back.
		l.met.stuck.Sub(float64(l.stuck.Load()))
		if err := boundedClose(ctx, l.b.opts.closeTimeout, l.ds.Close); err != nil {
			l.stopErr = fmt.Errorf("broker %s: close subscription %q/%q: %w", l.b.name, l.sub.Topic, l.sub.Group, err)
		}
		l.b.forget(l)
	})
	return l.stopErr
}

// boundedClose runs closeFn with ctx, or with a context of grace when ctx
// has ended, and returns no later than that context does.
func boundedClose(ctx context.Context, grace time.Duration, closeFn func(context.Context) error) error {
	cctx, cancel := ctx, context.CancelFunc(func() {})
	if ctx.Err() != nil {
		cctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), grace)
	}
	errc := make(chan error, 1)
	go func() {
		defer cancel()
		errc <- closeFn(cctx)
	}()
	select {
	case err := <-errc:
		return err
	case <-cctx.Done():
		select {
		case err := <-errc: // it finished as the context ended
			return err
		default:
		}
		return fmt.Errorf("%w: %w", errStillClosing, cctx.Err())
	}
}

// errStillClosing is boundedClose's error for a close it stopped waiting for.
var errStillClosing = errors.New("not closed in time, still closing")

// ErrStopping is the error of a handler that gave up waiting to retry
// because its listener began to stop (Pause). Returned by the handler once
// the stop has begun, it leaves the delivery unsettled: the broker
// redelivers it after the restart or rebalance.
var ErrStopping = errors.New("broker: the listener is stopping")

type stoppingKey struct{}

// Stopping returns a channel closed when the listener running the handler
// of ctx begins to stop, before the stop's deadline cancels ctx; nil (never
// closed) for a context that is not a handler's. A handler finishes the
// attempt it is in, but does not wait for another one after it.
func Stopping(ctx context.Context) <-chan struct{} {
	c, _ := ctx.Value(stoppingKey{}).(<-chan struct{})
	return c
}

// Pause is a handler's wait between two attempts: d on clk. It returns nil
// once d has passed, an error wrapping ErrStopping as soon as the handler's
// listener begins to stop (the handler returns it: the delivery stays
// unsettled), or ctx's error when ctx ends first.
func Pause(ctx context.Context, clk clock.Clock, d time.Duration) error {
	stopping := Stopping(ctx)
	if closed(stopping) {
		return ErrStopping
	}
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-stopping:
		return ErrStopping
	case <-ctx.Done():
		return ctx.Err()
	}
}

// closed reports whether c is closed (false for nil).
func closed(c <-chan struct{}) bool {
	if c == nil {
		return false
	}
	select {
	case <-c:
		return true
	default:
		return false
	}
}
