package pulsarfake

import (
	"hash/fnv"
	"slices"
	"sort"
	"sync"
	"time"
)

// maxKeySharedLookahead bounds how many log entries a Key_Shared subscription
// sets aside for busy consumers before it stops reading ahead.
const maxKeySharedLookahead = 1000

// topic is a non-partitioned persistent topic: a log of entries in one ledger.
// It keeps what Pulsar keeps under its default retention: the entries some
// subscription has not acknowledged. An entry published while the topic has
// no subscription, or acknowledged by every subscription, is dropped; a
// subscription created later from the earliest position starts after it.
type topic struct {
	mu      *sync.Mutex // the server's: timers of delayed entries take it
	name    string
	ledger  uint64
	entries []*entry // indexed by entry id; nil below trimmed
	trimmed uint64   // entries below it are dropped
	subs    map[string]*subscription
}

// trim drops the entries no subscription holds any more.
func (t *topic) trim() {
	floor := uint64(len(t.entries))
	for _, sb := range t.subs {
		floor = min(floor, sb.markDelete)
	}
	for ; t.trimmed < floor; t.trimmed++ {
		t.entries[t.trimmed] = nil
	}
}

// entry is one stored SEND: a single message or a batch, kept as the client
// framed it (payload section from the magic number on) and delivered unchanged.
type entry struct {
	id        uint64
	section   []byte
	msgs      int    // messages in the entry: permits it consumes
	key       string // ordering key, else partition key: Key_Shared routing
	deliverAt int64  // deliver_at_time (Unix ms), 0 for none
}

func (t *topic) append(section []byte, msgs int, key string, deliverAt int64) *entry {
	e := &entry{id: uint64(len(t.entries)), section: section, msgs: max(msgs, 1), key: key, deliverAt: deliverAt}
	t.entries = append(t.entries, e)
	for _, sb := range t.subs {
		sb.dispatch()
	}
	t.trim() // no subscription: nobody keeps it
	return e
}

// subscription is a durable cursor on a topic with its consumers.
type subscription struct {
	t         *topic
	name      string
	kind      uint64 // subExclusive, subShared, subFailover, subKeyShared
	consumers []*consumer
	rr        int

	cursor       uint64              // next log entry never dispatched
	markDelete   uint64              // every entry below it is acknowledged
	acked        map[uint64]struct{} // acknowledged entries at or above markDelete
	replay       []uint64            // entries to dispatch again, ascending
	inReplay     map[uint64]struct{}
	holder       map[uint64]*consumer // dispatched, unacknowledged entries
	redeliveries map[uint64]uint32
}

func newSubscription(t *topic, name string, kind uint64, earliest bool) *subscription {
	sb := &subscription{
		t: t, name: name, kind: kind,
		acked: map[uint64]struct{}{}, inReplay: map[uint64]struct{}{},
		holder: map[uint64]*consumer{}, redeliveries: map[uint64]uint32{},
	}
	sb.cursor = t.trimmed // the earliest entry still kept
	if !earliest {
		sb.cursor = uint64(len(t.entries))
	}
	sb.markDelete = sb.cursor
	return sb
}

// consumer is one client consumer attached to a subscription.
type consumer struct {
	id      uint64
	name    string
	c       *conn
	sub     *subscription
	permits int
	unacked map[uint64]struct{}
}

func (sb *subscription) isAcked(id uint64) bool {
	if id < sb.markDelete {
		return true
	}
	_, ok := sb.acked[id]
	return ok
}

func (sb *subscription) addConsumer(c *consumer) {
	sb.consumers = append(sb.consumers, c)
	sb.kindSort()
}

// kindSort orders consumers so that the active one of a single-consumer
// subscription comes first (Failover picks by consumer name, like a broker does
// for a non-partitioned topic).
func (sb *subscription) kindSort() {
	if sb.kind == subFailover {
		sort.SliceStable(sb.consumers, func(i, j int) bool { return sb.consumers[i].name < sb.consumers[j].name })
	}
}

// removeConsumer detaches a consumer; its unacknowledged entries are
// dispatched again (without counting a redelivery, as a broker does).
func (sb *subscription) removeConsumer(c *consumer) {
	i := slices.Index(sb.consumers, c)
	if i < 0 {
		return
	}
	sb.consumers = slices.Delete(sb.consumers, i, i+1)
	for id := range c.unacked {
		delete(sb.holder, id)
		sb.addReplay(id)
	}
	clear(c.unacked)
	sb.dispatch()
}

func (sb *subscription) addReplay(id uint64) {
	if _, ok := sb.inReplay[id]; ok {
		return
	}
	sb.inReplay[id] = struct{}{}
	i, _ := slices.BinarySearch(sb.replay, id)
	sb.replay = slices.Insert(sb.replay, i, id)
}

// flow adds permits and dispatches.
func (sb *subscription) flow(c *consumer, n int) {
	c.permits += n
	sb.dispatch()
}

// ack acknowledges entries: one by one, or everything up to id (cumulative).
func (sb *subscription) ack(id uint64, cumulative bool) {
	if cumulative {
		for x := sb.markDelete; x <= id && x < uint64(len(sb.t.entries)); x++ {
			sb.ackOne(x)
		}
		return
	}
	sb.ackOne(id)
}

func (sb *subscription) ackOne(id uint64) {
	if id >= uint64(len(sb.t.entries)) || sb.isAcked(id) {
		return
	}
	sb.acked[id] = struct{}{}
	if h := sb.holder[id]; h != nil {
		delete(h.unacked, id)
		delete(sb.holder, id)
	}
	delete(sb.redeliveries, id)
	for {
		if _, ok := sb.acked[sb.markDelete]; !ok {
			break
		}
		delete(sb.acked, sb.markDelete)
		sb.markDelete++
	}
}

// redeliver returns a consumer's unacknowledged entries (all of them, or those
// listed) for dispatch again, counting one more redelivery for each.
func (sb *subscription) redeliver(c *consumer, ids []uint64) {
	if ids == nil {
		for id := range c.unacked {
			ids = append(ids, id)
		}
	}
	for _, id := range ids {
		if _, ok := c.unacked[id]; !ok {
			continue
		}
		delete(c.unacked, id)
		delete(sb.holder, id)
		sb.redeliveries[id]++
		sb.addReplay(id)
	}
	sb.dispatch()
}

// pop returns the next entry to dispatch: the oldest one waiting for
// redelivery, else the next one in the log.
func (sb *subscription) pop() *entry {
	for len(sb.replay) > 0 {
		id := sb.replay[0]
		sb.replay = sb.replay[1:]
		delete(sb.inReplay, id)
		if sb.isAcked(id) || sb.holder[id] != nil {
			continue
		}
		return sb.t.entries[id]
	}
	for sb.cursor < uint64(len(sb.t.entries)) {
		id := sb.cursor
		sb.cursor++
		if sb.isAcked(id) || sb.holder[id] != nil || sb.holdBack(sb.t.entries[id]) {
			continue
		}
		return sb.t.entries[id]
	}
	return nil
}

// holdBack sets an entry aside until its deliver_at_time when the
// subscription honours it (Shared and Key_Shared do, as in Pulsar; Exclusive
// and Failover deliver it at once). It reports whether it did; the entry
// comes back through the replay set when due.
func (sb *subscription) holdBack(e *entry) bool {
	if e.deliverAt == 0 || (sb.kind != subShared && sb.kind != subKeyShared) {
		return false
	}
	wait := time.Until(time.UnixMilli(e.deliverAt))
	if wait <= 0 {
		return false
	}
	mu := sb.t.mu
	time.AfterFunc(wait, func() {
		mu.Lock()
		defer mu.Unlock()
		if !sb.isAcked(e.id) && sb.holder[e.id] == nil {
			sb.addReplay(e.id)
			sb.dispatch()
		}
	})
	return true
}

func (sb *subscription) hasPermits() bool {
	for _, c := range sb.consumers {
		if c.permits > 0 {
			return true
		}
	}
	return false
}

// dispatch hands out entries while consumers have permits.
func (sb *subscription) dispatch() {
	if !sb.hasPermits() {
		return
	}
	switch sb.kind {
	case subShared:
		sb.dispatchShared()
	case subKeyShared:
		sb.dispatchKeyShared()
	default:
		sb.dispatchSingle()
	}
}

// dispatchShared round-robins entries among consumers that have permits.
func (sb *subscription) dispatchShared() {
	for {
		var c *consumer
		for i := range sb.consumers {
			cand := sb.consumers[(sb.rr+i)%len(sb.consumers)]
			if cand.permits > 0 {
				c = cand
				sb.rr = (sb.rr + i + 1) % len(sb.consumers)
				break
			}
		}
		if c == nil {
			return
		}
		e := sb.pop()
		if e == nil {
			return
		}
		sb.deliver(c, e)
	}
}

// dispatchSingle serves the active consumer of an Exclusive or Failover
// subscription.
func (sb *subscription) dispatchSingle() {
	c := sb.consumers[0]
	for c.permits > 0 {
		e := sb.pop()
		if e == nil {
			return
		}
		sb.deliver(c, e)
	}
}

// dispatchKeyShared routes each entry to the consumer owning its key's hash. An
// entry whose owner has no permits waits, and so does every later entry of the
// same key, which keeps per-key order.
func (sb *subscription) dispatchKeyShared() {
	blocked := map[string]bool{}
	waiting := sb.replay
	sb.replay = nil
	for _, id := range waiting {
		delete(sb.inReplay, id)
		if sb.isAcked(id) || sb.holder[id] != nil {
			continue
		}
		e := sb.t.entries[id]
		if c := sb.owner(e.key); !blocked[e.key] && c.permits > 0 {
			sb.deliver(c, e)
			continue
		}
		blocked[e.key] = true
		sb.replay = append(sb.replay, id)
		sb.inReplay[id] = struct{}{}
	}
	for sb.cursor < uint64(len(sb.t.entries)) && len(sb.replay) < maxKeySharedLookahead && sb.hasPermits() {
		id := sb.cursor
		sb.cursor++
		if sb.isAcked(id) || sb.holdBack(sb.t.entries[id]) {
			continue
		}
		e := sb.t.entries[id]
		if c := sb.owner(e.key); !blocked[e.key] && c.permits > 0 {
			sb.deliver(c, e)
			continue
		}
		blocked[e.key] = true
		sb.replay = append(sb.replay, id) // ids from the log are above every waiting one
		sb.inReplay[id] = struct{}{}
	}
}

// owner is the consumer a key hashes to. Ownership moves when consumers come
// and go (the fake has no sticky hash ranges).
func (sb *subscription) owner(key string) *consumer {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return sb.consumers[int(h.Sum32()%uint32(len(sb.consumers)))]
}

func (sb *subscription) deliver(c *consumer, e *entry) {
	c.permits -= e.msgs
	c.unacked[e.id] = struct{}{}
	sb.holder[e.id] = c
	cmd := msg(nil).uint(1, c.id).sub(2, messageIDData(sb.t.ledger, e.id))
	if n := sb.redeliveries[e.id]; n > 0 {
		cmd = cmd.uint(3, uint64(n))
	}
	c.c.sendFrame(baseCommand(typeMessage, cmd), e.section)
}
