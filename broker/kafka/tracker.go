package kafka

import "github.com/twmb/franz-go/pkg/kgo"

// entry is one fetched record of a partition, from the moment it is taken
// from the client until it is settled.
type entry struct {
	offset int64
	epoch  int32
	done   bool
}

// tracker follows the outstanding offsets of one partition and yields the
// position that may be committed: the offset of the oldest record not yet
// settled, or the offset after the newest record when all are settled.
// Records are added in offset order (as a partition is fetched) but may be
// settled in any order, so a committed position never passes an unfinished
// record. Offsets may have gaps (compaction, transaction markers).
type tracker struct {
	pending []*entry // from head: oldest first
	head    int
	next    kgo.EpochOffset // position after the newest settled prefix
	seen    bool            // at least one record was added
}

// add appends a record taken from the partition. Its offset must be greater
// than every offset added before.
func (t *tracker) add(e *entry) {
	if !t.seen {
		t.seen = true
		t.next = kgo.EpochOffset{Epoch: e.epoch, Offset: e.offset}
	}
	if t.head > 0 && t.head == len(t.pending) {
		// Everything before was settled: reuse the backing array.
		clear(t.pending)
		t.pending, t.head = t.pending[:0], 0
	} else if t.head > 32 && t.head*2 > len(t.pending) {
		// Shift the live tail down so the array does not grow without bound.
		n := copy(t.pending, t.pending[t.head:])
		clear(t.pending[n:])
		t.pending, t.head = t.pending[:n], 0
	}
	t.pending = append(t.pending, e)
}

// settle marks e done and drops the settled prefix. It reports whether the
// committable position moved.
func (t *tracker) settle(e *entry) bool {
	e.done = true
	moved := false
	for t.head < len(t.pending) && t.pending[t.head].done {
		p := t.pending[t.head]
		t.pending[t.head] = nil
		t.head++
		t.next = kgo.EpochOffset{Epoch: p.epoch, Offset: p.offset + 1}
		moved = true
	}
	return moved
}

// position returns the offset the group may commit for this partition: every
// record before it is settled. ok is false when no record was ever added.
func (t *tracker) position() (pos kgo.EpochOffset, ok bool) {
	if !t.seen {
		return kgo.EpochOffset{}, false
	}
	if t.head < len(t.pending) {
		e := t.pending[t.head]
		return kgo.EpochOffset{Epoch: e.epoch, Offset: e.offset}, true
	}
	return t.next, true
}

// outstanding is the number of records added and not yet dropped from the
// settled prefix (unsettled ones and settled ones behind an unsettled one).
func (t *tracker) outstanding() int { return len(t.pending) - t.head }
