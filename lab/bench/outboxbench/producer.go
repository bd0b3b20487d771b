package outboxbench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/msgx/msgx/lab/bench"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
)

// ProducerConfig is the shape of the producer-overhead run.
type ProducerConfig struct {
	DSN     string
	N       int // transactions per variant and round
	Clients int
	Keys    int // business rows
	Size    int // event payload bytes
	Rounds  int
	// WAL adds a variant whose events go into the WAL (the outbox's WAL
	// mode; wal_level=logical).
	WAL bool
	// Progress receives a line now and then (may be nil).
	Progress io.Writer
}

// RunProducerOverhead measures business transactions/s (one UPDATE of a
// business row) without and with an outbox event enqueued in the same
// transaction, in alternating rounds, and prints one RESULT line per variant
// and the overhead.
func RunProducerOverhead(ctx context.Context, cfg ProducerConfig, out io.Writer) ([]bench.Result, error) {
	if cfg.DSN == "" {
		cfg.DSN = bench.DefaultDSN
	}
	if cfg.N <= 0 {
		cfg.N = 20000
	}
	if cfg.Clients <= 0 {
		cfg.Clients = 8
	}
	if cfg.Keys <= 0 {
		cfg.Keys = 1000
	}
	if cfg.Size <= 0 {
		cfg.Size = 200
	}
	if cfg.Rounds <= 0 {
		cfg.Rounds = 10
	}
	sc, err := bench.NewSchema(ctx, cfg.DSN, "msgx_bench_producer")
	if err != nil {
		return nil, err
	}
	defer func() { _ = sc.Drop() }()
	db, err := openDSN(ctx, sc.DSN, 2)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	if _, err := db.Exec(ctx, `CREATE TABLE bench_account (id integer PRIMARY KEY, balance bigint NOT NULL, updated_at timestamptz NOT NULL)`); err != nil {
		return nil, err
	}
	if _, err := db.Exec(ctx, `INSERT INTO bench_account SELECT g, 0, now() FROM generate_series(0, $1 - 1) AS g`, cfg.Keys); err != nil {
		return nil, err
	}
	if _, err := db.Exec(ctx, "ANALYZE bench_account"); err != nil {
		return nil, err
	}
	pl := payload(cfg.Size)
	run := strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	type variant struct {
		name   string
		outbox bool
		db     *store.DB
		app    string
		wal    bool
	}
	variants := []variant{{name: "without-outbox"}, {name: "with-outbox", outbox: true}}
	if cfg.WAL {
		variants = append(variants, variant{name: "with-outbox-wal", outbox: true, wal: true})
	}
	// Each variant has its own pool, named, so that the database CPU time of
	// its backends can be told apart.
	for i := range variants {
		variants[i].app = "msgx-bench-producer-" + strconv.Itoa(i) + "-" + run
		vdb, err := openDSN(ctx, bench.WithParam(sc.DSN, "application_name", variants[i].app), int32(cfg.Clients))
		if err != nil {
			return nil, err
		}
		defer vdb.Close()
		variants[i].db = vdb
		if variants[i].wal {
			ws := newWALSlot(cfg.DSN)
			defer ws.drop()
			if err := prepareWAL(ctx, vdb, sc.DSN, ws); err != nil {
				return nil, err
			}
		}
	}
	totals := make([]time.Duration, len(variants))
	pg := &progress{w: cfg.Progress}
	// A warm-up round of each fills caches and the statement caches.
	for _, v := range variants {
		if _, err := runBusiness(ctx, v.db, cfg, cfg.N/10+1, v.outbox, pl, pg); err != nil {
			return nil, err
		}
	}
	cpu0 := make([]time.Duration, len(variants))
	for i, v := range variants {
		cpu0[i], _ = backendCPU(ctx, db, v.app)
	}
	// Short rounds in alternating order, so that both variants meet the same
	// neighbours on a shared machine.
	for round := range cfg.Rounds {
		for j := range variants {
			i := j
			if round%2 == 1 {
				i = len(variants) - 1 - j
			}
			d, err := runBusiness(ctx, variants[i].db, cfg, cfg.N, variants[i].outbox, pl, pg)
			if err != nil {
				return nil, err
			}
			totals[i] += d
		}
	}
	results := make([]bench.Result, len(variants))
	for i, v := range variants {
		results[i] = bench.Result{Workload: "producer-overhead", Variant: v.name, Mode: "burndown",
			N: cfg.N * cfg.Rounds, Elapsed: totals[i], Extra: [][2]string{{"clients", strconv.Itoa(cfg.Clients)}}}
		if c, ok := backendCPU(ctx, db, v.app); ok {
			results[i].Extra = append(results[i].Extra, [2]string{"db_cpu_us_per_tx", fmt.Sprintf("%.1f", float64((c-cpu0[i]).Microseconds())/float64(results[i].N))})
		}
		results[i].Print(out)
	}
	overhead := 1 - results[1].PerSec()/results[0].PerSec()
	fmt.Fprintf(out, "producer overhead of the outbox insert: %.1f%% (with/without = %s)\n", overhead*100, bench.Ratio(results[1], results[0]))
	if cfg.WAL {
		walOverhead := 1 - results[2].PerSec()/results[0].PerSec()
		fmt.Fprintf(out, "producer overhead of the outbox in the wal mode: %.1f%% (wal/without = %s, wal/table = %s)\n",
			walOverhead*100, bench.Ratio(results[2], results[0]), bench.Ratio(results[2], results[1]))
	}
	return results, nil
}

// runBusiness runs n business transactions over the clients and returns how
// long they took.
func runBusiness(ctx context.Context, db *store.DB, cfg ProducerConfig, n int, withOutbox bool, pl []byte, pg *progress) (time.Duration, error) {
	var next atomic.Int64
	var g errgroup.Group
	start := time.Now()
	for c := range cfg.Clients {
		rnd := rand.New(rand.NewPCG(uint64(c), 7))
		g.Go(func() error {
			for next.Add(1) <= int64(n) {
				id := rnd.IntN(cfg.Keys)
				err := db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
					now := time.Now()
					if _, err := tx.Exec(ctx, "UPDATE bench_account SET balance = balance + 1, updated_at = $2 WHERE id = $1", id, now); err != nil {
						return err
					}
					if !withOutbox {
						return nil
					}
					return outbox.Enqueue(ctx, tx, now, outbox.Event{Target: "bench", Topic: "bench.accounts", Key: strconv.Itoa(id), Payload: pl})
				})
				if err != nil {
					return err
				}
				pg.say("business transactions: %d", next.Load())
			}
			return nil
		})
	}
	err := g.Wait()
	return time.Since(start), err
}
