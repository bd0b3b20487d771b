package pulsarfake

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"
)

const serverVersion = "pulsarfake"

// conn is one client connection. One goroutine reads and handles commands in
// order; another writes what the handlers and dispatchers queued.
type conn struct {
	s  *Server
	nc net.Conn

	// Written under s.mu by the reading goroutine, read by dropConn.
	producers map[uint64]*producer
	consumers map[uint64]*consumer

	wmu    sync.Mutex
	out    []byte // frames queued for the writer
	spare  []byte
	wake   chan struct{}
	closed bool
	done   chan struct{}
}

type producer struct {
	id   uint64
	name string
	t    *topic
}

func newConn(s *Server, nc net.Conn) *conn {
	return &conn{
		s: s, nc: nc,
		producers: map[uint64]*producer{}, consumers: map[uint64]*consumer{},
		wake: make(chan struct{}, 1), done: make(chan struct{}),
	}
}

func (c *conn) close() {
	c.wmu.Lock()
	if !c.closed {
		c.closed = true
		close(c.done)
	}
	c.wmu.Unlock()
	_ = c.nc.Close()
}

// sendFrame queues one frame; it never blocks on the network.
func (c *conn) sendFrame(command, payload []byte) {
	c.wmu.Lock()
	if c.closed {
		c.wmu.Unlock()
		return
	}
	c.out = appendFrame(c.out, command, payload)
	c.wmu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *conn) send(t uint64, sub msg) { c.sendFrame(baseCommand(t, sub), nil) }

func (c *conn) writeLoop() {
	defer c.s.wg.Done()
	for {
		select {
		case <-c.wake:
		case <-c.done:
			return
		}
		c.wmu.Lock()
		buf := c.out
		c.out, c.spare = c.spare[:0], nil
		c.wmu.Unlock()
		if len(buf) == 0 {
			continue
		}
		if _, err := c.nc.Write(buf); err != nil {
			c.close()
			return
		}
		c.wmu.Lock()
		c.spare = buf[:0]
		c.wmu.Unlock()
	}
}

func (c *conn) readLoop() {
	defer c.s.wg.Done()
	defer c.s.dropConn(c)
	defer c.close()
	log := c.s.logger.With("remote", c.nc.RemoteAddr().String())
	r := bufio.NewReaderSize(c.nc, 64*1024)
	var buf []byte
	handshaken := false
	for {
		var f frame
		var err error
		f, buf, err = readFrame(r, buf)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				log.Debug("pulsarfake: connection ended", "err", err)
			}
			return
		}
		cmd, err := decode(f.command)
		if err != nil {
			log.Warn("pulsarfake: undecodable command", "err", err)
			return
		}
		t := cmd.u64(1)
		sub, err := cmd.sub(protowire.Number(t))
		if err != nil {
			log.Warn("pulsarfake: undecodable command", "type", typeName(t), "err", err)
			return
		}
		if !handshaken {
			if t != typeConnect {
				log.Warn("pulsarfake: first command is not CONNECT", "type", typeName(t))
				return
			}
			handshaken = true
			version := sub.u64(4)
			c.send(typeConnected, msg(nil).str(1, serverVersion).uint(2, version).uint(3, 5*1024*1024))
			continue
		}
		if err := c.handle(t, sub, f.payload); err != nil {
			log.Warn("pulsarfake: closing connection", "type", typeName(t), "err", err)
			return
		}
	}
}

// handle serves one command. An error closes the connection.
func (c *conn) handle(t uint64, cmd fields, payload []byte) error {
	s := c.s
	switch t {
	case typePing:
		c.send(typePong, nil)
	case typePong:
	case typePartitionedMeta:
		c.send(typePartitionedMetaRes, msg(nil).uint(1, 0).uint(2, cmd.u64(2)).uint(3, 0))
	case typeLookup:
		s.mu.Lock()
		url := s.scheme + s.advertised
		s.mu.Unlock()
		// Connect (1): this broker serves the topic, at the advertised
		// address; a TLS client takes brokerServiceUrlTls (2).
		field := protowire.Number(1)
		if s.scheme == "pulsar+ssl://" {
			field = 2
		}
		c.send(typeLookupRes, msg(nil).str(field, url).uint(3, 1).uint(4, cmd.u64(2)).boolean(5, true))
	case typeProducer:
		c.producer(cmd)
	case typeSend:
		return c.sendCmd(cmd, payload)
	case typeCloseProducer:
		s.mu.Lock()
		delete(c.producers, cmd.u64(1))
		s.mu.Unlock()
		c.send(typeSuccess, msg(nil).uint(1, cmd.u64(2)))
	case typeSubscribe:
		return c.subscribe(cmd)
	case typeFlow:
		s.mu.Lock()
		if cons := c.consumers[cmd.u64(1)]; cons != nil {
			cons.sub.flow(cons, int(cmd.u64(2)))
		}
		s.mu.Unlock()
	case typeAck:
		return c.ack(cmd)
	case typeRedeliver:
		return c.redeliver(cmd)
	case typeCloseConsumer:
		s.mu.Lock()
		if cons := c.consumers[cmd.u64(1)]; cons != nil {
			delete(c.consumers, cons.id)
			cons.sub.removeConsumer(cons)
		}
		s.mu.Unlock()
		c.send(typeSuccess, msg(nil).uint(1, cmd.u64(2)))
	case typeUnsubscribe:
		c.unsubscribe(cmd)
	case typeGetLastMessageID:
		c.lastMessageID(cmd)
	default:
		c.unmodelled(t, cmd)
	}
	return nil
}

func (c *conn) fail(requestID uint64, code uint64, text string) {
	c.send(typeError, msg(nil).uint(1, requestID).uint(2, code).str(3, text))
}

// unmodelled logs a command the fake does not implement and, when it is a
// request, answers it with an error so the client does not wait for a timeout.
func (c *conn) unmodelled(t uint64, cmd fields) {
	c.s.logger.Warn("pulsarfake: command not modelled", "type", typeName(t))
	if f, ok := requestIDField[t]; ok {
		c.fail(cmd.u64(f), errNotAllowed, "pulsarfake: "+typeName(t)+" is not modelled")
	}
}

func (c *conn) producer(cmd fields) {
	s := c.s
	id, reqID := cmd.u64(2), cmd.u64(3)
	name := TopicName(cmd.str(1))
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refused[name] {
		c.fail(reqID, errAuthorization, fmt.Sprintf("pulsarfake: topic %s is refused", name))
		return
	}
	pname := cmd.str(4)
	if pname == "" {
		s.nextName++
		pname = fmt.Sprintf("pulsarfake-%d", s.nextName)
	}
	c.producers[id] = &producer{id: id, name: pname, t: s.topicLocked(name)}
	// last_sequence_id -1: no message of this producer is stored yet (no deduplication).
	c.send(typeProducerSuccess, msg(nil).uint(1, reqID).str(2, pname).int(3, -1).boolean(6, true))
}

func (c *conn) sendCmd(cmd fields, payload []byte) error {
	s := c.s
	pid, seq := cmd.u64(1), cmd.u64(2)
	sendError := func(code uint64, text string) {
		c.send(typeSendError, msg(nil).uint(1, pid).uint(2, seq).uint(3, code).str(4, text))
	}
	stored, metadata, _, err := parsePayloadSection(payload)
	if err != nil {
		if errors.Is(err, errChecksum) {
			sendError(errChecksumCode, err.Error())
			return nil
		}
		return err
	}
	meta, err := decode(metadata)
	if err != nil {
		return fmt.Errorf("message metadata: %w", err)
	}
	n := 1
	if v, ok := meta.uint(11); ok { // num_messages_in_batch
		n = int(v)
	}
	key := meta.str(18) // ordering_key, else partition_key
	if key == "" {
		key = meta.str(6)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p := c.producers[pid]
	if p == nil {
		sendError(errUnknown, "pulsarfake: producer not found")
		return nil
	}
	deliverAt, _ := meta.uint(19) // deliver_at_time
	e := p.t.append(append([]byte(nil), stored...), n, key, int64(deliverAt))
	receipt := msg(nil).uint(1, pid).uint(2, seq).sub(3, messageIDData(p.t.ledger, e.id))
	if h, ok := cmd.uint(6); ok {
		receipt = receipt.uint(4, h)
	}
	c.send(typeSendReceipt, receipt)
	return nil
}

func (c *conn) subscribe(cmd fields) error {
	s := c.s
	name, subName := TopicName(cmd.str(1)), cmd.str(2)
	kind, id, reqID := cmd.u64(3), cmd.u64(4), cmd.u64(5)
	earliest := cmd.u64(13) == 1
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.consumers[id] != nil {
		// A retried SUBSCRIBE for a consumer that exists already.
		c.send(typeSuccess, msg(nil).uint(1, reqID))
		return nil
	}
	t := s.topicLocked(name)
	sb := t.subs[subName]
	if sb == nil {
		sb = newSubscription(t, subName, kind, earliest)
		t.subs[subName] = sb
	}
	if len(sb.consumers) > 0 && (sb.kind != kind || kind == subExclusive) {
		c.fail(reqID, errConsumerBusy, fmt.Sprintf("pulsarfake: subscription %s is busy", subName))
		return nil
	}
	sb.kind = kind
	cons := &consumer{id: id, name: cmd.str(6), c: c, sub: sb, unacked: map[uint64]struct{}{}}
	c.consumers[id] = cons
	sb.addConsumer(cons)
	c.send(typeSuccess, msg(nil).uint(1, reqID))
	return nil
}

func (c *conn) ack(cmd fields) error {
	s := c.s
	cumulative := cmd.u64(2) == 1
	var ids []messageID
	for _, b := range cmd.all(3) {
		id, err := decodeMessageID(b)
		if err != nil {
			return err
		}
		ids = append(ids, id)
	}
	s.mu.Lock()
	cons := c.consumers[cmd.u64(1)]
	if cons != nil {
		for _, id := range ids {
			// A partial batch acknowledgement (ack_set) leaves the entry
			// unacknowledged: the fake does not track batch indexes.
			if id.ledger == cons.sub.t.ledger && !id.ackSet {
				cons.sub.ack(id.entry, cumulative)
			}
		}
		cons.sub.t.trim()
	}
	s.mu.Unlock()
	if reqID, ok := cmd.uint(8); ok {
		res := msg(nil).uint(1, cmd.u64(1)).uint(6, reqID)
		if cons == nil {
			res = res.uint(4, errConsumerNotFound).str(5, "pulsarfake: consumer not found")
		}
		c.send(typeAckResponse, res)
	}
	return nil
}

func (c *conn) redeliver(cmd fields) error {
	s := c.s
	var ids []uint64
	for _, b := range cmd.all(2) {
		id, err := decodeMessageID(b)
		if err != nil {
			return err
		}
		ids = append(ids, id.entry)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if cons := c.consumers[cmd.u64(1)]; cons != nil {
		if ids == nil {
			cons.sub.redeliver(cons, nil)
		} else {
			cons.sub.redeliver(cons, ids)
		}
	}
	return nil
}

func (c *conn) unsubscribe(cmd fields) {
	s := c.s
	id, reqID := cmd.u64(1), cmd.u64(2)
	s.mu.Lock()
	defer s.mu.Unlock()
	cons := c.consumers[id]
	if cons == nil {
		c.fail(reqID, errConsumerNotFound, "pulsarfake: consumer not found")
		return
	}
	sb := cons.sub
	if len(sb.consumers) > 1 && !cmd.boolean(3) {
		c.fail(reqID, errConsumerBusy, "pulsarfake: subscription has other consumers")
		return
	}
	for _, other := range slices.Clone(sb.consumers) {
		delete(other.c.consumers, other.id)
		sb.removeConsumer(other)
	}
	delete(sb.t.subs, sb.name)
	sb.t.trim()
	c.send(typeSuccess, msg(nil).uint(1, reqID))
}

func (c *conn) lastMessageID(cmd fields) {
	s := c.s
	id, reqID := cmd.u64(1), cmd.u64(2)
	s.mu.Lock()
	defer s.mu.Unlock()
	cons := c.consumers[id]
	if cons == nil {
		c.fail(reqID, errConsumerNotFound, "pulsarfake: consumer not found")
		return
	}
	t := cons.sub.t
	last := int64(len(t.entries)) - 1 // -1: the topic is empty
	c.send(typeGetLastMessageRes, msg(nil).
		sub(1, msg(nil).uint(1, t.ledger).int(2, last)).
		uint(2, reqID))
}
