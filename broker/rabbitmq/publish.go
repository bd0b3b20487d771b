package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/msgx/msgx/broker/driver"
)

// pool holds confirm-mode channels on the publishing connection. A channel is
// used by one publish call at a time: the broker sends a message's basic.return
// before its basic.ack on the same channel, so every return seen while a call
// waits for its confirms belongs to that call.
type pool struct {
	d     *Driver
	slots chan struct{} // one token per channel in use
	idle  chan *pubChan
}

func newPool(d *Driver, size int) *pool {
	return &pool{d: d, slots: make(chan struct{}, size), idle: make(chan *pubChan, size)}
}

type pubChan struct {
	met     *metrics
	ch      *amqp.Channel
	returns chan amqp.Return
	closes  chan *amqp.Error
	pending []*amqp.DeferredConfirmation
	// clean is false when confirms or returns of an earlier call may still
	// arrive; such a channel is closed instead of reused.
	clean bool
}

func (p *pool) get(ctx context.Context) (*pubChan, error) {
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("rabbitmq: waiting for a publishing channel: %w", ctx.Err())
	case <-p.d.done:
		return nil, ErrClosed
	}
	for {
		select {
		case pc := <-p.idle:
			if !pc.ch.IsClosed() {
				return pc, nil
			}
			continue
		default:
		}
		break
	}
	pc, err := p.open(ctx)
	if err != nil {
		<-p.slots
		return nil, err
	}
	return pc, nil
}

func (p *pool) open(ctx context.Context) (*pubChan, error) {
	conn, err := p.d.pub.current(ctx)
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: open publishing channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("rabbitmq: enable publisher confirms: %w", err)
	}
	return &pubChan{
		met: p.d.met,
		ch:  ch,
		// Returns are drained while confirms are awaited; the buffer only
		// absorbs bursts so the connection's reader never waits on us.
		returns: ch.NotifyReturn(make(chan amqp.Return, 256)),
		closes:  ch.NotifyClose(make(chan *amqp.Error, 1)),
		clean:   true,
	}, nil
}

func (p *pool) put(pc *pubChan) {
	if pc.clean && !pc.ch.IsClosed() && !p.d.isClosed() {
		p.idle <- pc // never blocks: at most cap(slots) channels exist
	} else {
		// Close without blocking the caller on a broken connection.
		go func() { _ = pc.ch.Close() }()
	}
	<-p.slots
}

// drain closes the idle channels at driver close.
func (p *pool) drain() {
	for {
		select {
		case pc := <-p.idle:
			_ = pc.ch.Close()
		default:
			return
		}
	}
}

// publish sends msgs to exchange with routing key key on a pooled channel and
// returns nil only when the broker acked all of them and returned none.
func (d *Driver) publish(ctx context.Context, exchange, key string, msgs []*driver.Message) error {
	return d.publishTTL(ctx, exchange, key, msgs, 0)
}

// publishTTL is publish with a per-message TTL (none when ttl <= 0).
func (d *Driver) publishTTL(ctx context.Context, exchange, key string, msgs []*driver.Message, ttl time.Duration) error {
	if len(msgs) == 0 {
		return nil
	}
	if err := checkWire(exchange, key, msgs, d.opts.maxMessageBytes); err != nil {
		return driver.Classify(driver.Rejected, err)
	}
	pc, err := d.pool.get(ctx)
	if err != nil {
		return classify(err)
	}
	err = pc.publish(ctx, exchange, key, msgs, ttl)
	d.pool.put(pc)
	return classify(err)
}

// checkWire refuses what amqp091 cannot encode: its encoding errors surface
// only while a frame is half written and then bring down the whole connection.
// It also refuses a body over maxBody (WithMaxMessageBytes; none when <= 0),
// which the broker would refuse by closing the channel.
func checkWire(exchange, key string, msgs []*driver.Message, maxBody int) error {
	if err := checkName("exchange", exchange); err != nil {
		return err
	}
	if err := checkName("routing key", key); err != nil {
		return err
	}
	for _, m := range msgs {
		for k := range m.Headers {
			if len(k) > maxShortString {
				return fmt.Errorf("rabbitmq: header name %.32q... is longer than %d bytes", k, maxShortString)
			}
		}
		if maxBody > 0 && len(m.Payload) > maxBody {
			dest := exchange
			if dest == "" {
				dest = key // the default exchange routes by queue name
			}
			return fmt.Errorf("rabbitmq: %w", driver.TooLarge(dest, len(m.Payload), maxBody))
		}
	}
	return nil
}

// maxShortString bounds AMQP names: exchanges, queues, routing keys, header names.
const maxShortString = 255

func checkName(kind, name string) error {
	if len(name) > maxShortString {
		return fmt.Errorf("rabbitmq: %s %.32q... is longer than %d bytes", kind, name, maxShortString)
	}
	return nil
}

func (pc *pubChan) publish(ctx context.Context, exchange, key string, msgs []*driver.Message, ttl time.Duration) error {
	pc.pending = pc.pending[:0]
	defer clear(pc.pending)
	for _, m := range msgs {
		if err := ctx.Err(); err != nil {
			pc.clean = len(pc.pending) == 0
			return fmt.Errorf("rabbitmq: publish to %q: %w", exchange, err)
		}
		p := publishing(m)
		if ttl > 0 {
			p.Expiration = strconv.FormatInt(max(ttl.Milliseconds(), 1), 10)
		}
		dc, err := pc.ch.PublishWithDeferredConfirm(exchange, key, true, false, p)
		if err != nil {
			pc.clean = false
			return fmt.Errorf("rabbitmq: publish to %q: %w", exchange, pc.closeReason(err))
		}
		pc.pending = append(pc.pending, dc)
	}
	var returned int
	var ret amqp.Return
	nacked := 0
	for _, dc := range pc.pending {
	wait:
		for {
			select {
			case <-dc.Done():
				break wait
			case r := <-pc.returns:
				returned++
				ret = r
			case <-ctx.Done():
				pc.clean = false
				return fmt.Errorf("rabbitmq: publish to %q: waiting for confirms: %w", exchange, ctx.Err())
			}
		}
		if !dc.Acked() {
			if pc.ch.IsClosed() {
				pc.clean = false
				return fmt.Errorf("rabbitmq: publish to %q: %w", exchange, pc.closeReason(amqp.ErrClosed))
			}
			nacked++
		}
	}
	// A return precedes its ack, so every return of this call is queued now.
	for drained := false; !drained; {
		select {
		case r := <-pc.returns:
			returned++
			ret = r
		default:
			drained = true
		}
	}
	pc.met.nacked.Add(float64(nacked))
	pc.met.returned.Add(float64(returned))
	switch {
	case nacked > 0:
		return fmt.Errorf("rabbitmq: publish to %q: %d of %d messages: %w", exchange, nacked, len(msgs), ErrNacked)
	case returned > 0:
		return fmt.Errorf("rabbitmq: publish to %q: %d of %d messages: %w (%d %s)", exchange, returned, len(msgs),
			ErrReturned, ret.ReplyCode, ret.ReplyText)
	}
	return nil
}

// closeReason prefers the broker's reason for closing the channel (such as
// 404 NOT_FOUND for a missing exchange) over the generic error.
func (pc *pubChan) closeReason(err error) error {
	select {
	case cerr, ok := <-pc.closes:
		if ok && cerr != nil {
			return cerr
		}
	default:
	}
	if errors.Is(err, amqp.ErrClosed) {
		return fmt.Errorf("channel closed: %w", err)
	}
	return err
}

// publishing converts a wire message. The key travels in the partition-key
// header, which the port already sets to the key (a requeued copy is routed by
// queue name, so the routing key cannot carry it); only a key that differs
// from that header needs a header of its own.
func publishing(m *driver.Message) amqp.Publishing {
	extra := m.Key != "" && m.Headers[driver.HeaderPartitionKey] != m.Key
	n := len(m.Headers)
	if extra {
		n++
	}
	h := make(amqp.Table, n)
	for k, v := range m.Headers {
		h[k] = v
	}
	if extra {
		h[HeaderKey] = m.Key
	}
	return amqp.Publishing{Headers: h, DeliveryMode: amqp.Persistent, Body: m.Payload}
}
