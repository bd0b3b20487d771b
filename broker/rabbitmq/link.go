package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/msgx/msgx/broker/driver"
)

// link is one AMQP connection that is re-established after it is lost.
// Channels are never recovered in place: their users open new ones on the new
// connection, because delivery tags and confirm sequence numbers of the old
// channel mean nothing there.
type link struct {
	d    *Driver
	role string

	mu   sync.Mutex // guards conn and up; never held across I/O
	conn *amqp.Connection
	up   chan struct{} // closed while conn is usable; replaced when it is lost
}

// connect dials the first connection.
func (l *link) connect(ctx context.Context) error {
	conn, err := l.d.dial(ctx, l.role)
	if err != nil {
		return err
	}
	l.install(conn)
	return nil
}

// install makes conn the current connection and watches it.
func (l *link) install(conn *amqp.Connection) {
	closes := conn.NotifyClose(make(chan *amqp.Error, 1))
	blocked := conn.NotifyBlocked(make(chan amqp.Blocking, 4))
	l.mu.Lock()
	if l.d.isClosed() {
		l.mu.Unlock()
		_ = conn.CloseDeadline(time.Now().Add(l.d.opts.closeTimeout))
		return
	}
	l.conn = conn
	l.d.met.up.WithLabelValues(l.role).Set(1)
	select {
	case <-l.up: // still marked up from a connection closed by us
	default:
		close(l.up)
	}
	l.d.wg.Add(1)
	l.mu.Unlock()
	go l.watch(conn, closes, blocked)
}

// markDown replaces the ready signal if conn is still the current connection.
func (l *link) markDown(conn *amqp.Connection) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn != conn {
		return
	}
	select {
	case <-l.up:
		l.up = make(chan struct{})
		l.d.met.up.WithLabelValues(l.role).Set(0)
	default:
	}
}

// current returns the live connection, waiting for a reconnect while there is
// none, bounded by ctx.
func (l *link) current(ctx context.Context) (*amqp.Connection, error) {
	for {
		l.mu.Lock()
		conn, up := l.conn, l.up
		l.mu.Unlock()
		select {
		case <-up:
			if !conn.IsClosed() {
				return conn, nil
			}
			// Lost but not yet noticed by the watcher: wait for the new one.
			l.markDown(conn)
			continue
		default:
		}
		select {
		case <-up:
		case <-ctx.Done():
			return nil, driver.Classify(driver.Unavailable, fmt.Errorf("rabbitmq: %s connection unavailable: %w", l.role, ctx.Err()))
		case <-l.d.done:
			return nil, ErrClosed
		}
	}
}

// watch waits for conn to end. A loss is reported and followed by reconnect
// attempts until one succeeds or the driver closes.
func (l *link) watch(conn *amqp.Connection, closes chan *amqp.Error, blocked chan amqp.Blocking) {
	defer l.d.wg.Done()
	for {
		select {
		case b, ok := <-blocked:
			if !ok {
				blocked = nil
				continue
			}
			if b.Active {
				l.d.report(fmt.Errorf("rabbitmq: %s connection blocked by the broker: %s", l.role, b.Reason))
			} else {
				l.d.opts.logger.Info("rabbitmq connection unblocked", "role", l.role)
			}
		case cerr, ok := <-closes:
			l.markDown(conn)
			if !ok || cerr == nil {
				// amqp091 reports no error only when we closed the connection.
				return
			}
			l.d.met.losses.WithLabelValues(l.role).Inc()
			l.d.report(fmt.Errorf("rabbitmq: %s connection lost: %w", l.role, cerr))
			l.reconnect()
			return
		}
	}
}

// reconnect dials with backoff until it succeeds or the driver closes.
func (l *link) reconnect() {
	for attempt := 1; ; attempt++ {
		t := time.NewTimer(l.d.opts.reconnect.Delay(attempt))
		select {
		case <-t.C:
		case <-l.d.done:
			t.Stop()
			return
		}
		conn, err := l.d.dial(l.d.ctx, l.role)
		if err != nil {
			if l.d.isClosed() {
				return
			}
			l.d.report(fmt.Errorf("rabbitmq: reconnect %s connection (attempt %d): %w", l.role, attempt, err))
			continue
		}
		l.install(conn)
		l.d.met.reconnects.WithLabelValues(l.role).Inc()
		l.d.opts.logger.Info("rabbitmq reconnected", "role", l.role, "attempts", attempt)
		return
	}
}

// close closes the current connection; reconnects stop because the driver's
// done channel is closed first.
func (l *link) close() error {
	l.mu.Lock()
	conn := l.conn
	l.mu.Unlock()
	if conn == nil || conn.IsClosed() {
		return nil
	}
	err := conn.CloseDeadline(time.Now().Add(l.d.opts.closeTimeout))
	var aerr *amqp.Error
	if err == nil || errors.Is(err, amqp.ErrClosed) || (errors.As(err, &aerr) && aerr.Code == amqp.FrameError) {
		// A frame error means the socket was already broken: the broker has
		// dropped the connection and requeued its deliveries.
		return nil
	}
	return fmt.Errorf("rabbitmq: close %s connection: %w", l.role, err)
}

// ping opens and closes a channel on the current connection. amqp091's
// Channel takes no context: it runs aside, and a broker that never answers
// fails it when the heartbeat closes the connection.
func (l *link) ping(ctx context.Context) error {
	l.mu.Lock()
	conn, up := l.conn, l.up
	l.mu.Unlock()
	select {
	case <-up:
	default:
		return fmt.Errorf("rabbitmq: %s connection down", l.role)
	}
	done := make(chan error, 1)
	go func() {
		ch, err := conn.Channel()
		if err == nil {
			err = ch.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("rabbitmq: %s connection: open a channel: %w", l.role, err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("rabbitmq: %s connection: no answer: %w", l.role, ctx.Err())
	}
}
