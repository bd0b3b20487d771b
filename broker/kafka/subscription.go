package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/msgx/msgx/broker/driver"
)

// partKey names a partition of one of the subscription's two topics.
type partKey struct {
	topic string
	id    int32
}

// partState is this consumer's view of one owned partition.
type partState struct {
	s         *subscription
	key       partKey // of the subscription's topic or of its retry topic
	t         tracker
	inflight  int   // handed to the port and not settled
	committed int64 // last committed position, -1 before the first commit
	last      int64 // offset of the newest record registered
	live      bool  // false once revoked or lost: settlements no longer count
	revoking  bool  // a rebalance is waiting for its in-flight deliveries
}

// subscription is one consumer group member: a franz-go client of its own.
//
// Rebalances are blocked from the moment a poll returns until its records
// are registered in the partition trackers (BlockRebalanceOnPoll), so the
// trackers only ever hold records of partitions this member owns. On revoke
// the member stops handing out buffered records of the revoked partitions,
// waits (bounded) for the handlers of those already handed out, commits the
// settled prefix and forgets the partitions; later settlements of their
// deliveries fail with ErrRevoked and commit nothing.
type subscription struct {
	d    *Driver
	spec driver.SubscriptionSpec
	cl   *kgo.Client
	// retryTopic is the group's own topic for requeued messages (see
	// RetryTopic), consumed by the same client in the same group.
	retryTopic string
	// member is the static group.instance.id, "" for a dynamic member.
	member string

	// commitMu serialises commits with revocation, so no commit for a
	// partition can land after the revoke that gave it away.
	commitMu sync.Mutex

	mu       sync.Mutex
	parts    map[partKey]*partState
	buf      []*delivery // registered, not yet handed out
	bufHead  int
	inflight int // handed out, unsettled, on live partitions
	prefetch int
	closing  bool
	room     chan struct{} // a settlement freed prefetch room
	drained  chan struct{} // a revoking partition drained, or closing
	// rewinds are the positions released partitions are fetched again
	// from, applied by the polling goroutine (see release).
	rewinds    map[partKey]kgo.EpochOffset
	pollCancel context.CancelFunc // ends the poll under way, if any

	// waitingForRoom, when set (tests), is called as Receive starts waiting
	// for a settlement to free prefetch room.
	waitingForRoom func()

	stop     chan struct{}
	loopDone chan struct{}
	closeErr error
	once     sync.Once
}

// Subscribe implements driver.Broker: it creates the group member and returns
// at once; partitions are assigned asynchronously.
func (d *Driver) Subscribe(ctx context.Context, spec driver.SubscriptionSpec) (driver.Subscription, error) {
	prod, err := d.producer()
	if err != nil {
		return nil, err
	}
	if spec.Topic == "" || spec.Group == "" {
		return nil, errors.New("kafka: subscription needs a topic and a group")
	}
	if spec.Expiry > 0 {
		return nil, errors.New("kafka: subscription expiry is not supported")
	}
	if spec.DeadLetterTopic != "" {
		// A dead letter must have somewhere to go before the first one is
		// needed: a missing dead-letter topic would hold every poison
		// message until an operator created it.
		if err := ensureTopics(ctx, prod, topicSpec{name: spec.DeadLetterTopic, partitions: -1}); err != nil {
			return nil, fmt.Errorf("kafka: dead-letter topic of %s/%s: %w", spec.Topic, spec.Group, err)
		}
	}
	// Requeued copies go to a topic of the group's own, so that no other
	// group, and no other reader of the topic, ever sees them.
	retry, err := retryTopicSpec(ctx, prod, spec)
	if err == nil {
		err = ensureTopics(ctx, prod, retry)
	}
	if err != nil {
		return nil, fmt.Errorf("kafka: retry topic of %s/%s: %w", spec.Topic, spec.Group, err)
	}
	s := &subscription{
		d:          d,
		spec:       spec,
		retryTopic: retry.name,
		parts:      map[partKey]*partState{},
		prefetch:   max(spec.Prefetch, 1),
		room:       make(chan struct{}, 1),
		drained:    make(chan struct{}, 1),
		stop:       make(chan struct{}),
		loopDone:   make(chan struct{}),
	}
	opts := append([]kgo.Opt{
		// A new group starts from the oldest retained record, so a group's
		// first subscription sees what was published before it.
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(d.cfg.fetchMaxWait),
	}, d.groupTimeouts()...)
	opts = append(append(opts, d.cfg.consumerLimits()...), d.baseOpts()...)
	if d.cfg.instanceID != "" {
		s.member = d.claimMember(spec)
		opts = append(opts, kgo.InstanceID(s.member))
	}
	opts = append(opts,
		kgo.ConsumerGroup(spec.Group),
		// One client in one group for both topics: the retry topic's
		// partitions are balanced over the group's members, and revoked,
		// like the topic's own.
		kgo.ConsumeTopics(spec.Topic, s.retryTopic),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsRevoked(s.onRevoked),
		kgo.OnPartitionsLost(s.onLost),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		d.forget(s)
		return nil, fmt.Errorf("kafka: new consumer: %w", err)
	}
	s.cl = cl
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		cl.Close()
		d.forget(s)
		return nil, ErrNotStarted
	}
	d.subs[s] = struct{}{}
	d.mu.Unlock()
	go s.commitLoop()
	return s, nil
}

// groupTimeouts are the session options (before the client options, which
// may still override them).
func (d *Driver) groupTimeouts() []kgo.Opt {
	if d.cfg.sessionTimeout <= 0 {
		return nil
	}
	return []kgo.Opt{
		kgo.SessionTimeout(d.cfg.sessionTimeout),
		kgo.HeartbeatInterval(min(3*time.Second, d.cfg.sessionTimeout/3)),
	}
}

// Receive implements driver.Subscription. It hands out records already
// registered, and otherwise polls the client for at most the free prefetch
// room.
func (s *subscription) Receive(ctx context.Context, n int) ([]driver.Delivery, error) {
	n = max(n, 1)
	for {
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			return nil, driver.ErrClosed
		}
		if s.bufHead < len(s.buf) {
			out := s.takeLocked(n)
			s.mu.Unlock()
			return out, nil
		}
		room := s.prefetch - s.inflight
		s.mu.Unlock()
		if room <= 0 {
			if s.waitingForRoom != nil {
				s.waitingForRoom()
			}
			select {
			case <-s.room:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		// Rewinds are applied before polling (a poll would wait for records
		// after the old position), and a giveBack ends the poll under way.
		s.applyRewinds()
		pctx, cancel := context.WithCancel(ctx)
		s.mu.Lock()
		s.pollCancel = cancel
		s.mu.Unlock()
		fetches := s.cl.PollRecords(pctx, room)
		s.mu.Lock()
		s.pollCancel = nil
		s.mu.Unlock()
		cancel()
		err := s.register(fetches)
		s.cl.AllowRebalance()
		if err != nil {
			return nil, err
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
}

// takeLocked hands out up to n registered deliveries.
func (s *subscription) takeLocked(n int) []driver.Delivery {
	k := min(n, len(s.buf)-s.bufHead)
	out := make([]driver.Delivery, k)
	for i := range out {
		d := s.buf[s.bufHead]
		s.buf[s.bufHead] = nil
		s.bufHead++
		d.p.inflight++
		if d.retry {
			out[i] = (*retryDelivery)(d)
		} else {
			out[i] = d
		}
	}
	s.inflight += k
	if s.bufHead == len(s.buf) {
		s.buf, s.bufHead = s.buf[:0], 0
	}
	return out
}

// register turns polled records into deliveries and adds them to their
// partitions' trackers. It runs before AllowRebalance, while the member still
// owns every partition the poll returned.
func (s *subscription) register(fetches kgo.Fetches) error {
	var ferr error
	fetches.EachError(func(topic string, p int32, err error) {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, kgo.ErrClientClosed) {
			return
		}
		ferr = errors.Join(ferr, fmt.Errorf("kafka: fetch %s[%d]: %w", topic, p, err))
	})
	n := fetches.NumRecords()
	if n == 0 {
		return ferr
	}
	if ferr != nil {
		// Records came too: deliver them and report the error on the side.
		s.d.rep.Report(ferr)
	}
	// The deliveries of a poll share one array: an allocation per record costs
	// more than the rest of the driver's work.
	ds := make([]delivery, n)
	i := 0
	fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
		retry := fp.Topic != s.spec.Topic
		for _, r := range fp.Records {
			d := &ds[i]
			i++
			d.offset, d.epoch = r.Offset, r.LeaderEpoch
			d.msg.Key = aliasString(r.Key)
			d.msg.Payload = r.Value
			if n := len(r.Headers); n > 0 {
				d.msg.Headers = make(map[string]string, n)
				for _, h := range r.Headers {
					d.msg.Headers[h.Key] = string(h.Value)
				}
			}
			d.partition, d.retry = r.Partition, retry
		}
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return nil // never handed out nor tracked: redelivered after Close
	}
	// Records come grouped by partition: the maps are looked up only where
	// the partition changes, not per record.
	var (
		p      *partState
		k      partKey
		kRetry bool
		rewind bool
	)
	for i := range ds {
		d := &ds[i]
		if i == 0 || d.partition != k.id || d.retry != kRetry {
			k, kRetry = s.key(d.retry, d.partition), d.retry
			_, rewind = s.rewinds[k]
			p = s.parts[k]
		}
		if rewind {
			continue // fetched again from the rewound position
		}
		if p != nil && d.offset <= p.last {
			// The client rewound the partition (a reset after log truncation):
			// start a fresh tracker; the old one's deliveries no longer count.
			s.retireLocked(p)
			p = nil
		}
		if p == nil {
			p = &partState{s: s, key: k, committed: -1, live: true}
			s.parts[k] = p
		}
		d.p = p
		p.last = d.offset
		p.t.add(&d.entry)
		s.buf = append(s.buf, d)
	}
	return nil
}

// setOffset records pos for partition k in offs (the shape kgo takes
// offsets in), creating what is missing, and returns offs.
func setOffset(offs map[string]map[int32]kgo.EpochOffset, k partKey, pos kgo.EpochOffset) map[string]map[int32]kgo.EpochOffset {
	if offs == nil {
		offs = map[string]map[int32]kgo.EpochOffset{}
	}
	if offs[k.topic] == nil {
		offs[k.topic] = map[int32]kgo.EpochOffset{}
	}
	offs[k.topic][k.id] = pos
	return offs
}

// key is the map key of partition id of the topic (retry false) or of the
// retry topic.
func (s *subscription) key(retry bool, id int32) partKey {
	if retry {
		return partKey{s.retryTopic, id}
	}
	return partKey{s.spec.Topic, id}
}

// giveBack gives d back: Kafka cannot return one record, so its partition is
// rewound to the oldest unsettled record. The partition's tracker is retired
// at once (its buffered records dropped, the prefetch room of its deliveries
// freed, their later settlements failing with ErrRevoked) and the position is
// set by the polling goroutine before its next poll. Records after the rewound one that were settled are
// delivered again: a duplicate, never a loss.
func (s *subscription) giveBack(d *delivery) error {
	s.mu.Lock()
	p := d.p
	if !p.live || d.done {
		s.mu.Unlock()
		return ErrRevoked
	}
	pos, _ := p.t.position()
	s.retireLocked(p)
	if s.rewinds == nil {
		s.rewinds = map[partKey]kgo.EpochOffset{}
	}
	s.rewinds[p.key] = pos
	if s.pollCancel != nil {
		s.pollCancel()
	}
	s.mu.Unlock()
	signal(s.room)
	return nil
}

// applyRewinds sets the fetch positions of released partitions; it runs on
// the polling goroutine. A partition revoked meanwhile is skipped by
// SetOffsets, and its new owner resumes from the committed position, which is
// not after the rewound one.
func (s *subscription) applyRewinds() {
	s.mu.Lock()
	rw := s.rewinds
	s.rewinds = nil
	s.mu.Unlock()
	if len(rw) == 0 {
		return
	}
	var offs map[string]map[int32]kgo.EpochOffset
	for k, pos := range rw {
		offs = setOffset(offs, k, pos)
	}
	s.cl.SetOffsets(offs)
}

// retireLocked forgets p without committing: its buffered records are
// dropped and its deliveries' settlements fail with ErrRevoked.
func (s *subscription) retireLocked(p *partState) {
	kept := s.buf[:s.bufHead]
	for _, d := range s.buf[s.bufHead:] {
		if d.p != p {
			kept = append(kept, d)
		}
	}
	clear(s.buf[len(kept):])
	s.buf = kept
	p.live = false
	s.inflight -= p.inflight
	delete(s.parts, p.key)
}

// settle marks d done in its partition's tracker.
func (s *subscription) settle(d *delivery) error {
	s.mu.Lock()
	p := d.p
	if !p.live {
		s.mu.Unlock()
		return ErrRevoked
	}
	if d.done {
		s.mu.Unlock()
		return errors.New("kafka: delivery already settled")
	}
	p.t.settle(&d.entry)
	// Receive waits for room only when it found none: only the settlement
	// that makes room wakes it (a channel operation per message costs as
	// much as the rest of this function).
	full := s.inflight >= s.prefetch
	p.inflight--
	s.inflight--
	if p.revoking && p.inflight == 0 {
		signal(s.drained)
	}
	s.mu.Unlock()
	if full {
		signal(s.room)
	}
	return nil
}

// aliasString returns b as a string without copying it. A record's key, like
// its value, lives in the fetched batch's buffer, which the client never
// reuses: it would only take buffers back from records that are recycled, and
// this driver never recycles one. So the bytes never change, as a string
// requires, and copying each key would cost an allocation per record.
func aliasString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

func (s *subscription) owns(d *delivery) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return d.p.live && !d.done
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// commitLoop commits settled offsets every commit interval.
func (s *subscription) commitLoop() {
	defer close(s.loopDone)
	if s.d.cfg.commitInterval <= 0 {
		<-s.stop
		return
	}
	t := time.NewTicker(s.d.cfg.commitInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.commitMu.Lock()
		s.mu.Lock()
		offs, parts := s.positionsLocked(s.liveLocked(), false)
		s.mu.Unlock()
		err := s.commit(offs, parts)
		s.commitMu.Unlock()
		if err != nil {
			s.d.rep.Report(err)
		}
	}
}

func (s *subscription) liveLocked() []*partState {
	ps := make([]*partState, 0, len(s.parts))
	for _, p := range s.parts {
		ps = append(ps, p)
	}
	return ps
}

// positionsLocked collects the committable positions of ps that moved since
// their last commit; with forget it also retires the partitions, so that no
// later settlement changes what is committed for them.
func (s *subscription) positionsLocked(ps []*partState, forget bool) (map[string]map[int32]kgo.EpochOffset, []committedAt) {
	var offs map[string]map[int32]kgo.EpochOffset
	var at []committedAt
	for _, p := range ps {
		if pos, ok := p.t.position(); ok && pos.Offset > p.committed {
			offs = setOffset(offs, p.key, pos)
			at = append(at, committedAt{p, pos.Offset})
		}
		if forget {
			p.live = false
			s.inflight -= p.inflight
			delete(s.parts, p.key)
		}
	}
	return offs, at
}

type committedAt struct {
	p      *partState
	offset int64
}

// commit commits offs synchronously; the caller holds commitMu.
func (s *subscription) commit(offs map[string]map[int32]kgo.EpochOffset, at []committedAt) error {
	if len(offs) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.d.cfg.commitTimeout)
	defer cancel()
	var cerr error
	s.cl.CommitOffsetsSync(ctx, offs, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			cerr = err
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if e := kerr.ErrorForCode(p.ErrorCode); e != nil {
					cerr = errors.Join(cerr, fmt.Errorf("%s[%d]: %w", t.Topic, p.Partition, e))
				}
			}
		}
	})
	if cerr != nil {
		return fmt.Errorf("kafka: commit offsets of %s for group %s: %w", s.spec.Topic, s.spec.Group, cerr)
	}
	s.mu.Lock()
	for _, c := range at {
		c.p.committed = max(c.p.committed, c.offset)
	}
	s.mu.Unlock()
	return nil
}

// onRevoked runs when a rebalance takes partitions away (and when the member
// leaves). Polls are blocked meanwhile, so nothing new is registered.
func (s *subscription) onRevoked(_ context.Context, _ *kgo.Client, revoked map[string][]int32) {
	s.release(revoked, true)
}

// onLost runs when the group session failed: the partitions may already be
// someone else's, so nothing is committed for them.
func (s *subscription) onLost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	s.release(lost, false)
}

// release gives up the partitions of both topics named in topics.
func (s *subscription) release(topics map[string][]int32, commit bool) {
	if len(topics) == 0 {
		return
	}
	s.commitMu.Lock()
	defer s.commitMu.Unlock()

	s.mu.Lock()
	var ps []*partState
	gone := map[*partState]bool{}
	for topic, ids := range topics {
		for _, id := range ids {
			if p := s.parts[partKey{topic, id}]; p != nil {
				ps = append(ps, p)
				gone[p] = true
			}
		}
	}
	if len(ps) == 0 {
		s.mu.Unlock()
		return
	}
	// Undelivered records of those partitions go back to the broker: the
	// new owner resumes from the committed position, which is before them.
	kept := s.buf[:s.bufHead]
	for _, d := range s.buf[s.bufHead:] {
		if !gone[d.p] {
			kept = append(kept, d)
		}
	}
	clear(s.buf[len(kept):])
	s.buf = kept
	if commit {
		for _, p := range ps {
			if p.inflight > 0 {
				p.revoking = true
			}
		}
	}
	s.mu.Unlock()

	if commit {
		s.awaitDrain(ps)
	}

	s.mu.Lock()
	offs, at := s.positionsLocked(ps, true)
	for _, p := range ps {
		p.revoking = false
	}
	s.mu.Unlock()
	signal(s.room)
	if commit {
		if err := s.commit(offs, at); err != nil {
			s.d.rep.Report(err)
		}
	}
}

// awaitDrain waits until the in-flight deliveries of ps are settled, the
// subscription closes or the revoke timeout passes.
func (s *subscription) awaitDrain(ps []*partState) {
	deadline := time.NewTimer(s.d.cfg.revokeTimeout)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		busy := false
		for _, p := range ps {
			busy = busy || p.inflight > 0
		}
		closing := s.closing
		s.mu.Unlock()
		if !busy || closing {
			return
		}
		select {
		case <-s.drained:
		case <-deadline.C:
			s.d.cfg.logger.Warn("kafka: revoking partitions with unsettled deliveries; they will be redelivered",
				"topic", s.spec.Topic, "group", s.spec.Group)
			return
		}
	}
}

// Close implements driver.Subscription: it stops handing out deliveries,
// commits the settled prefix of every partition and leaves the group.
// Unsettled deliveries are redelivered to the group. A static member (see
// WithInstanceID) does not leave: its partitions wait for it to come back,
// or for its session timeout.
func (s *subscription) Close(ctx context.Context) error {
	s.once.Do(func() {
		s.mu.Lock()
		s.closing = true
		s.mu.Unlock()
		signal(s.drained)
		signal(s.room)
		close(s.stop)
		<-s.loopDone

		s.commitMu.Lock()
		s.mu.Lock()
		offs, at := s.positionsLocked(s.liveLocked(), true)
		s.buf, s.bufHead = nil, 0
		s.mu.Unlock()
		s.closeErr = s.commit(offs, at)
		s.commitMu.Unlock()

		// Leaving the group runs onRevoked, which finds nothing left.
		s.cl.CloseAllowingRebalance()
		s.d.forget(s)
	})
	return s.closeErr
}

// delivery is one record handed to the port. Its subscription is p.s: one
// pointer less per record.
type delivery struct {
	entry
	p         *partState
	msg       driver.Message
	partition int32
	retry     bool // read from the retry topic: handed out as a retryDelivery
}

func (d *delivery) Message() *driver.Message { return &d.msg }

// Ack implements driver.Delivery.
func (d *delivery) Ack(context.Context) error { return d.p.s.settle(d) }

// Requeue implements driver.Delivery: Kafka has no per-message nack, so the
// message (with the port's updated headers) is re-published with its key to
// the group's retry topic, which only this group reads, confirmed, and then
// the original is settled. The delay is carried by the port's not-before
// header.
func (d *delivery) Requeue(ctx context.Context, msg *driver.Message, _ time.Duration) error {
	s := d.p.s
	if !s.owns(d) {
		return ErrRevoked
	}
	if err := s.d.Publish(ctx, s.retryTopic, []*driver.Message{msg}); err != nil {
		return fmt.Errorf("kafka: requeue to %s: %w", s.retryTopic, err)
	}
	return s.settle(d)
}

// Release implements driver.Delivery: msg is re-published to the back of the
// group's retry topic and the original settled, so that a message whose
// settlement keeps failing does not hold its partition; when that publish
// fails too, the partition is rewound to the oldest unsettled record (see
// subscription.giveBack).
func (d *delivery) Release(ctx context.Context, msg *driver.Message, delay time.Duration) error {
	err := d.Requeue(ctx, msg, delay)
	if err == nil || errors.Is(err, driver.ErrNotHeld) {
		return err
	}
	return d.p.s.giveBack(d)
}

// DeadLetter implements driver.Delivery: a confirmed publish to the
// dead-letter topic, then the original is settled. If the publish fails
// nothing is settled.
func (d *delivery) DeadLetter(ctx context.Context, msg *driver.Message) error {
	s := d.p.s
	if !s.owns(d) {
		return ErrRevoked
	}
	if err := s.d.Publish(ctx, s.spec.DeadLetterTopic, []*driver.Message{msg}); err != nil {
		return fmt.Errorf("kafka: dead-letter to %s: %w", s.spec.DeadLetterTopic, err)
	}
	return s.settle(d)
}

// retryDelivery is a delivery read from the retry topic. It is not
// driver.Positioned: the port names the subscription's topic for every
// delivery, and there this partition and offset are another record's, so a
// consumer taking the position for the record's identity would confuse the
// two. The conversion from a delivery allocates nothing.
type retryDelivery delivery

func (r *retryDelivery) Message() *driver.Message { return &r.msg }

// Ack implements driver.Delivery.
func (r *retryDelivery) Ack(ctx context.Context) error { return (*delivery)(r).Ack(ctx) }

// Requeue implements driver.Delivery: to the retry topic again.
func (r *retryDelivery) Requeue(ctx context.Context, msg *driver.Message, delay time.Duration) error {
	return (*delivery)(r).Requeue(ctx, msg, delay)
}

// Release implements driver.Delivery.
func (r *retryDelivery) Release(ctx context.Context, msg *driver.Message, delay time.Duration) error {
	return (*delivery)(r).Release(ctx, msg, delay)
}

// DeadLetter implements driver.Delivery.
func (r *retryDelivery) DeadLetter(ctx context.Context, msg *driver.Message) error {
	return (*delivery)(r).DeadLetter(ctx, msg)
}
