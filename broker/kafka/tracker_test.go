package kafka

import (
	"math/rand/v2"
	"testing"
)

func addAll(t *tracker, offsets ...int64) []*entry {
	es := make([]*entry, len(offsets))
	for i, o := range offsets {
		es[i] = &entry{offset: o, epoch: 3}
		t.add(es[i])
	}
	return es
}

func wantPos(t *testing.T, tr *tracker, want int64) {
	t.Helper()
	pos, ok := tr.position()
	if !ok {
		t.Fatalf("position not known, want %d", want)
	}
	if pos.Offset != want {
		t.Fatalf("position = %d, want %d", pos.Offset, want)
	}
}

func TestTrackerEmpty(t *testing.T) {
	var tr tracker
	if _, ok := tr.position(); ok {
		t.Fatal("an empty tracker must not offer a position to commit")
	}
}

func TestTrackerNothingSettled(t *testing.T) {
	var tr tracker
	addAll(&tr, 10, 11, 12)
	// Nothing done: the position is the first record itself (re-consume it).
	wantPos(t, &tr, 10)
}

func TestTrackerInOrder(t *testing.T) {
	var tr tracker
	es := addAll(&tr, 0, 1, 2)
	for i, e := range es {
		if !tr.settle(e) {
			t.Fatalf("settling offset %d in order must move the position", e.offset)
		}
		wantPos(t, &tr, int64(i+1))
	}
	if tr.outstanding() != 0 {
		t.Fatalf("outstanding = %d after settling everything", tr.outstanding())
	}
}

func TestTrackerOutOfOrderNeverPassesUnfinished(t *testing.T) {
	var tr tracker
	es := addAll(&tr, 0, 1, 2, 3, 4, 5)
	// 5 of 6 complete, but offset 2 is still running.
	for _, i := range []int{5, 3, 1, 0, 4} {
		tr.settle(es[i])
	}
	wantPos(t, &tr, 2)
	if tr.settle(es[2]) != true {
		t.Fatal("settling the blocking offset must move the position")
	}
	wantPos(t, &tr, 6)
}

func TestTrackerSettleBehindGapDoesNotMove(t *testing.T) {
	var tr tracker
	es := addAll(&tr, 0, 1, 2)
	if tr.settle(es[2]) {
		t.Fatal("settling the last offset while the first is open must not move the position")
	}
	wantPos(t, &tr, 0)
}

func TestTrackerOffsetGaps(t *testing.T) {
	// Compacted topics and transaction markers leave holes in the offsets.
	var tr tracker
	es := addAll(&tr, 100, 105, 230)
	tr.settle(es[0])
	wantPos(t, &tr, 105) // the next unfinished record, not 101
	tr.settle(es[2])
	wantPos(t, &tr, 105)
	tr.settle(es[1])
	wantPos(t, &tr, 231)
	pos, _ := tr.position()
	if pos.Epoch != 3 {
		t.Fatalf("epoch = %d, want the last record's epoch 3", pos.Epoch)
	}
}

func TestTrackerUndeliveredTailHoldsPosition(t *testing.T) {
	// Records registered but not yet handed to a handler are unsettled too.
	var tr tracker
	es := addAll(&tr, 0, 1)
	tr.settle(es[0])
	addAll(&tr, 2, 3)
	tr.settle(es[1])
	wantPos(t, &tr, 2)
}

func TestTrackerRandomisedAgainstModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 200; round++ {
		var tr tracker
		var es []*entry
		next := int64(rng.IntN(1000))
		open := map[int]bool{}
		for step := 0; step < 300; step++ {
			if rng.IntN(3) > 0 || len(open) == 0 {
				next += 1 + int64(rng.IntN(3)) // gaps
				e := &entry{offset: next}
				tr.add(e)
				open[len(es)] = true
				es = append(es, e)
			} else {
				// settle a random open entry
				k := rng.IntN(len(open))
				for i := range open {
					if k == 0 {
						tr.settle(es[i])
						delete(open, i)
						break
					}
					k--
				}
			}
			// Model: first open entry's offset, or last offset + 1.
			want := es[len(es)-1].offset + 1
			for i, e := range es {
				if open[i] {
					want = e.offset
					break
				}
			}
			pos, ok := tr.position()
			if !ok || pos.Offset != want {
				t.Fatalf("round %d step %d: position = %d (ok %v), want %d", round, step, pos.Offset, ok, want)
			}
			if tr.outstanding() > len(es) {
				t.Fatalf("outstanding %d > added %d", tr.outstanding(), len(es))
			}
		}
	}
}
