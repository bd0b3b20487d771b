package workload

import (
	"testing"
	"time"
)

func TestEventsAreTheSpecifiedWorkload(t *testing.T) {
	c := Config{Keys: 7}
	gen := newEvents(c, 1000)
	keys := map[string]bool{}
	for i, e := range gen.batch(0, 1000) {
		if len(e.Payload) != PayloadSize {
			t.Fatalf("event %d: payload is %d bytes, want %d", i, len(e.Payload), PayloadSize)
		}
		seq, err := SeqOf(e.Payload)
		if err != nil || seq != i || e.Seq != i {
			t.Fatalf("event %d: SeqOf = %d, %v; Seq = %d", i, seq, err, e.Seq)
		}
		keys[e.Key] = true
	}
	if len(keys) != c.Keys {
		t.Fatalf("drew %d distinct keys, want %d", len(keys), c.Keys)
	}
	if again := newEvents(c, 1000).batch(500, 501)[0]; again.Key != gen.keys[500] {
		t.Fatalf("the key stream is not deterministic: %q vs %q", again.Key, gen.keys[500])
	}
}

func TestSinkCountsFirstDeliveriesAndDuplicates(t *testing.T) {
	gen := newEvents(Config{Keys: 3}, 2)
	evs := gen.batch(0, 2)
	s := newSink(2, time.Now())
	for _, p := range [][]byte{evs[0].Payload, evs[0].Payload, evs[1].Payload} {
		if err := s.Deliver(p); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-s.all:
	default:
		t.Fatal("sink not complete after both events")
	}
	if s.delivered.Load() != 2 || s.dups.Load() != 1 {
		t.Fatalf("delivered=%d dups=%d, want 2 and 1", s.delivered.Load(), s.dups.Load())
	}
	if err := s.Deliver([]byte("0000000009 beyond the run")); err == nil {
		t.Fatal("a sequence number outside the run was accepted")
	}
}

func TestResultLineFormat(t *testing.T) {
	c := Config{Peer: "river", Mode: "live"}
	lats := []time.Duration{3 * time.Millisecond, time.Millisecond, 2 * time.Millisecond}
	got := result(c, 5000, 2*time.Second, lats, nil, [][2]string{{"keys", "1000"}}).Line()
	want := "RESULT peer=river workload=outbox-relay mode=live n=5000 seconds=2.000 per_sec=2500 lat_p50_ms=2.00 lat_p99_ms=2.00 keys=1000"
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}
