// Package workload is the outbox-relay workload shared by the peer programs:
// flags, event generation, producers (unpaced burn-down and paced live), the
// in-memory sink, the timing and the RESULT line. A peer only supplies how to
// insert one transaction of events, how to run its relay into the sink and how
// to tell that every event is marked done in the database.
package workload

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/msgx/msgx/lab/bench"
)

// PayloadSize is the size of every event payload in bytes.
const PayloadSize = 200

// seqDigits is how many leading payload bytes hold the event's sequence number.
const seqDigits = 10

// DefaultDSN is the local PostgreSQL every peer runs against.
const DefaultDSN = "postgres://root@127.0.0.1:5432/test?sslmode=disable"

// Config is one run of the workload.
type Config struct {
	Peer     string
	DSN      string
	N        int
	Keys     int
	Batch    int
	Mode     string // burndown | live
	Rate     int    // live: offered events/s, all producers together
	Duration time.Duration
	// Warmup: live, the first part of the offered load whose events'
	// latencies are reported apart from the steady ones.
	Warmup    time.Duration
	Producers int
	Pool      int
	Timeout   time.Duration
	// CPUProfile, when set, is a file receiving a CPU profile of the timed phase.
	CPUProfile string
}

// ParseFlags reads the common flags of a peer program, and the program's own
// flags that extra defines.
func ParseFlags(peer string, args []string, extra ...func(*flag.FlagSet)) (Config, error) {
	c := Config{Peer: peer}
	fs := flag.NewFlagSet(peer, flag.ContinueOnError)
	for _, def := range extra {
		def(fs)
	}
	fs.StringVar(&c.DSN, "dsn", DefaultDSN, "PostgreSQL DSN; the run creates and drops its own schema")
	fs.IntVar(&c.N, "n", 50_000, "burndown: number of events")
	fs.IntVar(&c.Keys, "keys", 1_000, "number of distinct event keys")
	fs.IntVar(&c.Batch, "batch", 100, "events per producer transaction")
	fs.StringVar(&c.Mode, "mode", "burndown", "burndown | live | producer-overhead (the business transaction with and without the peer's insert; --n transactions per variant)")
	fs.IntVar(&c.Rate, "rate", 5_000, "live: offered events/s (all producers together)")
	fs.DurationVar(&c.Duration, "duration", 20*time.Second, "live: how long the producers offer load (n = rate × duration)")
	fs.DurationVar(&c.Warmup, "warmup", time.Second, "live: the latencies of events committed within this long of the load's start are reported apart (warmup_lat_*), not in lat_p50/p99")
	fs.IntVar(&c.Producers, "producers", 4, "concurrent producers")
	fs.IntVar(&c.Pool, "pool", 10, "PostgreSQL pool size")
	fs.DurationVar(&c.Timeout, "timeout", 10*time.Minute, "upper bound for the whole run")
	fs.StringVar(&c.CPUProfile, "cpuprofile", "", "write a CPU profile of the timed phase to this file")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	switch {
	case c.Mode != "burndown" && c.Mode != "live" && c.Mode != "producer-overhead":
		return c, fmt.Errorf("--mode must be burndown, live or producer-overhead, got %q", c.Mode)
	case c.N <= 0 || c.Keys <= 0 || c.Batch <= 0 || c.Producers <= 0 || c.Pool <= 0:
		return c, errors.New("--n, --keys, --batch, --producers and --pool must be positive")
	case c.Mode == "live" && (c.Rate <= 0 || c.Duration <= 0):
		return c, errors.New("live mode needs a positive --rate and --duration")
	case c.Mode == "live" && (c.Warmup < 0 || c.Warmup >= c.Duration):
		return c, errors.New("live mode needs a --warmup shorter than --duration")
	}
	return c, nil
}

// Total is the number of events the run inserts: --n in burn-down,
// rate × duration in live mode.
func (c Config) Total() int {
	if c.Mode == "live" {
		return int(float64(c.Rate) * c.Duration.Seconds())
	}
	return c.N
}

// Event is one outbox event.
type Event struct {
	Seq     int
	Key     string
	Payload []byte // PayloadSize bytes; the first seqDigits are the decimal Seq
}

// SeqOf reads the sequence number back from a delivered payload.
func SeqOf(payload []byte) (int, error) {
	if len(payload) < seqDigits {
		return 0, fmt.Errorf("payload of %d bytes is too short", len(payload))
	}
	return strconv.Atoi(string(payload[:seqDigits]))
}

// events generates the workload deterministically: the key of event i is drawn
// uniformly from Keys keys with a fixed seed, so every peer sees the same stream.
type events struct {
	keys   []string
	filler string
}

func newEvents(c Config, total int) *events {
	r := rand.New(rand.NewPCG(1, 2))
	e := &events{keys: make([]string, total), filler: strings.Repeat("x", PayloadSize)}
	for i := range e.keys {
		e.keys[i] = fmt.Sprintf("key-%06d", r.IntN(c.Keys))
	}
	return e
}

func (e *events) batch(from, to int) []Event {
	out := make([]Event, 0, to-from)
	for i := from; i < to; i++ {
		p := make([]byte, 0, PayloadSize)
		p = fmt.Appendf(p, "%0*d %s ", seqDigits, i, e.keys[i])
		p = append(p, e.filler[:PayloadSize-len(p)]...)
		out = append(out, Event{Seq: i, Key: e.keys[i], Payload: p})
	}
	return out
}

// Sink is the in-memory destination of the relay. It records when each event
// first arrived and counts duplicates.
type Sink struct {
	origin    time.Time
	recvAt    []atomic.Int64 // ns since origin, +1 so that 0 means "not yet"
	delivered atomic.Int64
	dups      atomic.Int64
	all       chan struct{}
}

func newSink(total int, origin time.Time) *Sink {
	s := &Sink{origin: origin, recvAt: make([]atomic.Int64, total), all: make(chan struct{})}
	if total == 0 {
		close(s.all)
	}
	return s
}

// Deliver records one delivered payload. It is safe for concurrent use.
func (s *Sink) Deliver(payload []byte) error {
	seq, err := SeqOf(payload)
	if err != nil {
		return err
	}
	if seq < 0 || seq >= len(s.recvAt) {
		return fmt.Errorf("unexpected sequence number %d", seq)
	}
	if !s.recvAt[seq].CompareAndSwap(0, int64(time.Since(s.origin))+1) {
		s.dups.Add(1)
		return nil
	}
	if s.delivered.Add(1) == int64(len(s.recvAt)) {
		close(s.all)
	}
	return nil
}

// Peer is one relay under test.
type Peer interface {
	// Setup creates a fresh schema with the peer's tables; the relay will
	// deliver into sink.
	Setup(ctx context.Context, sink *Sink) error
	// InsertTx inserts events in one transaction and returns once it committed.
	InsertTx(ctx context.Context, events []Event) error
	// Start starts the relay and returns once it runs.
	Start(ctx context.Context) error
	// WaitDone blocks until all n inserted events are marked done in the database.
	WaitDone(ctx context.Context, n int) error
	// Stop stops the relay.
	Stop(ctx context.Context) error
	// Teardown drops everything Setup created.
	Teardown(ctx context.Context) error
}

// PollDone calls done every pollEvery until it reports true; the peers' WaitDone
// use it to watch the database.
func PollDone(ctx context.Context, done func(context.Context) (bool, error)) error {
	const pollEvery = time.Millisecond
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		ok, err := done(ctx)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		t.Reset(pollEvery)
	}
}

// Run executes the workload against peer and prints the RESULT line to w.
func Run(ctx context.Context, c Config, peer Peer, w io.Writer) (err error) {
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	if c.Mode == "producer-overhead" {
		return runProducerOverhead(ctx, c, peer, w)
	}

	total := c.Total()
	origin := time.Now()
	sink := newSink(total, origin)
	gen := newEvents(c, total)
	nTx := (total + c.Batch - 1) / c.Batch
	commitAt := make([]atomic.Int64, nTx) // ns since origin when tx k's Commit returned

	if err := peer.Setup(ctx, sink); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	defer func() {
		// Teardown must run even when ctx is done.
		tctx, tcancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer tcancel()
		err = errors.Join(err, peer.Teardown(tctx))
	}()

	// produce runs the producers; with pace set, transaction k is not started
	// before start + k·batch/rate (open loop, at most Producers in flight).
	produce := func(ctx context.Context, start time.Time, pace bool) error {
		ctx, stop := context.WithCancel(ctx)
		defer stop()
		var next atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, c.Producers)
		interval := time.Duration(float64(time.Second) * float64(c.Batch) / float64(c.Rate))
		for range c.Producers {
			wg.Go(func() {
				timer := time.NewTimer(0)
				defer timer.Stop()
				for {
					k := int(next.Add(1) - 1)
					if k >= nTx {
						return
					}
					if pace {
						timer.Reset(time.Until(start.Add(time.Duration(k) * interval)))
						select {
						case <-ctx.Done():
							errs <- ctx.Err()
							return
						case <-timer.C:
						}
					}
					evs := gen.batch(k*c.Batch, min((k+1)*c.Batch, total))
					if err := peer.InsertTx(ctx, evs); err != nil {
						errs <- fmt.Errorf("insert tx %d: %w", k, err)
						stop() // the run failed: stop the other producers too
						return
					}
					commitAt[k].Store(int64(time.Since(origin)))
				}
			})
		}
		wg.Wait()
		close(errs)
		return <-errs
	}

	var (
		elapsed    time.Duration
		extra      [][2]string
		lats, warm []time.Duration
	)
	extra = append(extra, [2]string{"keys", strconv.Itoa(c.Keys)}, [2]string{"batch", strconv.Itoa(c.Batch)})
	profile := func() (stop func(), err error) {
		if c.CPUProfile == "" {
			return func() {}, nil
		}
		f, err := os.Create(c.CPUProfile)
		if err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, err
		}
		return func() { pprof.StopCPUProfile(); f.Close() }, nil
	}
	var sinkAt time.Time // when the last event reached the sink
	waitRelay := func() error {
		select {
		case <-sink.all:
			sinkAt = time.Now()
		case <-ctx.Done():
			return fmt.Errorf("waiting for the sink (%d of %d delivered): %w", sink.delivered.Load(), total, ctx.Err())
		}
		if err := peer.WaitDone(ctx, total); err != nil {
			return fmt.Errorf("waiting for done in the database: %w", err)
		}
		return nil
	}

	switch c.Mode {
	case "burndown":
		insStart := time.Now()
		if err := produce(ctx, insStart, false); err != nil {
			return err
		}
		insSec := time.Since(insStart).Seconds()
		extra = append(extra, [2]string{"insert_per_sec", fmt.Sprintf("%.0f", float64(total)/insSec)})
		stopProfile, err := profile()
		if err != nil {
			return err
		}
		start := time.Now()
		if err := peer.Start(ctx); err != nil {
			stopProfile()
			return fmt.Errorf("start: %w", err)
		}
		err = waitRelay()
		elapsed = time.Since(start)
		stopProfile()
		if err != nil {
			return err
		}
		extra = append(extra, [2]string{"sink_seconds", fmt.Sprintf("%.3f", sinkAt.Sub(start).Seconds())})
	case "live":
		if err := peer.Start(ctx); err != nil {
			return fmt.Errorf("start: %w", err)
		}
		stopProfile, err := profile()
		if err != nil {
			return err
		}
		start := time.Now()
		if err := produce(ctx, start, true); err != nil {
			stopProfile()
			return err
		}
		produced := time.Since(start)
		err = waitRelay()
		elapsed = time.Since(start)
		stopProfile()
		if err != nil {
			return err
		}
		steadyFrom := int64(start.Sub(origin) + c.Warmup)
		for i := range total {
			at := commitAt[i/c.Batch].Load()
			// The relay may see the rows a hair before the producer reads
			// the commit reply.
			d := max(time.Duration(sink.recvAt[i].Load()-1-at), 0)
			if at < steadyFrom {
				warm = append(warm, d)
			} else {
				lats = append(lats, d)
			}
		}
		extra = append(extra,
			[2]string{"rate", strconv.Itoa(c.Rate)},
			[2]string{"produced_per_sec", fmt.Sprintf("%.0f", float64(total)/produced.Seconds())})
	}
	if err := peer.Stop(ctx); err != nil {
		return fmt.Errorf("stop: %w", err)
	}
	extra = append(extra, [2]string{"dups", strconv.FormatInt(sink.dups.Load(), 10)})
	result(c, total, elapsed, lats, warm, extra).Print(w)
	return nil
}

// result is the run's RESULT line, formatted by msgx's own benchmark code
// (the same fields, percentiles and warm-up summary), so that lines from
// both compare directly.
func result(c Config, n int, elapsed time.Duration, lats, warm []time.Duration, extra [][2]string) bench.Result {
	r := bench.Result{Peer: c.Peer, Workload: "outbox-relay", Mode: c.Mode, N: n, Elapsed: elapsed, Latencies: lats, Extra: extra}
	if c.Mode == "live" {
		r.Warmup, r.WarmupLatencies = c.Warmup, warm
	}
	return r
}
