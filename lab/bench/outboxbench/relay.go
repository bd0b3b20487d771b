package outboxbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/msgx/msgx/backoff"
	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/lab/bench"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
)

// RelayConfig is the shape of an outbox-relay run.
type RelayConfig struct {
	DSN  string
	Lane outbox.LaneKind
	Mode string // burndown | live | recovery
	N    int    // events
	Keys int    // distinct keys
	// Batch is the number of events per producer transaction.
	Batch int
	Size  int // payload bytes
	// Live mode: offered events/s over all producers, and how many producers.
	Rate      int
	Producers int
	// Warmup (live mode): the latencies of events committed within this long
	// of the load's start are reported apart (warmup_lat_*), not in
	// lat_p50/p99.
	Warmup time.Duration
	// Relay shape: events (keys) per claim, workers per relay, relays at once.
	ClaimBatch int
	Workers    int
	Relays     int
	Poll       time.Duration
	// Rows present before the run, to show claims do not slow down with them.
	Dead, Sent int
	// Progress receives a line now and then (may be nil).
	Progress io.Writer
	// Logger for the relays (default: discard).
	Logger *slog.Logger
	// WAL runs the outbox's WAL mode (wal.go): one WAL relay.
	WAL bool
}

func (c *RelayConfig) defaults() {
	if c.DSN == "" {
		c.DSN = bench.DefaultDSN
	}
	if c.Lane == 0 {
		c.Lane = outbox.Unordered
	}
	if c.Mode == "" {
		c.Mode = "burndown"
	}
	if c.N <= 0 {
		c.N = 50000
	}
	if c.Keys <= 0 {
		c.Keys = 1000
	}
	if c.Batch <= 0 {
		c.Batch = 100
	}
	if c.Size <= 0 {
		c.Size = 200
	}
	if c.Rate <= 0 {
		c.Rate = 5000
	}
	if c.Producers <= 0 {
		c.Producers = 4
	}
	if c.ClaimBatch <= 0 {
		c.ClaimBatch = outbox.DefaultBatch
	}
	if c.Workers <= 0 {
		c.Workers = 2
	}
	if c.Relays <= 0 {
		c.Relays = 1
	}
	if c.Poll <= 0 {
		c.Poll = 5 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
}

const benchTarget = "bench"

// relaySink is the in-memory destination. It checks the per-key order of
// first deliveries (event ids are "key.seq.run") and, in live mode, records
// when each event arrived.
type relaySink struct {
	mu         sync.Mutex
	n          atomic.Int64
	lastSeq    map[string]int
	violations int
	duplicates int
	seen       map[string]bool
	arrived    map[string]time.Time
	checkOrder bool
	// Recovery mode: while down, every send fails; refused collects the
	// events refused at least once.
	down    atomic.Bool
	refused map[string]bool
}

// errBrokerDown is what the sink answers while it plays an outage.
var errBrokerDown = errors.New("broker unavailable (benchmark outage)")

func (s *relaySink) SendConfirmed(_ context.Context, _ string, msgs ...*broker.Message) error {
	now := time.Now()
	s.mu.Lock()
	if s.down.Load() {
		for _, m := range msgs {
			s.refused[m.Headers[broker.HeaderEventID]] = true
		}
		s.mu.Unlock()
		return errBrokerDown
	}
	for _, m := range msgs {
		id := m.Headers[broker.HeaderEventID]
		if s.seen[id] {
			s.duplicates++
			continue
		}
		s.seen[id] = true
		if s.arrived != nil {
			s.arrived[id] = now
		}
		if s.checkOrder {
			key, seq := parseID(id)
			if last, ok := s.lastSeq[key]; ok && seq <= last {
				s.violations++
			}
			s.lastSeq[key] = seq
		}
	}
	s.mu.Unlock()
	s.n.Add(int64(len(msgs)))
	return nil
}

func parseID(id string) (key string, seq int) {
	parts := strings.SplitN(id, ".", 3)
	if len(parts) < 2 {
		return id, 0
	}
	seq, _ = strconv.Atoi(parts[1])
	return parts[0], seq
}

// producer writes events of its own keys (key k belongs to producer k mod P,
// so the sequence numbers of a key grow in commit order).
type producer struct {
	db      *store.DB
	p, of   int
	keys    int
	size    int
	run     string
	seq     map[int]int
	rnd     *rand.Rand
	payload []byte
}

func newProducer(db *store.DB, p, of int, cfg *RelayConfig, run string) *producer {
	return &producer{db: db, p: p, of: of, keys: cfg.Keys, size: cfg.Size, run: run, seq: map[int]int{},
		rnd: rand.New(rand.NewPCG(uint64(p)+1, 42)), payload: payload(cfg.Size)}
}

func (pr *producer) events(n int) []outbox.Event {
	evs := make([]outbox.Event, n)
	mine := (pr.keys - pr.p + pr.of - 1) / pr.of // keys k < K with k % of == p
	for i := range evs {
		k := pr.p + pr.of*pr.rnd.IntN(max(mine, 1))
		pr.seq[k]++
		key := "k" + strconv.Itoa(k)
		evs[i] = outbox.Event{
			ID:     key + "." + strconv.Itoa(pr.seq[k]) + "." + pr.run,
			Target: benchTarget, Topic: benchTarget, Key: key, Payload: pr.payload,
		}
	}
	return evs
}

func (pr *producer) commit(ctx context.Context, evs []outbox.Event) error {
	return pr.db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		return outbox.Enqueue(ctx, tx, time.Now(), evs...)
	})
}

// RunRelay measures the relay and prints the RESULT line.
func RunRelay(ctx context.Context, cfg RelayConfig, out io.Writer) (bench.Result, error) {
	cfg.defaults()
	if cfg.Mode == "live" && (cfg.Warmup < 0 || cfg.Warmup.Seconds() >= float64(cfg.N)/float64(cfg.Rate)) {
		return bench.Result{}, fmt.Errorf("live mode: the warm-up (%s) must be shorter than the run (%d events at %d/s)", cfg.Warmup, cfg.N, cfg.Rate)
	}
	if cfg.Mode != "burndown" && cfg.Mode != "live" && cfg.Mode != "recovery" {
		return bench.Result{}, fmt.Errorf("unknown mode %q (want burndown, live or recovery)", cfg.Mode)
	}
	sc, err := bench.NewSchema(ctx, cfg.DSN, "msgx_bench_relay")
	if err != nil {
		return bench.Result{}, err
	}
	defer func() { _ = sc.Drop() }()
	db, err := openDSN(ctx, sc.DSN, int32(cfg.Producers+4))
	if err != nil {
		return bench.Result{}, err
	}
	defer db.Close()
	pg := &progress{w: cfg.Progress}
	if err := prefill(ctx, db, cfg); err != nil {
		return bench.Result{}, err
	}
	var ws *walSlot
	if cfg.WAL {
		ws = newWALSlot(cfg.DSN)
		defer ws.drop()
		if err := prepareWAL(ctx, db, sc.DSN, ws); err != nil {
			return bench.Result{}, err
		}
	}
	run := strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	s := &relaySink{seen: make(map[string]bool, cfg.N), lastSeq: map[string]int{}, checkOrder: cfg.Lane == outbox.PerKey}
	producers := make([]*producer, cfg.Producers)
	for p := range producers {
		producers[p] = newProducer(db, p, cfg.Producers, &cfg, run)
	}

	var commitMu sync.Mutex
	var committed map[string]time.Time
	if cfg.Mode == "recovery" {
		s.refused = make(map[string]bool, cfg.N)
		s.down.Store(true)
	}
	if cfg.Mode != "live" {
		if err := insertAll(ctx, producers, cfg, pg); err != nil {
			return bench.Result{}, err
		}
		if _, err := db.Exec(ctx, "ANALYZE msgx_outbox"); err != nil {
			return bench.Result{}, err
		}
	} else {
		committed = make(map[string]time.Time, cfg.N)
		s.arrived = make(map[string]time.Time, cfg.N)
	}

	// The relays, each with its own pool as separate processes would have.
	rctx, stopRelays := context.WithCancel(ctx)
	defer stopRelays()
	var relays errgroup.Group
	app := "msgx-bench-relay-" + run
	relayDSN := bench.WithParam(sc.DSN, "application_name", app)
	for i := range cfg.Relays {
		rdb, err := openDSN(ctx, relayDSN, int32(cfg.Workers+2))
		if err != nil {
			return bench.Result{}, err
		}
		defer rdb.Close()
		opts := []outbox.Option{
			outbox.Target(benchTarget, s, cfg.Lane, outbox.Batch(cfg.ClaimBatch), outbox.Workers(cfg.Workers), outbox.FlushLimit(cfg.ClaimBatch)),
			outbox.WithPollInterval(cfg.Poll), outbox.WithLogger(cfg.Logger.With("relay", i)), outbox.WithRetry(RecoveryRetry)}
		if ws != nil {
			w, err := outbox.NewWALRelay(rdb, relayDSN, append(opts, ws.options()...)...)
			if err != nil {
				return bench.Result{}, err
			}
			defer w.Close()
			relays.Go(func() error { return w.Run(rctx) })
			continue
		}
		r, err := outbox.NewRelay(rdb, opts...)
		if err != nil {
			return bench.Result{}, err
		}
		defer r.Close()
		relays.Go(func() error { return r.Run(rctx) })
	}
	start := time.Now()
	cpu0 := bench.ProcessCPU()
	var outage time.Duration
	if cfg.Mode == "recovery" {
		// The outage lasts until every event was refused at least once; the
		// drain is timed from the moment the broker is back.
		for {
			s.mu.Lock()
			refused := len(s.refused)
			s.mu.Unlock()
			if refused >= cfg.N {
				break
			}
			if err := ctx.Err(); err != nil {
				return bench.Result{}, err
			}
			pg.say("outage: %d of %d events refused", refused, cfg.N)
			time.Sleep(time.Millisecond)
		}
		s.down.Store(false)
		outage = time.Since(start)
		start = time.Now()
		cpu0 = bench.ProcessCPU()
	}

	var live errgroup.Group
	if cfg.Mode == "live" {
		perProducer := cfg.N / cfg.Producers
		// Open loop, evenly spaced: the producers take turns, so that
		// transaction k of the run starts at start + k·batch/rate, as in
		// the peers' harness (in phase, they offered bursts of
		// producers·batch events at once).
		interval := time.Duration(float64(time.Second) * float64(cfg.Batch*cfg.Producers) / float64(cfg.Rate))
		for p, pr := range producers {
			n := perProducer
			if p == 0 {
				n += cfg.N - perProducer*cfg.Producers
			}
			live.Go(func() error {
				next := start.Add(interval * time.Duration(p) / time.Duration(cfg.Producers))
				for done := 0; done < n; {
					if d := time.Until(next); d > 0 {
						select {
						case <-time.After(d):
						case <-ctx.Done():
							return ctx.Err()
						}
					}
					b := min(cfg.Batch, n-done)
					evs := pr.events(b)
					if err := pr.commit(ctx, evs); err != nil {
						return err
					}
					at := time.Now()
					commitMu.Lock()
					for _, e := range evs {
						committed[e.ID] = at
					}
					commitMu.Unlock()
					done += b
					next = next.Add(interval)
				}
				return nil
			})
		}
	}

	// Wait until the sink has every event (compacted: until nothing is
	// pending), then until every row is marked done.
	want := int64(cfg.N)
	for cfg.Lane != outbox.Compacted && s.n.Load() < want {
		if err := ctx.Err(); err != nil {
			return bench.Result{}, err
		}
		pg.say("delivered %d of %d", s.n.Load(), want)
		time.Sleep(time.Millisecond)
	}
	if err := live.Wait(); err != nil {
		return bench.Result{}, fmt.Errorf("producer: %w", err)
	}
	for cfg.WAL && cfg.Lane == outbox.Compacted && !lastStatesSent(s, producers) {
		if err := ctx.Err(); err != nil {
			return bench.Result{}, err
		}
		pg.say("delivered %d; newest states still missing", s.n.Load())
		time.Sleep(time.Millisecond)
	}
	for {
		var pending bool
		if err := db.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM msgx_outbox WHERE target = $1 AND status = 'PENDING')", benchTarget).Scan(&pending); err != nil {
			return bench.Result{}, err
		}
		if !pending {
			break
		}
		pg.say("delivered %d; rows still pending", s.n.Load())
		time.Sleep(2 * time.Millisecond)
	}
	elapsed := time.Since(start)
	cpu := bench.ProcessCPU() - cpu0
	dbCPU, dbOK := backendCPU(ctx, db, app)
	stopRelays()
	if err := relays.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		return bench.Result{}, err
	}

	res := bench.Result{Workload: "outbox-relay", Mode: cfg.Mode, N: cfg.N, Elapsed: elapsed}
	if cfg.WAL {
		res.Variant = "wal"
	}
	res.Extra = append(res.Extra, [2]string{"lane", cfg.Lane.String()}, [2]string{"keys", strconv.Itoa(cfg.Keys)},
		[2]string{"sent", strconv.FormatInt(s.n.Load(), 10)})
	if cfg.Lane == outbox.PerKey {
		res.Extra = append(res.Extra, [2]string{"order_violations", strconv.Itoa(s.violations)})
	}
	if cfg.Relays > 1 {
		res.Extra = append(res.Extra, [2]string{"relays", strconv.Itoa(cfg.Relays)})
	}
	if cfg.Dead > 0 || cfg.Sent > 0 {
		res.Extra = append(res.Extra, [2]string{"dead_rows", strconv.Itoa(cfg.Dead)}, [2]string{"sent_rows", strconv.Itoa(cfg.Sent)})
	}
	res.Extra = append(res.Extra, [2]string{"cpu_us_per_event", fmt.Sprintf("%.1f", float64(cpu.Microseconds())/float64(cfg.N))})
	if dbOK {
		res.Extra = append(res.Extra, [2]string{"db_cpu_us_per_event", fmt.Sprintf("%.1f", float64(dbCPU.Microseconds())/float64(cfg.N))})
	}
	if cfg.Mode == "recovery" {
		res.Extra = append(res.Extra, [2]string{"outage_ms", strconv.FormatInt(outage.Milliseconds(), 10)},
			[2]string{"retry_initial_ms", strconv.FormatInt(RecoveryRetry.Initial.Milliseconds(), 10)})
	}
	res.Extra = append(res.Extra, [2]string{"duplicates", strconv.Itoa(s.duplicates)})
	if cfg.Mode == "live" {
		steadyFrom := start.Add(cfg.Warmup)
		for id, at := range s.arrived {
			if c, ok := committed[id]; ok {
				if c.Before(steadyFrom) {
					res.WarmupLatencies = append(res.WarmupLatencies, max(at.Sub(c), 0))
				} else {
					res.Latencies = append(res.Latencies, max(at.Sub(c), 0))
				}
			}
		}
		res.Warmup = cfg.Warmup
		res.Extra = append(res.Extra, [2]string{"rate", strconv.Itoa(cfg.Rate)})
	}
	res.Print(out)
	return res, nil
}

// RecoveryRetry is the relay's retry policy in the benchmark: short delays,
// so that the recovery run times the relay rather than the backoff, and
// enough attempts that an outage kills nothing. Other modes never retry.
var RecoveryRetry = backoff.Policy{MaxAttempts: 1000, Initial: 50 * time.Millisecond, Max: 200 * time.Millisecond, Jitter: 0.2}

// insertAll writes the burn-down backlog with every producer at once.
func insertAll(ctx context.Context, producers []*producer, cfg RelayConfig, pg *progress) error {
	var done atomic.Int64
	var g errgroup.Group
	per := cfg.N / len(producers)
	for p, pr := range producers {
		n := per
		if p == 0 {
			n += cfg.N - per*len(producers)
		}
		g.Go(func() error {
			for i := 0; i < n; i += cfg.Batch {
				if err := pr.commit(ctx, pr.events(min(cfg.Batch, n-i))); err != nil {
					return err
				}
				pg.say("inserted %d of %d", done.Add(int64(min(cfg.Batch, n-i))), cfg.N)
			}
			return nil
		})
	}
	return g.Wait()
}

// prefill writes DEAD rows (kept in msgx_outbox as dead letters) and SENT
// records (msgx_outbox_sent) of the benchmark's target. The DEAD rows have
// keys of their own: a dead event holds its key on a per-key target, so on
// the events' keys they would hold every key; apart, they fill the index a
// per-key claim probes for each key it visits.
func prefill(ctx context.Context, db *store.DB, cfg RelayConfig) error {
	if cfg.Dead > 0 {
		if _, err := db.Exec(ctx, `INSERT INTO msgx_outbox (event_id, target, topic, partition_key, payload, created_at, next_attempt_at, status, attempts, dead_at, last_error)
			SELECT 'dead-' || g, $1, $1, 'dead-k' || (g % $2), $3, now(), now(), 'DEAD', 5, now(), 'prefilled' FROM generate_series(1, $4) AS g`,
			benchTarget, cfg.Keys, payload(cfg.Size), cfg.Dead); err != nil {
			return fmt.Errorf("prefill DEAD rows: %w", err)
		}
	}
	if cfg.Sent > 0 {
		if _, err := db.Exec(ctx, `INSERT INTO msgx_outbox_sent (event_id, id, target, topic, partition_key, event_type, status, attempts, created_at, done_at)
			SELECT 'sent-' || g, -g, $1, $1, 'k' || (g % $2), 'UPSERT', 'SENT', 1, now(), now() FROM generate_series(1, $3) AS g`,
			benchTarget, cfg.Keys, cfg.Sent); err != nil {
			return fmt.Errorf("prefill SENT records: %w", err)
		}
	}
	return nil
}
