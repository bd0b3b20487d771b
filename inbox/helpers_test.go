package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
)

// patience bounds every wait of these tests for a condition.
const patience = 10 * time.Second

var t0 = time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)

// testProc is a scriptable processor. A payload is "identity;kind"; what a
// message does on each attempt is scripted per id.
type testProc struct {
	mu sync.Mutex
	// script[id] lists the behaviour per attempt (the last entry repeats):
	// "ok", "skip", "fail:CLASS", "panic", "block", "commitfail", "badstatus",
	// "okbatch" (also writes a parent row with ExecBatch), "batchdup" (an
	// ExecBatch write that breaks the business row's key), "commitwait" (a
	// deferred foreign key on parent 424243, checked at COMMIT: the commit
	// waits while another transaction is deleting that parent, and fails
	// once it is gone).
	script map[int64][]string
	// order records the ids whose Process ran, in order (across rollbacks).
	order []int64
	// blocked receives the id of a message that blocks until cancelled.
	blocked chan int64
	name    string
	// codecFixed makes "codec:<payload>" decode as <payload>.
	codecFixed bool
	// decoded records the payloads Decode read, in order.
	decoded []string
}

func newProc() *testProc {
	return &testProc{script: map[int64][]string{}, blocked: make(chan int64, 16)}
}

func (p *testProc) set(id int64, steps ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.script[id] = steps
}

func (p *testProc) ran() []int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]int64(nil), p.order...)
}

func (p *testProc) decodedPayloads() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.decoded...)
}

func (p *testProc) Decode(b []byte) (inbox.Decoded, error) {
	s := string(b)
	p.mu.Lock()
	p.decoded = append(p.decoded, s)
	p.mu.Unlock()
	switch {
	case s == "garbage":
		return inbox.Decoded{}, inbox.Failf(inbox.Malformed, "not a message")
	case s == "codec":
		return inbox.Decoded{}, errors.New("codec cannot read this yet")
	case s == "decodepanic":
		panic("decoder bug")
	case strings.HasPrefix(s, "codec:"):
		p.mu.Lock()
		fixed := p.codecFixed
		p.mu.Unlock()
		if !fixed {
			return inbox.Decoded{}, errors.New("codec cannot read this yet")
		}
		s = strings.TrimPrefix(s, "codec:")
	}
	identity, kind, _ := strings.Cut(s, ";")
	return inbox.Decoded{Identity: identity, Kind: kind, Value: s}, nil
}

func (p *testProc) Process(ctx context.Context, tx store.Tx, msg *inbox.Message) (inbox.Outcome, error) {
	p.mu.Lock()
	p.order = append(p.order, msg.ID)
	steps := p.script[msg.ID]
	p.mu.Unlock()
	step := "ok"
	if len(steps) > 0 {
		i := msg.Attempt - 1
		if i >= len(steps) {
			i = len(steps) - 1
		}
		step = steps[i]
	}
	// Every attempt writes first, so a rollback has something to undo.
	if _, err := tx.Exec(ctx, ph(tx, "INSERT INTO biz (stream, msg_id, identity, attempt, worker) VALUES ($1, $2, $3, $4, $5)"),
		msg.Stream, msg.ID, msg.Identity, msg.Attempt, p.name); err != nil {
		return inbox.Outcome{}, err
	}
	if err := outbox.Enqueue(ctx, tx, msg.Now, outbox.Event{
		ID: fmt.Sprintf("%s:%d", msg.Stream, msg.ID), Target: "kafka:msg", Topic: "msg", Key: msg.Identity, Payload: msg.Payload,
	}); err != nil {
		return inbox.Outcome{}, err
	}
	switch {
	case step == "ok":
		return inbox.Done(), nil
	case step == "skip":
		return inbox.Skip("ignored"), nil
	case strings.HasPrefix(step, "fail:"):
		return inbox.Outcome{}, inbox.Fail(inbox.Class(strings.TrimPrefix(step, "fail:")), errors.New("scripted failure"))
	case step == "plain":
		return inbox.Outcome{}, errors.New("unclassified failure")
	case step == "panic":
		panic("processor bug")
	case step == "badstatus":
		return inbox.Outcome{Status: inbox.Dead}, nil
	case step == "block":
		p.blocked <- msg.ID
		<-ctx.Done()
		return inbox.Outcome{}, fmt.Errorf("interrupted: %w", ctx.Err())
	case step == "okbatch":
		return inbox.Done(), tx.ExecBatch(ctx, store.Stmt{SQL: ph(tx, "INSERT INTO parent (id) VALUES ($1)"), Args: []any{msg.ID}})
	case step == "batchdup":
		// Under group commit on PostgreSQL this write is held back: its
		// failure shows only when the batch's statements are sent.
		return inbox.Done(), tx.ExecBatch(ctx,
			store.Stmt{SQL: ph(tx, "INSERT INTO parent (id) VALUES ($1)"), Args: []any{msg.ID}},
			store.Stmt{SQL: ph(tx, "INSERT INTO biz (stream, msg_id, attempt) VALUES ($1, $2, 0)"), Args: []any{msg.Stream, msg.ID}})
	case step == "commitwait":
		if _, err := tx.Exec(ctx, ph(tx, "INSERT INTO child (id, parent_id) VALUES ($1, 424243)"), msg.ID); err != nil {
			return inbox.Outcome{}, err
		}
		return inbox.Done(), nil
	case step == "commitfail":
		// A deferred foreign key fails only at COMMIT.
		if _, err := tx.Exec(ctx, ph(tx, "INSERT INTO child (id, parent_id) VALUES ($1, 424242)"), msg.ID); err != nil {
			return inbox.Outcome{}, err
		}
		return inbox.Done(), nil
	}
	return inbox.Outcome{}, fmt.Errorf("unknown step %q", step)
}

// ph rewrites $n placeholders for SQLite.
func ph(q store.Querier, s string) string {
	if q.Dialect() == store.SQLite {
		return strings.ReplaceAll(s, "$", "?")
	}
	return s
}

func setupTables(t *testing.T, db *store.DB) {
	t.Helper()
	for _, s := range []string{
		"CREATE TABLE biz (stream TEXT NOT NULL, msg_id BIGINT NOT NULL, identity TEXT, attempt INTEGER, worker TEXT, PRIMARY KEY (stream, msg_id))",
		"CREATE TABLE parent (id BIGINT PRIMARY KEY)",
		"CREATE TABLE child (id BIGINT PRIMARY KEY, parent_id BIGINT REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED)",
	} {
		if _, err := db.Exec(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
}

type fixture struct {
	t      *testing.T
	db     *store.DB
	clk    *clock.Fake
	proc   *testProc
	eng    *inbox.Engine
	stream string
}

func newFixture(t *testing.T, db *store.DB, opts ...inbox.Option) *fixture {
	t.Helper()
	setupTables(t, db)
	f := &fixture{t: t, db: db, clk: clock.NewFake(t0), proc: newProc(), stream: "s1"}
	f.eng = f.engine(f.stream, f.proc, opts...)
	return f
}

func (f *fixture) engine(stream string, p inbox.Processor, opts ...inbox.Option) *inbox.Engine {
	f.t.Helper()
	// Step-driven tests move the clock by hours: a lease that outlives them.
	base := []inbox.Option{inbox.WithClock(f.clk), inbox.WithDatabaseClock(false), inbox.WithOwner("test-" + stream), inbox.WithLogger(testkit.Quiet()), inbox.WithLease(1000 * time.Hour),
		inbox.WithLeaseTimesFromClock()}
	eng, err := inbox.New(f.db, stream, p, append(base, opts...)...)
	if err != nil {
		f.t.Fatal(err)
	}
	return eng
}

// lead takes the lease so Step may run.
func (f *fixture) lead(e *inbox.Engine) {
	f.t.Helper()
	ok, err := e.AcquireLease(context.Background())
	if err != nil || !ok {
		f.t.Fatalf("acquire lease: %v %v", ok, err)
	}
}

func (f *fixture) enqueue(stream string, payloads map[int64]string) {
	f.t.Helper()
	var msgs []inbox.Incoming
	for id, p := range payloads {
		msgs = append(msgs, inbox.Incoming{ID: id, Payload: []byte(p)})
	}
	err := f.db.InTx(context.Background(), func(ctx context.Context, tx store.Tx) error {
		_, err := inbox.Enqueue(ctx, tx, stream, f.clk.Now(), msgs...)
		return err
	})
	if err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) step(e *inbox.Engine) (bool, time.Time) {
	f.t.Helper()
	progress, wake, err := e.Step(context.Background())
	if err != nil {
		f.t.Fatalf("step: %v", err)
	}
	return progress, wake
}

// drain steps until the pump has nothing ready.
func (f *fixture) drain(e *inbox.Engine) {
	f.t.Helper()
	for range 1000 {
		if progress, _ := f.step(e); !progress {
			return
		}
	}
	f.t.Fatal("pump never settled")
}

func (f *fixture) row(stream string, id int64) inbox.Row {
	f.t.Helper()
	r, err := inbox.Get(context.Background(), f.db, stream, id)
	if err != nil {
		f.t.Fatalf("get %d: %v", id, err)
	}
	return r
}

func (f *fixture) status(id int64) inbox.Status { f.t.Helper(); return f.row(f.stream, id).Status }

func (f *fixture) wantStatus(want map[int64]inbox.Status) {
	f.t.Helper()
	for id, s := range want {
		if got := f.status(id); got != s {
			f.t.Errorf("message %d: status %s, want %s (%+v)", id, got, s, f.row(f.stream, id))
		}
	}
}

func (f *fixture) count(q string, args ...any) int {
	f.t.Helper()
	var n int
	if err := f.db.QueryRow(context.Background(), ph(f.db, q), args...).Scan(&n); err != nil {
		f.t.Fatalf("%s: %v", q, err)
	}
	return n
}

// bizIDs lists the committed business rows of stream in msg order.
func (f *fixture) bizIDs(stream string) []int64 {
	f.t.Helper()
	rows, err := f.db.Query(context.Background(), ph(f.db, "SELECT msg_id FROM biz WHERE stream = $1 ORDER BY msg_id"), stream)
	if err != nil {
		f.t.Fatal(err)
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			f.t.Fatal(err)
		}
		out = append(out, id)
	}
	return out
}

// events lists the committed outbox event ids in write order.
func (f *fixture) events() []string {
	f.t.Helper()
	rows, err := f.db.Query(context.Background(), "SELECT event_id FROM msgx_outbox ORDER BY id")
	if err != nil {
		f.t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			f.t.Fatal(err)
		}
		out = append(out, id)
	}
	return out
}

func evs(stream string, ids ...int64) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = stream + ":" + strconv.FormatInt(id, 10)
	}
	return out
}

// fakeBackfiller records backfill calls and fails while fail is set.
type fakeBackfiller struct {
	mu    sync.Mutex
	calls [][]int64
	fail  bool
	block chan struct{} // when non-nil, Backfill waits on it or ctx
}

func (b *fakeBackfiller) Backfill(ctx context.Context, ids []int64, _ time.Time) error {
	b.mu.Lock()
	b.calls = append(b.calls, append([]int64(nil), ids...))
	fail, block := b.fail, b.block
	b.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if fail {
		return errors.New("mailbox down")
	}
	return nil
}

func (b *fakeBackfiller) setFail(v bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fail = v
}

func (b *fakeBackfiller) callCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.calls)
}

func (b *fakeBackfiller) failing() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.fail
}

func (b *fakeBackfiller) allCalls() [][]int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([][]int64(nil), b.calls...)
}
