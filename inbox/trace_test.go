package inbox_test

import (
	"context"
	"sync"
	"testing"

	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// traceProc records the trace context each processed message carries.
type traceProc struct {
	mu  sync.Mutex
	got map[int64][2]string
}

func (p *traceProc) Decode(b []byte) (inbox.Decoded, error) { return inbox.Decoded{Kind: "t"}, nil }

func (p *traceProc) Process(_ context.Context, _ store.Tx, m *inbox.Message) (inbox.Outcome, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.got[m.ID] = [2]string{m.TraceParent, m.TraceState}
	return inbox.Done(), nil
}

const (
	tp1 = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tp2 = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
)

// The trace context a message is enqueued with reaches its processor; a
// message taken in without one (the poller's) gets the one of a later
// enqueue of the same id (the ingress's), but one it has is never replaced.
func TestTraceContextReachesTheProcessor(t *testing.T) {
	storetest.Each(t, []store.Line{inbox.Schema(), outbox.Schema()}, func(t *testing.T, db *store.DB) {
		f := newFixture(t, db)
		proc := &traceProc{got: map[int64][2]string{}}
		eng := f.engine("tr", proc)
		f.lead(eng)
		enqueue := func(msgs ...inbox.Incoming) {
			t.Helper()
			if err := db.InTx(context.Background(), func(ctx context.Context, tx store.Tx) error {
				_, err := inbox.Enqueue(ctx, tx, "tr", f.clk.Now(), msgs...)
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}
		enqueue(inbox.Incoming{ID: 1, Payload: []byte("a"), TraceParent: tp1, TraceState: "v=1"},
			inbox.Incoming{ID: 2, Payload: []byte("b")}, inbox.Incoming{ID: 3, Payload: []byte("c")})
		enqueue(inbox.Incoming{ID: 2, Payload: []byte("b"), TraceParent: tp2},
			inbox.Incoming{ID: 1, Payload: []byte("a"), TraceParent: tp2})
		f.drain(eng)
		want := map[int64][2]string{1: {tp1, "v=1"}, 2: {tp2, ""}, 3: {"", ""}}
		for id, w := range want {
			if proc.got[id] != w {
				t.Errorf("message %d: trace %q, want %q", id, proc.got[id], w)
			}
		}
	})
}

// NextID starts above every id the stream has (its archive's too) and
// counts on, per stream.
func TestNextID(t *testing.T) {
	storetest.Each(t, []store.Line{inbox.Schema(), outbox.Schema()}, func(t *testing.T, db *store.DB) {
		f := newFixture(t, db)
		f.enqueue("a", map[int64]string{41: "x"})
		if _, err := db.Exec(context.Background(), ph(db, "INSERT INTO msgx_inbox_hst (stream, msg_id, payload, status, attempts, received_at, archived_at) VALUES ($1, $2, $3, $4, 0, $5, $5)"),
			"a", 50, []byte("y"), "SUCCEEDED", f.clk.Now()); err != nil {
			t.Fatal(err)
		}
		next := func(stream string) int64 {
			t.Helper()
			var id int64
			if err := db.InTx(context.Background(), func(ctx context.Context, tx store.Tx) (err error) {
				id, err = inbox.NextID(ctx, tx, stream)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			return id
		}
		if a1, a2, b1 := next("a"), next("a"), next("b"); a1 != 51 || a2 != 52 || b1 != 1 {
			t.Errorf("ids %d, %d, %d; want 51, 52 and 1", a1, a2, b1)
		}
	})
}
