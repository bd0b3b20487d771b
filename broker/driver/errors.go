package driver

import "sync"

// ErrorFeed is the channel behind a driver's Errors: adapters report from
// their client's callbacks without ever blocking them. When nobody reads and
// the buffer is full, the error goes to the drop function instead (a log line
// or a counter), so it is never lost silently.
type ErrorFeed struct {
	mu     sync.Mutex
	ch     chan error
	closed bool
	drop   func(error)
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
		f.drop(err)
		return
	}
	select {
	case f.ch <- err:
	default:
		f.drop(err)
	}
}

// Close closes the channel; it is safe to call more than once.
func (f *ErrorFeed) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.closed {
		f.closed = true
		close(f.ch)
	}
}
