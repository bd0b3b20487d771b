package broker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/msgx/msgx/broker/driver"
)

// settles reports whether a disposition for n deliveries is carried out; the
// ones that settle nothing are counted (and a conflict reported) here.
func (l *Listener) settles(disp Disposition, n int, cause error, t *tally) bool {
	switch disp {
	case NoSettlement:
		t.settled[NoSettlement] += uint64(n)
		return false
	case Conflict:
		t.settled[Conflict] += uint64(n)
		l.b.report(Event{Topic: l.sub.Topic, Group: l.sub.Group,
			Err: fmt.Errorf("%w: %v (left unsettled)", ErrConflictingDisposition, cause)})
		return false
	}
	return true
}

// exhaust turns a requeue into a dead letter once the retry policy is
// exhausted; attempts counts the handler runs (redelivery count + 1).
func (l *Listener) exhaust(disp Disposition, cause error, attempts int) (Disposition, error) {
	if disp == Requeue && l.retry.Exhausted(attempts) {
		return DeadLetter, fmt.Errorf("retries exhausted after %d attempts: %w", attempts, cause)
	}
	return disp, cause
}

// settle settles one delivery and reports a failure on the lifecycle channel.
// attempts is the delivery's (or its batch's) handler runs.
func (l *Listener) settle(d *Delivery, disp Disposition, cause error, attempts int, t *tally) bool {
	if err := l.settleOne(d, disp, cause, attempts, t); err != nil {
		l.b.report(Event{Topic: l.sub.Topic, Group: l.sub.Group, Err: err})
		return false
	}
	return true
}

// settleOne settles one delivery and counts it in t. A second settlement of
// the same delivery is refused with ErrConflictingDisposition and does nothing.
//
// No delivery is ever held: a settlement that fails is retried with the
// settle-retry backoff, and when it still fails the delivery is released to
// the broker (which hands it to the group again) and the failure returned.
// Only when the release fails too does the delivery stay held until the
// subscription closes; that is counted as stuck.
func (l *Listener) settleOne(d *Delivery, disp Disposition, cause error, attempts int, t *tally) error {
	if l.closing.Load() {
		untrack(d)
		t.settled[NoSettlement]++
		return nil // stop ran out of time: cancelled handlers are not settled
	}
	if err := d.settled.claim(); err != nil {
		t.settled[Conflict]++
		return fmt.Errorf("settle %s: %w", disp, err)
	}
	m, delay := l.wireFor(d, disp, cause, attempts)
	byRef := false
	if disp == DeadLetter {
		var fit *Message
		fit, byRef = l.b.fitDeadLetter((*Message)(m))
		m = (*driver.Message)(fit)
	}
	var err error
	for try := 1; ; try++ {
		if err = l.carryOut(d, disp, m, delay); err == nil {
			break
		}
		if disp == DeadLetter && !byRef && IsRejected(err) {
			// Too large for the broker or the dead-letter topic: the
			// message is dead either way, so its copy goes by reference
			// rather than being released to come back for ever.
			m, byRef = (*driver.Message)(l.b.byReference((*Message)(m), "refused by the broker: "+truncate(err.Error(), 512))), true
			continue
		}
		if disp == DeadLetter && IsUnavailable(err) {
			// The broker is down: its state, not the message's failure.
			// Wait for it with backoff for as long as the listener runs,
			// charging nothing; a stop leaves the delivery unsettled.
			if !l.pause(l.b.opts.settleRetry.Delay(try)) {
				break
			}
			continue
		}
		if errors.Is(err, driver.ErrNotHeld) || l.b.opts.settleRetry.Exhausted(try) || !l.pause(l.b.opts.settleRetry.Delay(try)) {
			break
		}
	}
	if err == nil {
		untrack(d)
		t.settled[disp]++
		if byRef {
			l.b.deadByReference(l.sub.DeadLetterTopic, (*Message)(m))
		}
		if disp != Ack {
			l.logFor(d).Warn("message not acknowledged", "disposition", disp.String(), "attempts", attempts, "err", cause)
		}
		return nil
	}
	l.met.settleErrors.Inc()
	err = fmt.Errorf("settle %s of message (key %q, event %q): %w", disp, d.Key, d.Header(HeaderEventID), err)
	if errors.Is(err, driver.ErrNotHeld) || l.recvCtx.Err() != nil {
		// The broker has it back already, or closing the subscription
		// (the listener is stopping) gives it back.
		untrack(d)
		return err
	}
	if rerr := l.release(d); rerr != nil {
		// Still held: it keeps its age (and may be reported as stalled).
		l.met.stuck.Inc()
		l.stuck.Add(1)
		return fmt.Errorf("%w; release failed too, the delivery stays held until the listener stops: %w", err, rerr)
	}
	untrack(d)
	l.met.released.Inc()
	return fmt.Errorf("%w (released to the broker for redelivery)", err)
}

// wireFor is the message a publishing settlement sends: the delivery with the
// port's updated headers (nil for an acknowledgement), and a requeue's delay.
func (l *Listener) wireFor(d *Delivery, disp Disposition, cause error, attempts int) (*driver.Message, time.Duration) {
	switch disp {
	case Requeue:
		m := d.copyForResend()
		m.Headers[HeaderRedeliveryCount] = strconv.Itoa(attempts)
		m.Headers[HeaderForGroup] = l.sub.Group
		delay := l.retry.Delay(attempts)
		if delay > 0 {
			m.Headers[HeaderNotBefore] = notBeforeHeader(l.b.opts.clock.Now().Add(delay))
		}
		return m, delay
	case DeadLetter:
		m := d.copyForResend()
		class := "poison"
		if !IsPoison(cause) {
			class = "exhausted"
		}
		m.Headers[HeaderDeadClass] = class
		m.Headers[HeaderDeadReason] = truncate(errText(cause), 1024)
		m.Headers[HeaderDeadTopic] = l.sub.Topic
		m.Headers[HeaderDeadGroup] = l.sub.Group
		m.Headers[HeaderDeadAttempts] = strconv.Itoa(attempts)
		m.Headers[HeaderDeadTimestamp] = l.b.opts.clock.Now().UTC().Format(time.RFC3339Nano)
		if part, off, ok := d.Position(); ok {
			m.Headers[HeaderDeadPartition] = strconv.FormatInt(int64(part), 10)
			m.Headers[HeaderDeadOffset] = strconv.FormatInt(off, 10)
		}
		return m, 0
	}
	return nil, 0
}

// carryOut makes one attempt at a settlement.
func (l *Listener) carryOut(d *Delivery, disp Disposition, m *driver.Message, delay time.Duration) error {
	// Acks are local or one frame; only the publishing settlements get their
	// own deadline (a timer per ack would cost more than the ack).
	ctx := context.Background()
	if disp != Ack {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.b.opts.settleTimeout)
		defer cancel()
	}
	switch disp {
	case Requeue:
		return d.drv.Requeue(ctx, m, delay)
	case DeadLetter:
		return d.drv.DeadLetter(ctx, m)
	}
	return d.drv.Ack(ctx)
}

// release gives a delivery whose settlement failed back to the broker, with
// its redelivery count unchanged: it was not handled to an end.
func (l *Listener) release(d *Delivery) error {
	m := d.copyForResend()
	m.Headers[HeaderForGroup] = l.sub.Group
	if d.RedeliveryCount > 0 {
		m.Headers[HeaderRedeliveryCount] = strconv.Itoa(d.RedeliveryCount)
	}
	var err error
	for try := 1; ; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), l.b.opts.settleTimeout)
		err = d.drv.Release(ctx, m, l.b.opts.settleRetry.Delay(l.b.opts.settleRetry.MaxAttempts))
		cancel()
		if err == nil || errors.Is(err, driver.ErrNotHeld) {
			return nil
		}
		if l.b.opts.settleRetry.Exhausted(try) || !l.pause(l.b.opts.settleRetry.Delay(try)) {
			return err
		}
	}
}

// pause waits d on the port's clock; it reports false when the listener
// started stopping meanwhile.
func (l *Listener) pause(d time.Duration) bool {
	if d <= 0 {
		return l.recvCtx.Err() == nil
	}
	select {
	case <-l.b.opts.clock.After(d):
		return true
	case <-l.recvCtx.Done():
		return false
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
