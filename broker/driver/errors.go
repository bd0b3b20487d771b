package driver

import (
	"sync"
	"sync/atomic"
)

// ErrorFeed is the channel behind a driver's Errors: adapters report from
// their client's callbacks without ever blocking them. When nobody reads and
// the buffer is full, the error goes to the drop function instead (a log line
// or a counter), so it is never lost silently; the feed counts it too
// (Dropped), which the port exposes as a metric (see DroppedErrorCounter).
type ErrorFeed struct {
	mu      sync.Mutex
	ch      chan error
	closed  bool
	drop    func(error)
	dropped atomic.Uint64
}

// DroppedErrorCounter is implemented by drivers whose Errors channel drops
// errors nobody reads (each is logged instead): the port exposes the count as
// msgx_broker_adapter_errors_dropped_total.
type DroppedErrorCounter interface {
	// DroppedErrors is the number of errors that did not fit the channel.
	DroppedErrors() uint64
}

// NewErrorFeed returns a feed buffering up to buffer errors; drop (which may be
// nil) receives what does not fit and what is reported after Close.
func NewErrorFeed(buffer int, drop func(error)) *ErrorFeed {
	if drop == nil {
		drop = func(error) {}
	}
	return &ErrorFeed{ch: make(chan error, max(buffer, 1)), drop: drop}
}

// C is the channel a driver returns from Errors.
func (f *ErrorFeed) C() <-chan error { return f.ch }

// Report hands err to the channel without blocking.
func (f *ErrorFeed) Report(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		f.dropped.Add(1)
		f.drop(err)
		return
	}
	select {
	case f.ch <- err:
	default:
		f.dropped.Add(1)
		f.drop(err)
	}
}

// Dropped is the number of errors that went to the drop function.
func (f *ErrorFeed) Dropped() uint64 { return f.dropped.Load() }

// Close closes the channel; it is safe to call more than once.
func (f *ErrorFeed) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.closed {
		f.closed = true
		close(f.ch)
	}
}
