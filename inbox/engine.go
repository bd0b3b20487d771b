package inbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/msgx/msgx/backoff"
	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/failpoint"
	"github.com/msgx/msgx/internal/dbclock"
	"github.com/msgx/msgx/store"
)

// Source feeds a stream (a mailbox poller, ...). The engine runs its sources
// only while it holds the stream's lease; Run returns when ctx ends and calls
// wake after enqueueing so the pump does not wait for its poll interval. A
// source that keeps the stream's watermark (the cursor) says so with a
// method KeepsWatermark() bool: until it has created the cursor, the pump
// then processes nothing, so a message enqueued by another path (HTTP)
// cannot overtake the rows the source has not read yet.
type Source interface {
	Run(ctx context.Context, wake func()) error
}

// Backfiller writes the processed mark of terminal messages back to where
// they came from (the mailbox row). It must be idempotent.
type Backfiller interface {
	Backfill(ctx context.Context, ids []int64, at time.Time) error
}

// TxBackfiller is a Backfiller that can also write the mark inside a
// transaction of the engine's store, when its mailbox lives there (the same
// database). The engine then writes the mark of terminal messages in the pump
// transaction that finishes them: no intent to record, no second transaction
// and no second update of the inbox row after the commit.
type TxBackfiller interface {
	Backfiller
	// BackfillsIn reports whether the marks live in db.
	BackfillsIn(db *store.DB) bool
	// BackfillTx writes the mark of ids in tx. It may hold the write back
	// (tx.ExecBatch under store.Defer): a failure then aborts the transaction.
	BackfillTx(ctx context.Context, tx store.Tx, ids []int64, at time.Time) error
}

// Job is a maintenance job run on the engine's maintenance goroutine while it
// holds the lease. Run must be bounded (a batch, not a backlog); returning
// more=true runs it again soon.
type Job struct {
	Name  string
	Every time.Duration
	Run   func(ctx context.Context) (more bool, err error)
}

// Committed describes one committed pump transaction.
type Committed struct {
	Stream string
	// IDs are the messages that reached a terminal status, in order.
	IDs []int64
	// Failed is the message recorded FAILED/DEAD at the end of the batch, or 0.
	Failed int64
}

type options struct {
	// tracer, when set, gives every processing attempt a span (WithTracer).
	tracer trace.Tracer
	// clock is this host's clock; on PostgreSQL, unless dbClockOff, the
	// engine reads it corrected to the database's clock (dbclock).
	clock        clock.Clock
	dbClockOff   bool
	log          *slog.Logger
	reg          prometheus.Registerer
	groupSize    int
	maxAttempts  int
	backoff      backoff.Policy
	headDeadline time.Duration
	attemptLimit time.Duration
	stmtTimeout  time.Duration
	lockTimeout  time.Duration
	pollInterval time.Duration
	leaseTTL     time.Duration
	owner        string
	sources      []Source
	jobs         []Job
	onCommit     func(Committed)
	parkHook     func(until time.Time)
	// leaseHostTime: lease expiry on the engine clock (tests).
	leaseHostTime bool

	backfiller      Backfiller
	shadow          bool
	backfillEvery   time.Duration
	backfillBackoff backoff.Policy
	overdue         time.Duration
	backfillBatch   int

	archiveAfter time.Duration
	archiveEvery time.Duration
	archiveBatch int
	jobTimeout   time.Duration

	failpoints *failpoint.Set
}

// Option configures an Engine.
type Option func(*options)

// WithClock sets this host's clock (default the wall clock). On PostgreSQL
// the engine reads it corrected by its measured offset to the database
// server's clock, so that the retry times and head deadlines one leader
// writes hold for the next on another host (see WithDatabaseClock).
func WithClock(c clock.Clock) Option { return func(o *options) { o.clock = c } }

// WithDatabaseClock says whether, on PostgreSQL, the engine corrects its
// clock to the database server's (default true; SQLite has one process and
// no correction). Off, every scheduling decision reads the clock of
// WithClock as it is, which must then agree across the engines of a stream
// to well under the backoff: tests on a fake clock, or engines on the
// database's host.
func WithDatabaseClock(on bool) Option { return func(o *options) { o.dbClockOff = !on } }

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithRegisterer registers the engine's metrics (default: none).
func WithRegisterer(r prometheus.Registerer) Option { return func(o *options) { o.reg = r } }

// WithGroupSize sets how many consecutive ready messages one transaction may
// process (default DefaultGroupSize, 50; 1 = one transaction per message).
// Each message runs in its own savepoint; on PostgreSQL, keep it at or below
// 64 so the subtransactions of a batch stay in the backend's subtransaction
// cache.
func WithGroupSize(n int) Option { return func(o *options) { o.groupSize = n } }

// WithMaxAttempts sets the attempts after which a failing head goes
// DEAD(EXHAUSTED) (default 5).
func WithMaxAttempts(n int) Option { return func(o *options) { o.maxAttempts = n } }

// WithBackoff sets the retry delays (default DefaultBackoff: 1, 2, 4, 8,
// 16 s, capped at 60 s).
func WithBackoff(p backoff.Policy) Option { return func(o *options) { o.backoff = p } }

// WithHeadDeadline sets how long a message may hold the head from its first
// attempt before it goes DEAD(EXHAUSTED) (default 10 min).
func WithHeadDeadline(d time.Duration) Option { return func(o *options) { o.headDeadline = d } }

// WithAttemptTimeout bounds one processing attempt (default 60 s): the
// processor's context ends then, and the attempt is an INFRA failure of the
// message, retried with backoff like any other. A processor must return when
// its context ends; the database statements it runs do.
func WithAttemptTimeout(d time.Duration) Option { return func(o *options) { o.attemptLimit = d } }

// WithStatementTimeouts sets PostgreSQL's statement_timeout (default 30 s) and
// lock_timeout (default 10 s) for the pump's transactions, so that a statement
// stuck on a lock or a runaway query fails instead of holding the stream.
func WithStatementTimeouts(statement, lock time.Duration) Option {
	return func(o *options) { o.stmtTimeout, o.lockTimeout = statement, lock }
}

// WithPollInterval sets how long an idle pump waits before looking again
// when no source wakes it (default 1 s).
func WithPollInterval(d time.Duration) Option { return func(o *options) { o.pollInterval = d } }

// WithLease sets the stream lease's time to live (default 30 s); it is renewed
// every third of it, and a standby tries to take it as often.
func WithLease(ttl time.Duration) Option { return func(o *options) { o.leaseTTL = ttl } }

// WithOwner names this process in the lease (default host-pid-random); a
// service instance uses OwnerFor(its instance id).
func WithOwner(name string) Option { return func(o *options) { o.owner = name } }

// WithSource adds a source run while this engine holds the lease.
func WithSource(s Source) Option { return func(o *options) { o.sources = append(o.sources, s) } }

// WithJob adds a maintenance job.
func WithJob(j Job) Option { return func(o *options) { o.jobs = append(o.jobs, j) } }

// WithOnCommit calls f after every committed pump transaction (for
// instrumentation; it runs on the pump goroutine, so keep it short).
func WithOnCommit(f func(Committed)) Option { return func(o *options) { o.onCommit = f } }

// WithBackfill registers the backfill intent at every terminal commit and
// writes the processed mark with b: once right after the commit, then by a
// sweep with backoff (default: no backfill). A TxBackfiller whose marks live
// in the engine's store has them written in the pump transaction instead.
func WithBackfill(b Backfiller) Option { return func(o *options) { o.backfiller = b } }

// WithShadow runs the stream in shadow mode: no backfill intent, no writes to
// the source.
func WithShadow(on bool) Option { return func(o *options) { o.shadow = on } }

// WithBackfillSweep sets the sweep period (default 30 s), the retry delays
// (default DefaultBackfillRetry: 30 s doubling to 15 min), the overdue limit
// R after which a message's mark is written regardless of its backoff
// (default 1 h, counted from its receipt), and the batch size (default 100).
// A zero value keeps its default.
func WithBackfillSweep(every time.Duration, retry backoff.Policy, overdue time.Duration, batch int) Option {
	return func(o *options) {
		o.backfillEvery, o.backfillBackoff, o.overdue, o.backfillBatch = every, retry, overdue, batch
	}
}

// WithFailpoints arms the engine's failpoints (failpoint.InboxAfterCommit,
// failpoint.InboxMidBatch; default none): a test setting of the
// reliability campaign.
func WithFailpoints(s *failpoint.Set) Option { return func(o *options) { o.failpoints = s } }

// WithArchive moves terminal messages finished longer than after ago (and
// backfilled) to the archive table, batch rows per transaction, every period
// (default: off). Identities stay bound, so a later duplicate is still caught.
func WithArchive(after, every time.Duration, batch int) Option {
	return func(o *options) { o.archiveAfter, o.archiveEvery, o.archiveBatch = after, every, batch }
}

// The engine's defaults: what New uses for an option not given (or given
// as zero). They are the one copy of these values: a configuration that maps
// onto the options (app/config) takes its defaults from here.
const (
	DefaultGroupSize        = 50
	DefaultMaxAttempts      = 5
	DefaultHeadDeadline     = 10 * time.Minute
	DefaultAttemptTimeout   = time.Minute
	DefaultStatementTimeout = 30 * time.Second
	DefaultLockTimeout      = 10 * time.Second
	DefaultPollInterval     = time.Second
	DefaultLease            = 30 * time.Second
	DefaultBackfillEvery    = 30 * time.Second
	DefaultBackfillOverdue  = time.Hour
	DefaultBackfillBatch    = 100
	DefaultArchiveEvery     = time.Hour
	DefaultArchiveBatch     = 500
)

// DefaultBackoff is the retry delays of a failing head: 1 s doubling to at
// most 60 s, over DefaultMaxAttempts attempts.
func DefaultBackoff() backoff.Policy {
	return backoff.Policy{MaxAttempts: DefaultMaxAttempts, Initial: time.Second, Max: time.Minute, Multiplier: 2}
}

// DefaultBackfillRetry is the backfill sweep's retry delays of a mark that
// could not be written: 30 s doubling to at most 15 min.
func DefaultBackfillRetry() backoff.Policy {
	return backoff.Policy{Initial: 30 * time.Second, Max: 15 * time.Minute, Multiplier: 2}
}

func defaults() options {
	return options{
		clock:           clock.Real{},
		log:             slog.Default(),
		groupSize:       DefaultGroupSize,
		maxAttempts:     DefaultMaxAttempts,
		backoff:         DefaultBackoff(),
		headDeadline:    DefaultHeadDeadline,
		attemptLimit:    DefaultAttemptTimeout,
		stmtTimeout:     DefaultStatementTimeout,
		lockTimeout:     DefaultLockTimeout,
		pollInterval:    DefaultPollInterval,
		leaseTTL:        DefaultLease,
		backfillEvery:   DefaultBackfillEvery,
		backfillBackoff: DefaultBackfillRetry(),
		overdue:         DefaultBackfillOverdue,
		backfillBatch:   DefaultBackfillBatch,
		archiveEvery:    DefaultArchiveEvery,
		archiveBatch:    DefaultArchiveBatch,
		jobTimeout:      2 * time.Minute,
	}
}

// Engine pumps one stream.
type Engine struct {
	db     *store.DB
	q      store.Queries
	stream string
	proc   Processor
	o      options
	clk    clock.Clock
	dbc    *dbclock.Clock // PostgreSQL without WithClock: clk, corrected to the database's clock
	log    *slog.Logger
	lease  lease
	m      *metrics

	wake       chan struct{}
	backfillCh chan []int64
	// txMark writes the processed marks in the pump transaction (a mailbox
	// in the store), or is nil.
	txMark  TxBackfiller
	leader  atomic.Bool
	running atomic.Bool
	// superseded is set, once and for good, when another live process of
	// this instance id took the lease over (ErrSuperseded).
	superseded atomic.Pointer[error]
	// isolate counts messages still to be processed one per transaction after
	// a group transaction failed as a whole (e.g. at commit), so that the
	// failure is charged to the message that causes it.
	isolate int
	// lowMark: every message below it is finished. It, isolate and
	// fullScanAt belong to the current step: a step reading ahead changes
	// none of them before the step before it has ended.
	lowMark    int64
	fullScanAt time.Time
	rescan     atomic.Bool
	// noCursorBound is how far the pump may go while the stream has no
	// cursor: nowhere when a source keeps the watermark.
	noCursorBound int64
	// headID and headSince (engine clock, Unix ns) say which message is the
	// head and since when; the head-age gauge reads them at scrape time, so a
	// pump stuck inside a step still shows a growing age.
	headID    atomic.Int64
	headSince atomic.Int64
}

// New returns an engine for stream. Call Run to start it.
func New(db *store.DB, stream string, proc Processor, opts ...Option) (*Engine, error) {
	if stream == "" {
		return nil, errors.New("inbox: empty stream name")
	}
	if proc == nil {
		return nil, errors.New("inbox: nil processor")
	}
	o := defaults()
	for _, opt := range opts {
		opt(&o)
	}
	if o.groupSize < 1 {
		o.groupSize = 1
	}
	if o.maxAttempts < 1 {
		o.maxAttempts = 1
	}
	if o.owner == "" {
		o.owner = defaultOwner()
	}
	if o.tracer != nil {
		proc = traced(o.tracer, proc)
	}
	// Zero or negative durations would make loops spin: fall back to defaults.
	d := defaults()
	for _, p := range []struct{ v, def *time.Duration }{
		{&o.headDeadline, &d.headDeadline}, {&o.pollInterval, &d.pollInterval}, {&o.leaseTTL, &d.leaseTTL},
		{&o.backfillEvery, &d.backfillEvery}, {&o.overdue, &d.overdue}, {&o.archiveEvery, &d.archiveEvery},
		{&o.jobTimeout, &d.jobTimeout}, {&o.attemptLimit, &d.attemptLimit}, {&o.stmtTimeout, &d.stmtTimeout},
		{&o.lockTimeout, &d.lockTimeout},
	} {
		if *p.v <= 0 {
			*p.v = *p.def
		}
	}
	if o.backfillBatch < 1 {
		o.backfillBatch = d.backfillBatch
	}
	if o.archiveBatch < 1 {
		o.archiveBatch = d.archiveBatch
	}
	if o.backfillBackoff.Initial <= 0 {
		o.backfillBackoff = d.backfillBackoff
	}
	for _, j := range o.jobs {
		if j.Every <= 0 || j.Run == nil {
			return nil, fmt.Errorf("inbox: job %q needs a period and a function", j.Name)
		}
	}
	q, err := queriesFor(db.Dialect())
	if err != nil {
		return nil, err
	}
	if o.clock == nil {
		return nil, errors.New("inbox: nil clock")
	}
	clk := o.clock
	var dbc *dbclock.Clock
	if !o.dbClockOff && db.Dialect() == store.Postgres {
		dbc = dbclock.New(o.clock)
		clk = dbc
	}
	e := &Engine{
		db: db, q: q, stream: stream, proc: proc, o: o, clk: clk, dbc: dbc,
		log: o.log.With("stream", stream),
		lease: lease{db: db, q: q, name: leaseName(stream), owner: o.owner, ttl: o.leaseTTL,
			stmtTimeout: millis(o.stmtTimeout), lockTimeout: millis(o.lockTimeout), hostTime: o.leaseHostTime},
		wake:       make(chan struct{}, 1),
		backfillCh: make(chan []int64, 64),
	}
	if tb, ok := o.backfiller.(TxBackfiller); ok && tb.BackfillsIn(db) {
		e.txMark = tb
	}
	e.noCursorBound = math.MaxInt64
	for _, s := range o.sources {
		if w, ok := s.(interface{ KeepsWatermark() bool }); ok && w.KeepsWatermark() {
			e.noCursorBound = 0
		}
	}
	if e.m, err = newMetrics(o.reg, stream, e.headAge); err != nil {
		return nil, err
	}
	return e, nil
}

func millis(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

func defaultOwner() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// Stream is the stream this engine pumps.
func (e *Engine) Stream() string { return e.stream }

// DB is the engine's store.
func (e *Engine) DB() *store.DB { return e.db }

// Clock is the engine's clock.
func (e *Engine) Clock() clock.Clock { return e.clk }

// IsLeader reports whether this engine holds the stream lease right now.
func (e *Engine) IsLeader() bool { return e.leader.Load() }

// Superseded returns an error wrapping ErrSuperseded once another live
// process with this process's instance id has taken the stream's lease over,
// and nil before: from then on this engine no longer pumps the stream nor
// tries to take it back (the two would take it from each other at every
// renewal), until this process is restarted. The service's /readyz fails
// with it.
func (e *Engine) Superseded() error {
	if p := e.superseded.Load(); p != nil {
		return *p
	}
	return nil
}

// Wake makes an idle pump look for work now.
func (e *Engine) Wake() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Enqueue stores messages a writer of the stream's mailbox stored there (the
// HTTP ingress) as PENDING in their own transaction and wakes the pump.
// Messages already known are left alone, and so is a message in a gap the
// poller declared permanent: its late-row policy decides (EnqueueWritten).
func (e *Engine) Enqueue(ctx context.Context, msgs ...Incoming) (int, error) {
	var n int
	err := e.db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		var err error
		n, err = EnqueueWritten(ctx, tx, e.stream, e.clk.Now(), msgs...)
		return err
	})
	if err != nil {
		return 0, err
	}
	e.Wake()
	return n, nil
}

// Run pumps the stream until ctx ends, then returns nil after every goroutine
// it started has exited. While another process holds the stream's lease it
// waits as a hot standby and takes over when that lease is released or
// expires.
func (e *Engine) Run(ctx context.Context) error {
	if !e.running.CompareAndSwap(false, true) {
		return errors.New("inbox: engine already running")
	}
	defer e.running.Store(false)
	standbyLogged := false
	for {
		e.syncClock(ctx)
		ok, err := e.lease.acquire(ctx, e.clk.Now())
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case err != nil:
			e.log.Warn("inbox: lease acquisition failed", "err", err)
		case ok:
			standbyLogged = false
			e.lead(ctx)
			if ctx.Err() != nil {
				return nil
			}
			if e.Superseded() != nil {
				// Stay out of the stream: the twin pumps it.
				<-ctx.Done()
				return nil
			}
		case !standbyLogged:
			// Say who: the holder's instance id is what the operator
			// finds the other process by.
			holder := "unknown"
			if h, ok, err := HolderOf(ctx, e.db, e.stream); err == nil && ok {
				holder = h.Instance
			}
			e.log.Info("inbox: another process pumps the stream; standing by", "lease", e.lease.name, "holder", holder, "owner", e.o.owner)
			standbyLogged = true
		}
		if !e.sleep(ctx, e.o.leaseTTL/3, nil) {
			return nil
		}
	}
}

// syncClock measures the offset of the database's clock when it is due
// (PostgreSQL, unless WithClock chose the clock). A failed measurement keeps
// the last offset: the next one is tried at the next lease period.
func (e *Engine) syncClock(ctx context.Context) {
	if e.dbc == nil || !e.dbc.Due() {
		return
	}
	err := e.dbc.Sync(ctx, func(ctx context.Context) (time.Time, error) { return store.Now(ctx, e.db) })
	if err != nil && ctx.Err() == nil {
		e.log.Warn("inbox: the database's clock could not be read; the last offset stays", "offset", e.dbc.Offset().String(), "err", err)
	}
}

// lead runs the pump, the sources, the maintenance jobs and the lease renewal
// until ctx ends or the lease is lost.
func (e *Engine) lead(ctx context.Context) {
	e.log.Info("inbox: stream lease acquired; pumping", "owner", e.o.owner)
	e.leader.Store(true)
	e.m.leader.Set(1)
	defer func() {
		e.leader.Store(false)
		e.m.leader.Set(0)
		e.setHead(0, time.Time{})
	}()
	lctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	wg.Go(func() { e.renew(lctx, cancel) })
	wg.Go(func() { e.maintain(lctx) })
	for _, s := range e.o.sources {
		wg.Go(func() {
			if err := s.Run(lctx, e.Wake); err != nil && lctx.Err() == nil {
				e.log.Error("inbox: source stopped; giving up the stream", "err", err)
				cancel(err)
			}
		})
	}
	err := e.pumpLoop(lctx)
	cancel(err)
	wg.Wait()
	cause := context.Cause(lctx)
	if errors.Is(cause, ErrLeaseLost) {
		if !e.checkSuperseded(ctx) {
			e.log.Warn("inbox: stream lease lost; standing by")
		}
		return
	}
	// Give the lease up so a standby takes over at once.
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer rcancel()
	if err := e.lease.release(rctx); err != nil {
		e.log.Warn("inbox: lease release failed", "err", err)
	}
}

// checkSuperseded, once the lease is lost, asks who holds it now. Another
// incarnation of this process's instance id means two live processes share
// the id: the later one took the lease over at once, as a restart does
// (OwnerFor). This one records it (Superseded, the metric, an ERROR line) and
// reports true. Not knowing (the database does not answer) is not a twin.
func (e *Engine) checkSuperseded(ctx context.Context) bool {
	inst, ok := instanceOf(e.o.owner)
	if !ok {
		return false
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	h, held, err := HolderOf(rctx, e.db, e.stream)
	if err != nil {
		e.log.Warn("inbox: stream lease lost; its holder could not be read", "err", err)
		return false
	}
	if !held || h.Instance != inst || h.Owner == e.o.owner {
		return false
	}
	err = fmt.Errorf("%w: %s holds it, this process is %s: two live processes run with instance-id %q; this one stops pumping stream %s until it is restarted with an instance-id of its own",
		ErrSuperseded, h.Owner, e.o.owner, inst, e.stream)
	e.superseded.Store(&err)
	e.m.superseded.Set(1)
	e.log.Error("inbox: another live process with this instance id took the stream's lease over; this process stops pumping the stream",
		"instance", inst, "owner", e.o.owner, "holder", h.Owner, "err", err)
	return true
}

// renew keeps the lease alive; it cancels the leader context when the lease
// is lost or could not be renewed before it expired.
func (e *Engine) renew(ctx context.Context, cancel context.CancelCauseFunc) {
	expires := e.clk.Now().Add(e.o.leaseTTL)
	for {
		if !e.sleep(ctx, e.o.leaseTTL/3, nil) {
			return
		}
		e.syncClock(ctx)
		now := e.clk.Now()
		err := e.lease.renew(ctx, now)
		switch {
		case err == nil:
			expires = now.Add(e.o.leaseTTL)
		case errors.Is(err, ErrLeaseLost):
			cancel(ErrLeaseLost)
			return
		case ctx.Err() != nil:
			return
		default:
			e.log.Warn("inbox: lease renewal failed", "err", err)
			if !now.Before(expires) {
				cancel(ErrLeaseLost)
				return
			}
		}
	}
}

// pumpLoop runs pump steps until ctx ends or the lease is lost. Errors of a
// step are logged and waited out here; the failure of a message is recorded
// where it is processed, never here.
func (e *Engine) pumpLoop(ctx context.Context) error {
	failures := 0
	// The previous step's transaction while it commits (read-ahead).
	var prev *committing
	defer func() {
		if prev != nil {
			<-prev.done // its commit ends with ctx at the latest
		}
	}()
	for {
		res, next, err := e.step(ctx, prev, true)
		prev = next
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, ErrLeaseLost) {
			return err
		}
		if err != nil {
			failures++
			delay := e.o.backoff.Delay(failures)
			if delay <= 0 {
				delay = e.o.pollInterval
			}
			e.log.Error("inbox: pump step failed", "err", err, "retry_in", delay)
			if !e.sleep(ctx, delay, nil) {
				return ctx.Err()
			}
			continue
		}
		failures = 0
		switch {
		case res.progress:
			continue
		case !res.wakeAt.IsZero():
			e.park(ctx, res.wakeAt)
		default:
			e.park(ctx, e.clk.Now().Add(e.o.pollInterval))
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// park waits until the given time, a wake-up or the end of ctx.
func (e *Engine) park(ctx context.Context, until time.Time) {
	d := until.Sub(e.clk.Now())
	if d <= 0 {
		return
	}
	t := e.clk.NewTimer(d)
	defer t.Stop()
	if e.o.parkHook != nil {
		e.o.parkHook(until)
	}
	select {
	case <-ctx.Done():
	case <-e.wake:
	case <-t.C():
	}
}

// sleep waits d on the engine clock; it reports false when ctx ended.
func (e *Engine) sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := e.clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-wake:
	case <-t.C():
	}
	return true
}
