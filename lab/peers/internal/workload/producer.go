package workload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TxPeer is a peer whose outbox insert joins a business transaction, for the
// producer-overhead mode.
type TxPeer interface {
	Peer
	// InTx runs body and, when events is not empty, the peer's insert of
	// events in one transaction, and commits it.
	InTx(ctx context.Context, body func(ctx context.Context, tx pgx.Tx) error, events []Event) error
	// Pool is a pool in the peer's schema (the business table is made there).
	Pool() *pgxpool.Pool
}

// overheadRounds is how many alternating rounds of each variant run.
const overheadRounds = 10

// businessRows is the size of the business table the transactions update.
const businessRows = 1000

// runProducerOverhead measures the business transaction (one UPDATE of a
// random row of businessRows) without and with the peer's insert of one
// event, by Producers clients, in overheadRounds alternating rounds, and
// prints a RESULT line per variant (the with-outbox line carries the
// overhead).
func runProducerOverhead(ctx context.Context, c Config, peer Peer, w io.Writer) (err error) {
	tp, ok := peer.(TxPeer)
	if !ok {
		return fmt.Errorf("peer %s cannot join a business transaction", c.Peer)
	}
	if err := tp.Setup(ctx, newSink(0, time.Now())); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	defer func() {
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		err = errors.Join(err, tp.Teardown(tctx))
	}()
	if _, err := tp.Pool().Exec(ctx, `CREATE TABLE business (id int PRIMARY KEY, v bigint NOT NULL);
		INSERT INTO business SELECT g, 0 FROM generate_series(1, 1000) g; ANALYZE business`); err != nil {
		return fmt.Errorf("business table: %w", err)
	}
	gen := newEvents(c, c.N)
	update := func(id int) func(context.Context, pgx.Tx) error {
		return func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "UPDATE business SET v = v + 1 WHERE id = $1", id)
			return err
		}
	}
	per := c.N / overheadRounds
	var seq atomic.Int64
	round := func(with bool) (time.Duration, error) {
		var next atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, c.Producers)
		start := time.Now()
		for p := range c.Producers {
			wg.Go(func() {
				rnd := rand.New(rand.NewPCG(uint64(p)+1, uint64(seq.Load())))
				for next.Add(1) <= int64(per) {
					var evs []Event
					if with {
						i := int(seq.Add(1)-1) % c.N
						evs = gen.batch(i, i+1)
					}
					if err := tp.InTx(ctx, update(1+rnd.IntN(businessRows)), evs); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		return time.Since(start), <-errs
	}
	var without, with time.Duration
	for range overheadRounds {
		d, err := round(false)
		if err != nil {
			return fmt.Errorf("without the outbox: %w", err)
		}
		without += d
		if d, err = round(true); err != nil {
			return fmt.Errorf("with the outbox: %w", err)
		}
		with += d
	}
	n := per * overheadRounds
	rate := func(d time.Duration) float64 { return float64(n) / d.Seconds() }
	fmt.Fprintf(w, "RESULT peer=%s workload=producer-overhead variant=without-outbox mode=burndown n=%d seconds=%.3f per_sec=%.0f clients=%d\n",
		c.Peer, n, without.Seconds(), rate(without), c.Producers)
	fmt.Fprintf(w, "RESULT peer=%s workload=producer-overhead variant=with-outbox mode=burndown n=%d seconds=%.3f per_sec=%.0f clients=%d overhead_pct=%.1f\n",
		c.Peer, n, with.Seconds(), rate(with), c.Producers, 100*(1-rate(with)/rate(without)))
	return nil
}
