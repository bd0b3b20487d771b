package broker

import (
	"context"
	"errors"
	"fmt"
	"time"
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
