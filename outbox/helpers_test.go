package outbox_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// sent is one message a sink received.
type sent struct {
	topic string
	msg   broker.Message
}

// sink is a test publisher: it records what it is sent, and fail, when set,
// decides per call whether the send fails (after or instead of storing).
type sink struct {
	mu   sync.Mutex
	got  []sent
	fail func(topic string, msgs []*broker.Message) (store bool, err error)
	// block, when non-nil, is closed by the test to let sends return; until
	// then sends wait (or end with their context).
	block   chan struct{}
	entered chan int // receives len(msgs) when a send starts, if non-nil
}

func (s *sink) SendConfirmed(ctx context.Context, topic string, msgs ...*broker.Message) error {
	if s.entered != nil {
		s.entered <- len(msgs)
	}
	if s.block != nil {
		select {
		case <-s.block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	keep, err := true, error(nil)
	if s.fail != nil {
		keep, err = s.fail(topic, msgs)
	}
	if keep {
		for _, m := range msgs {
			s.got = append(s.got, sent{topic: topic, msg: *m})
		}
	}
	return err
}

func (s *sink) messages() []sent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sent(nil), s.got...)
}

func (s *sink) ids() []string {
	var out []string
	for _, m := range s.messages() {
		out = append(out, m.msg.Header(broker.HeaderEventID))
	}
	return out
}

func (s *sink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.got)
}

func newRelay(t testing.TB, db *store.DB, clk clock.Clock, opts ...outbox.Option) *outbox.Relay {
	t.Helper()
	r, err := outbox.NewRelay(db, append([]outbox.Option{outbox.WithClock(clk), outbox.WithDatabaseClock(false), outbox.WithLogger(testkit.Quiet())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

func enqueue(t testing.TB, db *store.DB, now time.Time, evs ...outbox.Event) {
	t.Helper()
	if err := db.InTx(context.Background(), func(ctx context.Context, tx store.Tx) error {
		return outbox.Enqueue(ctx, tx, now, evs...)
	}); err != nil {
		t.Fatal(err)
	}
}

// ev builds an event whose id and payload say its key and sequence.
func ev(target, key string, seq int) outbox.Event {
	return outbox.Event{
		ID: fmt.Sprintf("%s-%s-%d", target, key, seq), Target: target, Topic: "topic." + target, Key: key,
		Payload: []byte(key + ":" + strconv.Itoa(seq)),
	}
}

func flush(t testing.TB, r *outbox.Relay) outbox.Stats {
	t.Helper()
	st, err := r.Flush(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func get(t testing.TB, db *store.DB, id string) outbox.Record {
	t.Helper()
	rec, err := outbox.Get(context.Background(), db, id)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// countStatus counts the rows of a status: PENDING and DEAD in msgx_outbox,
// SENT and COVERED in msgx_outbox_sent.
func countStatus(t testing.TB, db *store.DB, status outbox.Status) int {
	t.Helper()
	table := "msgx_outbox"
	if status == outbox.StatusSent || status == outbox.StatusCovered {
		table = "msgx_outbox_sent"
	}
	q := "SELECT COUNT(*) FROM " + table + " WHERE status = " + param(db, 1)
	var n int
	if err := db.QueryRow(context.Background(), q, string(status)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// param is the n-th placeholder of db's dialect.
func param(db *store.DB, n int) string {
	if db.Dialect() == store.SQLite {
		return "?" + strconv.Itoa(n)
	}
	return "$" + strconv.Itoa(n)
}

// byKey groups the messages a sink got by key, in arrival order.
func byKey(msgs []sent) map[string][]string {
	out := map[string][]string{}
	for _, m := range msgs {
		out[m.msg.Key] = append(out[m.msg.Key], m.msg.Header(broker.HeaderEventID))
	}
	return out
}

// lastOf is the id of the last message of key the sink got ("" if none).
func lastOf(s *sink, key string) string {
	ids := byKey(s.messages())[key]
	if len(ids) == 0 {
		return ""
	}
	return ids[len(ids)-1]
}
