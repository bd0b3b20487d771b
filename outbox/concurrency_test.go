package outbox_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/msgx/msgx/backoff"
	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

func TestMain(m *testing.M) {
	if os.Getenv(crashChildEnv) != "" {
		os.Exit(crashChild())
	}
	if os.Getenv(walChildEnv) != "" {
		os.Exit(walChild())
	}
	os.Exit(m.Run())
}

// TestWritersOfAKeyAreSerialised shows why the per-key lane can trust id
// order. Event ids are allocated when a row is inserted, commits happen
// later, in any order: without a lock, a transaction that took a lower id can
// commit after one that took a higher id of the same key, and a relay reading
// the committed rows would send the higher one first. Enqueue takes a
// transaction-scoped lock on the key before taking ids, so the second writer
// of a key waits until the first has committed (or rolled back).
func TestWritersOfAKeyAreSerialised(t *testing.T) {
	db := storetest.NewPostgres(t, store.WithMigrate(outbox.Schema()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	clk := clock.NewFake(t0)

	// The hazard, with plain inserts that bypass Enqueue: the row that takes
	// the lower id commits last.
	s := &sink{}
	r := newRelay(t, db, clk, outbox.Target("raw", s, outbox.PerKey))
	const raw = `INSERT INTO msgx_outbox (event_id, target, topic, partition_key, created_at, next_attempt_at)
		VALUES ($1, 'raw', 'raw', 'K', $2, $2)`
	first, err := db.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Exec(ctx, raw, "raw-1", t0); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, raw, "raw-2", t0); err != nil {
		t.Fatal(err)
	}
	flush(t, r)
	if err := first.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	flush(t, r)
	if a, b := get(t, db, "raw-1"), get(t, db, "raw-2"); a.Seq >= b.Seq {
		t.Fatalf("raw-1 has id %d, raw-2 %d", a.Seq, b.Seq)
	}
	if got := s.ids(); !slices.Equal(got, []string{"raw-2", "raw-1"}) {
		t.Fatalf("without the key lock: sent %v (the hazard did not show)", got)
	}

	// The same race through Enqueue: the second writer of K waits until the
	// first has committed, so it takes the higher id after the first commit.
	s2 := &sink{}
	r2 := newRelay(t, db, clk, outbox.Target("p", s2, outbox.PerKey))
	hold := make(chan struct{})
	held := make(chan error, 1)
	go func() {
		held <- db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
			if err := outbox.Enqueue(ctx, tx, t0, ev("p", "K", 1)); err != nil {
				return err
			}
			<-hold
			return nil
		})
	}()
	testkit.Eventually(t, "the first writer's lock", 10*time.Second, func() bool { return advisoryLocks(t, db, true) == 1 })
	second := make(chan error, 1)
	go func() {
		second <- db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
			return outbox.Enqueue(ctx, tx, t0, ev("p", "K", 2), ev("p", "L", 2))
		})
	}()
	testkit.Eventually(t, "the second writer to wait for the key", 10*time.Second, func() bool { return advisoryLocks(t, db, false) == 1 })
	// Another key is not held up.
	enqueue(t, db, t0, ev("p", "M", 1))
	select {
	case err := <-second:
		t.Fatalf("the second writer of K did not wait: %v", err)
	default:
	}
	close(hold)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	if a, b := get(t, db, "p-K-1"), get(t, db, "p-K-2"); a.Seq >= b.Seq {
		t.Fatalf("ids of K: first writer %d, second %d", a.Seq, b.Seq)
	}
	flush(t, r2)
	if got := byKey(s2.messages())["K"]; !slices.Equal(got, []string{"p-K-1", "p-K-2"}) {
		t.Fatalf("K sent as %v", got)
	}
}

// advisoryLocks counts granted (or waiting) advisory locks on the server.
func advisoryLocks(t *testing.T, db *store.DB, granted bool) int {
	t.Helper()
	var n int
	if err := db.QueryRow(context.Background(),
		"SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND granted = $1 AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) AND objid = ($2::bigint & 4294967295)::oid",
		granted, outbox.KeyLock("p", "K")).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// orderSink records first deliveries per key and counts events arriving out
// of id order (event ids are "key.seq").
type orderSink struct {
	mu         sync.Mutex
	seen       map[string]bool
	last       map[string]int
	violations []string
	dups       int
}

func newOrderSink() *orderSink { return &orderSink{seen: map[string]bool{}, last: map[string]int{}} }

func (s *orderSink) SendConfirmed(_ context.Context, _ string, msgs ...*broker.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range msgs {
		id := m.Header(broker.HeaderEventID)
		if s.seen[id] {
			s.dups++
			continue
		}
		s.seen[id] = true
		key, seqText, _ := strings.Cut(id, ".")
		seq, _ := strconv.Atoi(seqText)
		if last, ok := s.last[key]; ok && seq < last {
			s.violations = append(s.violations, fmt.Sprintf("%s after %s.%d", id, key, last))
		}
		s.last[key] = seq
	}
	return nil
}

func (s *orderSink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.seen)
}

// TestThreeRelaysLoseNothingAndKeepKeyOrder runs three relays, each with its
// own connection pool, over 100 000 events of 1 000 keys written by four
// producers while the relays run.
func TestThreeRelaysLoseNothingAndKeepKeyOrder(t *testing.T) {
	const (
		events    = 100_000
		keys      = 1000
		producers = 4
		perTx     = 1000
	)
	_, dsn := storetest.NewSchema(t)
	dsn += "&jit=off"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	open := func() *store.DB {
		db, err := store.Open(ctx, dsn, store.WithMigrate(outbox.Schema()), store.WithLogger(testkit.Quiet()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(db.Close)
		return db
	}
	db := open()
	s := newOrderSink()
	rctx, stop := context.WithCancel(ctx)
	var relays errgroup.Group
	for range 3 {
		r, err := outbox.NewRelay(open(), outbox.WithLogger(testkit.Quiet()), outbox.WithPollInterval(5*time.Millisecond),
			outbox.Target("p", s, outbox.PerKey, outbox.Batch(200)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Close)
		relays.Go(func() error { return r.Run(rctx) })
	}
	// Producer p writes the keys k with k % producers == p, so the sequence
	// number of each key grows in commit order.
	var prod errgroup.Group
	for p := range producers {
		prod.Go(func() error {
			seq := make([]int, keys)
			for i := 0; i < events/producers; i += perTx {
				evs := make([]outbox.Event, perTx)
				for j := range evs {
					k := p + producers*((i+j)*7919%(keys/producers))
					seq[k]++
					key := "k" + strconv.Itoa(k)
					evs[j] = outbox.Event{ID: key + "." + strconv.Itoa(seq[k]), Target: "p", Topic: "t", Key: key, Payload: []byte("x")}
				}
				if err := db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
					return outbox.Enqueue(ctx, tx, time.Now(), evs...)
				}); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := prod.Wait(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	last := time.Now()
	testkit.Eventually(t, "every event", time.Minute, func() bool {
		if time.Since(last) > 2*time.Second {
			last = time.Now()
			t.Logf("%v: %d delivered, %d pending, %d sent", time.Since(start), s.count(), countStatus(t, db, outbox.StatusPending), countStatus(t, db, outbox.StatusSent))
		}
		return s.count() == events
	})
	testkit.Eventually(t, "every row marked", 10*time.Second, func() bool { return countStatus(t, db, outbox.StatusSent) == events })
	stop()
	if err := relays.Wait(); err != nil {
		t.Fatal(err)
	}
	if n := countStatus(t, db, outbox.StatusPending); n != 0 {
		t.Fatalf("%d rows still pending", n)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.violations) > 0 {
		t.Fatalf("%d per-key order violations, e.g. %v", len(s.violations), s.violations[:min(5, len(s.violations))])
	}
	t.Logf("%d events, %d duplicates", len(s.seen), s.dups)
}

// TestManyUnorderedRelays: three relays on one unordered target, every event
// exactly once when nothing fails.
func TestManyUnorderedRelays(t *testing.T) {
	_, dsn := storetest.NewSchema(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var dbs []*store.DB
	for range 4 {
		db, err := store.Open(ctx, dsn, store.WithMigrate(outbox.Schema()), store.WithLogger(testkit.Quiet()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(db.Close)
		dbs = append(dbs, db)
	}
	var evs []outbox.Event
	for i := range 20_000 {
		evs = append(evs, outbox.Event{ID: "e" + strconv.Itoa(i), Target: "u", Topic: "t", Key: strconv.Itoa(i % 50)})
	}
	for i := 0; i < len(evs); i += 2000 {
		enqueue(t, dbs[0], time.Now(), evs[i:i+2000]...)
	}
	s := newOrderSink()
	rctx, stop := context.WithCancel(ctx)
	var relays errgroup.Group
	for _, db := range dbs[1:] {
		r, err := outbox.NewRelay(db, outbox.WithLogger(testkit.Quiet()), outbox.Target("u", s, outbox.Unordered, outbox.Batch(100), outbox.Workers(3)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Close)
		relays.Go(func() error { return r.Run(rctx) })
	}
	testkit.Eventually(t, "every event", 45*time.Second, func() bool { return s.count() == len(evs) })
	testkit.Eventually(t, "every row marked", 10*time.Second, func() bool { return countStatus(t, dbs[0], outbox.StatusSent) == len(evs) })
	stop()
	_ = relays.Wait()
	if s.dups != 0 {
		t.Fatalf("%d duplicates without any failure", s.dups)
	}
}

const (
	crashChildEnv   = "MSGX_OUTBOX_TEST_CRASH_CHILD"
	crashChildAtEnv = "MSGX_OUTBOX_TEST_CRASH_AT"
)

// crashRetry is the retry policy of the crash tests' relays.
var crashRetry = backoff.Policy{MaxAttempts: 3, Initial: time.Second, Max: 4 * time.Second}

// crashChild is the relay process the crash tests kill: it claims with the
// per-key lane at the fake time given by its parent (t0 unless set), prints
// HOLDING and how many events it was sending, and blocks in the send.
func crashChild() int {
	ctx := context.Background()
	db, err := store.Open(ctx, os.Getenv(crashChildEnv), store.WithLogger(testkit.Quiet()))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	at := t0
	if v := os.Getenv(crashChildAtEnv); v != "" {
		if at, err = time.Parse(time.RFC3339Nano, v); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			return 2
		}
	}
	hang := publisherFunc(func(_ context.Context, _ string, msgs ...*broker.Message) error {
		fmt.Printf("HOLDING %d\n", len(msgs))
		select {} // until killed
	})
	r, err := outbox.NewRelay(db, outbox.WithClock(clock.NewFake(at)), outbox.WithDatabaseClock(false), outbox.WithLogger(testkit.Quiet()), outbox.WithRetry(crashRetry),
		outbox.Target("p", hang, outbox.PerKey))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	_, err = r.Flush(ctx)
	fmt.Fprintln(os.Stderr, "child: Flush returned:", err)
	return 3
}

// killChildHolding starts a relay process at the fake time at, waits until
// it is sending (want events; 0: any number) and kills it with SIGKILL.
func killChildHolding(ctx context.Context, t *testing.T, dsn string, at time.Time, want int) {
	t.Helper()
	child := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), crashChildEnv+"="+dsn, crashChildAtEnv+"="+at.Format(time.RFC3339Nano))
	child.Stderr = os.Stderr
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	got, ok := strings.CutPrefix(strings.TrimSpace(line), "HOLDING ")
	if err != nil || !ok || (want > 0 && got != strconv.Itoa(want)) {
		_ = child.Process.Kill()
		_ = child.Wait()
		t.Fatalf("child said %q, %v", line, err)
	}
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var exit *exec.ExitError
	if err := child.Wait(); !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, want killed", err)
	}
}

type publisherFunc func(ctx context.Context, topic string, msgs ...*broker.Message) error

func (f publisherFunc) SendConfirmed(ctx context.Context, topic string, msgs ...*broker.Message) error {
	return f(ctx, topic, msgs...)
}

// TestCrashWhileHoldingClaims kills a relay process for real while it holds
// claims; a new relay takes them over once their lease has run out.
func TestCrashWhileHoldingClaims(t *testing.T) {
	for _, dialect := range []string{"postgres", "sqlite"} {
		t.Run(dialect, func(t *testing.T) {
			var dsn string
			if dialect == "postgres" {
				_, dsn = storetest.NewSchema(t)
			} else {
				dsn = "sqlite:" + filepath.Join(t.TempDir(), "crash.db")
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			db, _ := crashSetup(ctx, t, dsn, 20)

			// The child leases the three heads and hangs in their send.
			killChildHolding(ctx, t, dsn, t0, 3)
			if n := leasedRows(t, db); n != 3 {
				t.Fatalf("%d rows leased by the child, want the 3 heads", n)
			}

			clk := clock.NewFake(t0)
			s := newOrderSink()
			r := newRelay(t, db, clk, outbox.WithRetry(crashRetry), outbox.Target("p", s, outbox.PerKey))
			if st := flush(t, r); st.Claimed != 0 {
				t.Fatalf("claimed %+v while the dead relay's lease ran", st)
			}
			clk.Advance(outbox.DefaultLease)
			if st := flush(t, r); st.Published != 60 {
				t.Fatalf("after the lease: %+v", st)
			}
			if len(s.violations) > 0 || s.dups > 0 {
				t.Fatalf("violations %v, duplicates %d", s.violations, s.dups)
			}
			if rec := get(t, db, "A.0"); rec.Status != outbox.StatusSent || rec.Attempts != 2 {
				t.Fatalf("a taken-over head: %+v", rec)
			}
			if rec := get(t, db, "A.1"); rec.Attempts != 1 {
				t.Fatalf("an event behind it: %+v", rec)
			}
		})
	}
}

// crashSetup opens dsn (migrated) and enqueues n events of each of the keys
// A, B and C, with ids "A.0", "B.0", ... in the per-key target "p".
func crashSetup(ctx context.Context, t *testing.T, dsn string, n int) (*store.DB, []outbox.Event) {
	t.Helper()
	db, err := store.Open(ctx, dsn, store.WithMigrate(outbox.Schema()), store.WithLogger(testkit.Quiet()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	var evs []outbox.Event
	for i := range n {
		for _, k := range []string{"A", "B", "C"} {
			evs = append(evs, outbox.Event{ID: k + "." + strconv.Itoa(i), Target: "p", Topic: "t", Key: k})
		}
	}
	enqueue(t, db, t0, evs...)
	return db, evs
}

// leasedRows counts the rows under a lease with one claim.
func leasedRows(t *testing.T, db *store.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRow(context.Background(), "SELECT COUNT(*) FROM msgx_outbox WHERE locked_until IS NOT NULL AND attempts = 1").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCrashLoopSpendsNoAttempts kills a relay process four times while it is
// sending the same three events, more often than the retry policy's three
// attempts: a lease that expired without a result is not the event's
// failure, so a healthy relay then sends them all instead of finding them
// dead.
func TestCrashLoopSpendsNoAttempts(t *testing.T) {
	_, dsn := storetest.NewSchema(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, evs := crashSetup(ctx, t, dsn, 5)
	const kills = 4
	at := t0
	for i := range kills {
		// Events whose lease expired twice go one per send (the child then
		// hangs in the first), so from the second kill on any count will do.
		want := 3
		if i >= 1 {
			want = 0
		}
		killChildHolding(ctx, t, dsn, at, want)
		at = at.Add(outbox.DefaultLease + time.Second)
	}
	if rec := get(t, db, "A.0"); rec.Status != outbox.StatusPending || rec.Attempts != kills || rec.LeaseExpiries != kills-1 {
		t.Fatalf("after %d kills: %+v", kills, rec)
	}
	s := newOrderSink()
	r := newRelay(t, db, clock.NewFake(at), outbox.WithRetry(crashRetry), outbox.Target("p", s, outbox.PerKey))
	if st := flush(t, r); st.Published != len(evs) || st.Dead != 0 {
		t.Fatalf("after %d kills: %+v", kills, st)
	}
	if len(s.violations) > 0 || s.dups > 0 {
		t.Fatalf("violations %v, duplicates %d", s.violations, s.dups)
	}
	if rec := get(t, db, "A.0"); rec.Status != outbox.StatusSent || rec.Attempts != kills+1 {
		t.Fatalf("A.0 at the end: %+v", rec)
	}
}

// TestFewEventCallsTakeTheirLocksInOneOrder has writers enqueue three events
// a call, on keys they share, in random call orders: a call of a few events
// is written a statement each, and were each statement to take its own key's
// lock, two writers would take the same keys in opposite orders and
// PostgreSQL would abort one of them as a deadlock. The first statement takes
// them all, sorted.
func TestFewEventCallsTakeTheirLocksInOneOrder(t *testing.T) {
	db := storetest.NewPostgres(t, store.WithMigrate(outbox.Schema()))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const writers, calls = 4, 150
	keys := []string{"A", "B", "C", "D"}
	var g errgroup.Group
	for w := range writers {
		g.Go(func() error {
			for c := range calls {
				order := slices.Clone(keys)
				// A different order of three keys in every call.
				off := (w*7 + c*3) % len(order)
				order = append(order[off:], order[:off]...)
				if (w+c)%2 == 1 {
					slices.Reverse(order)
				}
				evs := make([]outbox.Event, 3)
				for i := range evs {
					evs[i] = outbox.Event{ID: fmt.Sprintf("w%d.c%d.%d", w, c, i), Target: "p", Topic: "t", Key: order[i]}
				}
				if err := db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
					return outbox.Enqueue(ctx, tx, t0, evs...)
				}); err != nil {
					return fmt.Errorf("writer %d, call %d: %w", w, c, err)
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if n := countStatus(t, db, outbox.StatusPending); n != writers*calls*3 {
		t.Fatalf("%d events written, want %d", n, writers*calls*3)
	}
}
