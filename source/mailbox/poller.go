package mailbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/msgx/msgx/backoff"
	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/store"
)

// Scanner reads mailbox rows after a watermark, or in an id range (the late
// rows of a permanent gap); *Table implements it.
type Scanner interface {
	Scan(ctx context.Context, after int64, limit int) ([]Row, error)
	ScanRange(ctx context.Context, from, to int64, limit int) ([]Row, error)
	MaxID(ctx context.Context) (int64, error)
}

// Start says where a stream without a cursor begins. There is no default: a
// poller pointed at a shared mailbox must not reprocess its whole history by
// accident.
type Start struct {
	kind  startKind
	after int64
}

type startKind int

const (
	startUnset startKind = iota
	startAfterID
	startNow
	startBeginning
)

// FromID starts after id: the rows an earlier system handled are skipped.
func FromID(id int64) Start { return Start{kind: startAfterID, after: id} }

// FromNow starts after the mailbox's newest id when the cursor is created.
func FromNow() Start { return Start{kind: startNow} }

// FromBeginning takes every row of the mailbox.
func FromBeginning() Start { return Start{kind: startBeginning} }

// ErrAutoIncrementStep: the mailbox server hands out ids with a step above 1
// (auto_increment_increment > 1, as Galera sets it): every id in between
// would be a gap, and the stream would crawl at one row per max commit delay.
var ErrAutoIncrementStep = errors.New("mailbox: auto_increment_increment is above 1: ids are not consecutive, so every id in between would wait as a gap")

// ErrRewound: the mailbox's newest id is below the watermark — the table was
// truncated or its id counter reset — so new rows would get ids the poller
// has passed and would never be read.
var ErrRewound = errors.New("mailbox: ids went backwards (newest id below the watermark: table truncated or id counter reset)")

// configCheckEvery is how often the mailbox server's id step is checked.
const configCheckEvery = 5 * time.Minute

// ErrNoStart: the stream has no cursor yet and the poller was given no start.
var ErrNoStart = errors.New("mailbox: the stream has no cursor and no start was chosen (from-id, from-now or from-beginning)")

// Poller enqueues new mailbox rows into a stream of the inbox. It reads rows
// with an id above the stream's watermark W in id order, enqueues the ones
// that follow W without a hole and advances W to the last of them — both in
// one transaction of the store, so a crash in between loses nothing and a
// rescan enqueues nothing twice. A missing id (a gap: a row not committed
// yet, or never) stops it there until the row appears or the gap is older
// than the max commit delay; then the gap is recorded as permanent and
// skipped. A row of a permanent gap that commits later still is found for a
// retention period and refused (kept DEAD with class LATE) or processed out
// of order, as configured, with a record, a metric and a log line. It never
// reads the processed mark.
//
// The Poller is a prometheus.Collector of its metrics.
type Poller struct {
	table  Scanner
	db     *store.DB
	stream string
	o      pollerOptions
	nudge  chan struct{}
	m      *pollerMetrics
	// nextLateCheck: when the permanent gaps are looked at again (Poll's caller only).
	nextLateCheck time.Time
	// nextConfigCheck: when the id step is checked again.
	nextConfigCheck time.Time

	// mu guards the readability of the mailbox, which readiness, status
	// and the metrics read while polls go on.
	mu sync.Mutex
	// unreadSince is when the reads of the mailbox began to fail (zero:
	// the last read succeeded); unreadErr is the last failure.
	unreadSince time.Time
	unreadErr   error
}

// LatePolicy says what becomes of a row that shows up in a permanent gap.
type LatePolicy int

// Late policies.
const (
	// RefuseLate (the default) keeps the row in the inbox as DEAD with class
	// LATE and does not process it: the ids above it were taken in before
	// it, and applying it after them would put an older change over newer
	// ones. An operator may replay it deliberately.
	RefuseLate LatePolicy = iota
	// ProcessLate enqueues it, out of order: it is processed after the ids
	// above it, and recorded as late.
	ProcessLate
)

// lateCheckEvery is how often the permanent gaps are looked at for late rows.
const lateCheckEvery = 10 * time.Second

// maxWatchedGaps bounds the gaps looked at per check (the newest).
const maxWatchedGaps = 100

type pollerOptions struct {
	clock          clock.Clock
	log            *slog.Logger
	interval       time.Duration
	batch          int
	maxCommitDelay time.Duration
	start          Start
	scans          int
	latePolicy     LatePolicy
	gapRetention   time.Duration
	// hostTime: age gaps on the clock option instead of the database's (tests).
	hostTime bool
	// unreadableAfter: how long reads may fail before the mailbox counts
	// as unreadable (CheckReadable).
	unreadableAfter time.Duration
}

// PollerOption configures a Poller.
type PollerOption func(*pollerOptions)

// WithPollerClock sets the clock (default: wall clock).
func WithPollerClock(c clock.Clock) PollerOption { return func(o *pollerOptions) { o.clock = c } }

// WithPollerLogger sets the logger.
func WithPollerLogger(l *slog.Logger) PollerOption { return func(o *pollerOptions) { o.log = l } }

// WithPollInterval sets how often an idle poller scans (pipeline.poll-interval, default 1 s).
// A full batch is followed by the next scan at once.
func WithPollInterval(d time.Duration) PollerOption { return func(o *pollerOptions) { o.interval = d } }

// WithClaimBatch sets the rows read per scan (claim-batch, default 50).
func WithClaimBatch(n int) PollerOption { return func(o *pollerOptions) { o.batch = n } }

// WithScansPerCommit sets how many claim-batch reads one poll may enqueue in
// one transaction while the backlog has no hole (default 10): a burst costs
// one commit per that many rows, not one per claim-batch.
func WithScansPerCommit(n int) PollerOption { return func(o *pollerOptions) { o.scans = n } }

// WithMaxCommitDelay sets how long a gap may stay open before it is declared
// permanent (pipeline.max-commit-delay, default 60 s): the longest time a
// writer of the mailbox may take between taking an id and committing it.
func WithMaxCommitDelay(d time.Duration) PollerOption {
	return func(o *pollerOptions) { o.maxCommitDelay = d }
}

// WithLateRows sets what becomes of a row that commits in a gap already
// declared permanent (mailboxes.NAME.late-rows; default RefuseLate) and how
// long permanent gaps are watched for such rows (default 24 h; zero keeps
// it; the gap record stays after that).
func WithLateRows(policy LatePolicy, retention time.Duration) PollerOption {
	return func(o *pollerOptions) { o.latePolicy, o.gapRetention = policy, retention }
}

// WithUnreadableAfter sets how long the reads of the mailbox may fail (a
// missing table, a refused login, a lost connection) before CheckReadable
// reports it unreadable and an error is logged (mailboxes.NAME.unreadable-after,
// default 30 s).
func WithUnreadableAfter(d time.Duration) PollerOption {
	return func(o *pollerOptions) { o.unreadableAfter = d }
}

// WithStart sets where a stream begins when it has no cursor yet: FromID,
// FromNow or FromBeginning. Without it, polling a stream that has no cursor
// fails with ErrNoStart. Once the cursor exists the start is ignored.
func WithStart(s Start) PollerOption { return func(o *pollerOptions) { o.start = s } }

// The poller's defaults: what NewPoller uses for an option not given. They
// are the one copy of these values: a configuration that maps onto the
// options (app/config) takes its defaults from here.
const (
	DefaultPollInterval   = time.Second
	DefaultClaimBatch     = 50
	DefaultScansPerCommit = 10
	DefaultMaxCommitDelay = time.Minute
	// DefaultLateRowsWatch is how long permanent gaps are watched for late
	// rows (WithLateRows).
	DefaultLateRowsWatch   = 24 * time.Hour
	DefaultUnreadableAfter = 30 * time.Second
)

// NewPoller returns a poller enqueueing rows of table into stream in db.
func NewPoller(table Scanner, db *store.DB, stream string, opts ...PollerOption) *Poller {
	o := pollerOptions{clock: clock.Real{}, log: slog.Default(), interval: DefaultPollInterval, batch: DefaultClaimBatch,
		maxCommitDelay: DefaultMaxCommitDelay, scans: DefaultScansPerCommit,
		gapRetention: DefaultLateRowsWatch, unreadableAfter: DefaultUnreadableAfter}
	for _, opt := range opts {
		opt(&o)
	}
	if o.batch < 1 {
		o.batch = 1
	}
	if o.scans < 1 {
		o.scans = 1
	}
	if o.gapRetention <= 0 {
		o.gapRetention = DefaultLateRowsWatch
	}
	if o.unreadableAfter <= 0 {
		o.unreadableAfter = DefaultUnreadableAfter
	}
	p := &Poller{table: table, db: db, stream: stream, o: o, nudge: make(chan struct{}, 1)}
	p.m = newPollerMetrics(stream, p.unreadableSeconds)
	return p
}

// readError is a failed read of the mailbox table, as opposed to a failure
// of the store: only those make the mailbox unreadable.
type readError struct{ err error }

func (e *readError) Error() string { return e.err.Error() }
func (e *readError) Unwrap() error { return e.err }

// mailboxRead marks err, from a read of the mailbox table, as a readError.
func mailboxRead(err error) error {
	if err == nil {
		return nil
	}
	return &readError{err: err}
}

// noteRead records the outcome of a poll: a success makes the mailbox
// readable, a failed read of the mailbox makes it unreadable from now on
// unless it was already; a failure of the store alone changes nothing.
func (p *Poller) noteRead(err error) {
	var re *readError
	if err != nil && !errors.As(err, &re) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err == nil {
		p.unreadSince, p.unreadErr = time.Time{}, nil
		return
	}
	if p.unreadSince.IsZero() {
		p.unreadSince = p.o.clock.Now()
	}
	p.unreadErr = err
}

// Unreadable reports since when the reads of the mailbox have failed and
// the last failure; a zero time when the last poll read it.
func (p *Poller) Unreadable() (since time.Time, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.unreadSince, p.unreadErr
}

// CheckReadable is the poller's readiness: an error naming how long and why
// once the mailbox has been unreadable for unreadable-after or longer.
func (p *Poller) CheckReadable(context.Context) error {
	since, err := p.Unreadable()
	if since.IsZero() {
		return nil
	}
	if d := p.o.clock.Now().Sub(since); d >= p.o.unreadableAfter {
		return fmt.Errorf("stream %s: mailbox unreadable for %s (since %s): %w", p.stream, d.Round(time.Second),
			since.UTC().Format(time.RFC3339), err)
	}
	return nil
}

func (p *Poller) unreadableSeconds() float64 {
	since, _ := p.Unreadable()
	if since.IsZero() {
		return 0
	}
	return max(0, p.o.clock.Now().Sub(since).Seconds())
}

// Nudge makes the poller scan now (the HTTP ingress calls it after an insert).
func (p *Poller) Nudge() {
	select {
	case p.nudge <- struct{}{}:
	default:
	}
}

// PollResult is the outcome of one scan.
type PollResult struct {
	// Enqueued counts rows new to the inbox.
	Enqueued int
	// Watermark is W after the scan.
	Watermark int64
	// GapFrom is the first missing id the poller waits for (0: none).
	GapFrom int64
	// Skipped counts ids declared a permanent gap in this scan.
	Skipped int64
	// Advanced: W moved, so the pump may have new work.
	Advanced bool
	// More: the last read was a full batch and W advanced; poll again at once.
	More bool
	// Late counts rows of permanent gaps found in this poll (taken or refused).
	Late int
}

// Poll reads the rows after W and enqueues the ones it may, in one
// transaction. It keeps track of whether the mailbox could be read
// (Unreadable, CheckReadable).
func (p *Poller) Poll(ctx context.Context) (PollResult, error) {
	res, err := p.poll(ctx)
	if ctx.Err() == nil {
		p.noteRead(err)
	}
	return res, err
}

func (p *Poller) poll(ctx context.Context) (PollResult, error) {
	now, err := p.now(ctx)
	if err != nil {
		return PollResult{}, err
	}
	cur, ok, err := inbox.LoadCursor(ctx, p.db, p.stream)
	if err != nil {
		return PollResult{}, err
	}
	if !ok {
		if err := p.initCursor(ctx, now); err != nil {
			return PollResult{}, err
		}
		if cur, _, err = inbox.LoadCursor(ctx, p.db, p.stream); err != nil {
			return PollResult{}, err
		}
	}
	if !now.Before(p.nextConfigCheck) {
		if err := p.checkStep(ctx); err != nil {
			return PollResult{Watermark: cur.Watermark, GapFrom: cur.GapFrom}, err
		}
		p.nextConfigCheck = now.Add(configCheckEvery)
	}
	late := 0
	if !now.Before(p.nextLateCheck) {
		if late, err = p.checkLate(ctx, now); err != nil {
			return PollResult{Watermark: cur.Watermark, GapFrom: cur.GapFrom}, err
		}
		p.nextLateCheck = now.Add(lateCheckEvery)
	}
	next := inbox.Cursor{Watermark: cur.Watermark}
	var (
		take     []inbox.Incoming
		declared [][2]int64
		skipped  int64
		full     bool
	)
	expected := cur.Watermark + 1
	// Read claim-batch rows at a time; while the backlog goes on without a
	// hole, read on (up to scans-per-commit reads) so that one transaction
	// enqueues them all.
	for scan := 0; scan < p.o.scans; scan++ {
		rows, err := p.table.Scan(ctx, expected-1, p.o.batch)
		if err != nil {
			err = mailboxRead(err)
			return PollResult{Watermark: cur.Watermark, GapFrom: cur.GapFrom, Late: late}, err
		}
		p.m.rowsPerScan.Observe(float64(len(rows)))
		if len(rows) == 0 && scan == 0 {
			if err := p.checkRewound(ctx, cur.Watermark); err != nil {
				return PollResult{Watermark: cur.Watermark, GapFrom: cur.GapFrom, Late: late}, err
			}
		}
		full = len(rows) == p.o.batch
		stopped := false
		for _, r := range rows {
			if r.ID < expected {
				continue
			}
			if r.ID > expected {
				// expected..r.ID-1 are missing. Age the gap from when it was
				// first seen at this position; a gap at a new position starts over.
				if cur.GapFrom == expected && now.Sub(cur.GapSeenAt) >= p.o.maxCommitDelay {
					declared = append(declared, [2]int64{expected, r.ID - 1})
					skipped += r.ID - expected
					p.m.gapsPermanent.Inc()
					p.m.idsSkipped.Add(float64(r.ID - expected))
					p.o.log.Warn("mailbox: gap declared permanent; skipping it", "stream", p.stream,
						"from", expected, "to", r.ID-1, "first_seen", cur.GapSeenAt)
				} else {
					next.GapFrom, next.GapSeenAt = expected, now
					if cur.GapFrom == expected {
						next.GapSeenAt = cur.GapSeenAt
					}
					stopped = true
					break
				}
			}
			take = append(take, inbox.Incoming{ID: r.ID, Payload: r.Msg})
			expected = r.ID + 1
		}
		if stopped || !full {
			full = full && !stopped
			break
		}
	}
	next.Watermark = expected - 1
	res := PollResult{Watermark: next.Watermark, GapFrom: next.GapFrom, Skipped: skipped,
		Advanced: next.Watermark > cur.Watermark,
		More:     full && next.Watermark > cur.Watermark, Late: late}
	if next == cur {
		return res, nil
	}
	err = p.db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		n, err := inbox.Enqueue(ctx, tx, p.stream, now, take...)
		if err != nil {
			return err
		}
		res.Enqueued = n
		for _, g := range declared {
			if err := inbox.RecordGap(ctx, tx, p.stream, g[0], g[1], cur.GapSeenAt, now); err != nil {
				return err
			}
		}
		return inbox.SetCursor(ctx, tx, p.stream, cur, next, now)
	})
	if err != nil {
		if errors.Is(err, inbox.ErrCursorMoved) {
			return PollResult{Watermark: cur.Watermark, More: true, Late: late}, nil
		}
		return PollResult{Watermark: cur.Watermark, GapFrom: cur.GapFrom, Late: late}, fmt.Errorf("mailbox: enqueue: %w", err)
	}
	return res, nil
}

// checkStep fails when the mailbox server's ids do not step by one.
func (p *Poller) checkStep(ctx context.Context) error {
	t, ok := p.table.(interface {
		AutoIncrementStep(ctx context.Context) (int64, error)
	})
	if !ok {
		return nil
	}
	step, err := t.AutoIncrementStep(ctx)
	if err != nil {
		return mailboxRead(err)
	}
	if step > 1 {
		p.m.anomalies.WithLabelValues(anomalyIncrement).Inc()
		return fmt.Errorf("%w (it is %d)", ErrAutoIncrementStep, step)
	}
	return nil
}

// checkRewound fails when the mailbox's newest id is below the watermark. It
// runs when a scan finds nothing, which is also what a rewound mailbox looks
// like.
func (p *Poller) checkRewound(ctx context.Context, watermark int64) error {
	max, err := p.table.MaxID(ctx)
	if err != nil {
		return mailboxRead(err)
	}
	if max < watermark {
		p.m.anomalies.WithLabelValues(anomalyBackwards).Inc()
		return fmt.Errorf("%w: newest id %d, watermark %d", ErrRewound, max, watermark)
	}
	return nil
}

// initCursor creates the stream's cursor at the chosen start.
func (p *Poller) initCursor(ctx context.Context, now time.Time) error {
	var after int64
	switch p.o.start.kind {
	case startUnset:
		return ErrNoStart
	case startAfterID:
		after = p.o.start.after
	case startNow:
		max, err := p.table.MaxID(ctx)
		if err != nil {
			return mailboxRead(err)
		}
		after = max
	}
	p.o.log.Info("mailbox: stream starts", "stream", p.stream, "after_id", after)
	return inbox.InitCursor(ctx, p.db, p.stream, after, now)
}

// KeepsWatermark tells the engine that this source keeps the stream's
// watermark: until the cursor exists, the pump processes nothing, so a
// message enqueued by another path cannot overtake older mailbox rows.
func (p *Poller) KeepsWatermark() bool { return true }

// now is the time gaps age by: the store's clock, shared by every host that
// may run the poller (the clock option only drives the poll timer).
func (p *Poller) now(ctx context.Context) (time.Time, error) {
	if p.o.hostTime {
		return p.o.clock.Now(), nil
	}
	return store.Now(ctx, p.db)
}

// errorBackoff is the wait after consecutive failed polls: 1 s doubling to 30 s.
var errorBackoff = backoff.Policy{Initial: time.Second, Max: 30 * time.Second, Multiplier: 2}

// failureLogEvery bounds how often a run of failed polls is logged.
const failureLogEvery = 30 * time.Second

// Run scans until ctx ends; it implements inbox.Source. After a failed poll
// it waits 1 s, doubling to 30 s while the failures go on (nudges do not cut
// that short), and logs the first failure, then at most one line per 30 s,
// and an error line as the mailbox's reads have failed for unreadable-after
// (readiness fails from then on), then the recovery.
func (p *Poller) Run(ctx context.Context, wake func()) error {
	var (
		failures int
		loggedAt time.Time
		// pastUnreadable: this run of failures was logged as making the
		// mailbox unreadable.
		pastUnreadable bool
	)
	for {
		res, err := p.Poll(ctx)
		if ctx.Err() != nil {
			return nil
		}
		wait := p.o.interval
		nudge := p.nudge
		if err != nil {
			failures++
			p.m.scanErrors.Inc()
			wait, nudge = errorBackoff.Delay(failures), nil
			now := p.o.clock.Now()
			unreadable := !pastUnreadable && p.CheckReadable(ctx) != nil
			if failures == 1 || unreadable || now.Sub(loggedAt) >= failureLogEvery {
				loggedAt = now
				level := slog.LevelWarn
				if errors.Is(err, ErrAutoIncrementStep) || errors.Is(err, ErrRewound) {
					level = slog.LevelError
				}
				msg := "mailbox: poll failed"
				if unreadable {
					// Once per run of failures, in place of the periodic line.
					pastUnreadable, level = true, slog.LevelError
					since, _ := p.Unreadable()
					msg = "mailbox: poll failed; unreadable for longer than unreadable-after, /readyz fails until it is read again"
					p.o.log.Log(ctx, level, msg, "stream", p.stream, "err", err, "failures", failures, "retry_in", wait,
						"unreadable_since", since, "unreadable_after", p.o.unreadableAfter)
				} else {
					p.o.log.Log(ctx, level, msg, "stream", p.stream, "err", err, "failures", failures, "retry_in", wait)
				}
			}
		} else {
			if failures > 0 {
				p.o.log.Info("mailbox: polling again after failures", "stream", p.stream, "failures", failures)
				failures, pastUnreadable = 0, false
			}
			if res.Advanced || res.Late > 0 {
				wake()
			}
			if res.More {
				continue
			}
		}
		t := p.o.clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-nudge:
		case <-t.C():
		}
		t.Stop()
	}
}

// checkLate looks at the permanent gaps declared within the retention period
// for rows that committed after all, and takes each in late or refuses it
// (recorded either way, once). It returns how many it found.
func (p *Poller) checkLate(ctx context.Context, now time.Time) (int, error) {
	gaps, err := inbox.GapsSince(ctx, p.db, p.stream, now.Add(-p.o.gapRetention), maxWatchedGaps)
	if err != nil {
		return 0, err
	}
	p.m.gapsWatched.Set(float64(len(gaps)))
	action := inbox.LateRefused
	if p.o.latePolicy == ProcessLate {
		action = inbox.LateTaken
	}
	found := 0
	for _, g := range gaps {
		n, err := p.takeLate(ctx, g, action, now)
		found += n
		if err != nil {
			return found, err
		}
	}
	return found, nil
}

// takeLate records the rows that showed up in one permanent gap, a claim
// batch at a time.
func (p *Poller) takeLate(ctx context.Context, g inbox.Gap, action inbox.LateAction, now time.Time) (int, error) {
	found := 0
	for from := g.From; from <= g.To; {
		rows, err := p.table.ScanRange(ctx, from, g.To, p.o.batch)
		if err != nil || len(rows) == 0 {
			return found, mailboxRead(err)
		}
		from = rows[len(rows)-1].ID + 1
		var fresh []lateRow
		err = p.db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
			fresh = fresh[:0]
			for _, r := range rows {
				isNew, err := inbox.RecordLate(ctx, tx, p.stream, g.ID, r.ID, action, now)
				if err != nil {
					return err
				}
				if !isNew {
					continue
				}
				why := ""
				if action == inbox.LateTaken {
					if _, err := inbox.Enqueue(ctx, tx, p.stream, now, inbox.Incoming{ID: r.ID, Payload: r.Msg}); err != nil {
						return err
					}
				} else if why, err = p.refuseLate(ctx, tx, g, r, now); err != nil {
					return err
				}
				fresh = append(fresh, lateRow{id: r.ID, why: why})
			}
			return nil
		})
		if err != nil {
			return found, fmt.Errorf("mailbox: record late rows of gap %d-%d: %w", g.From, g.To, err)
		}
		for _, r := range fresh {
			p.m.late.WithLabelValues(string(action)).Inc()
			p.o.log.Warn("mailbox: a row of a permanent gap committed late", "stream", p.stream, "id", r.id,
				"gap_from", g.From, "gap_to", g.To, "gap_declared", g.DeclaredAt, "action", action, "reason", r.why)
		}
		found += len(fresh)
		if len(rows) < p.o.batch {
			return found, nil
		}
	}
	return found, nil
}

// lateRow is a late row found in a poll and, when refused, why.
type lateRow struct {
	id  int64
	why string
}

// refuseLate keeps a late row in the inbox as DEAD with class LATE, with a
// reason that tells an operator what replaying it would do: its id, how
// long after its id was first seen missing it showed up, and the newer
// messages already applied.
func (p *Poller) refuseLate(ctx context.Context, tx store.Tx, g inbox.Gap, r Row, now time.Time) (string, error) {
	applied, err := inbox.AppliedAfter(ctx, tx, p.stream, r.ID)
	if err != nil {
		return "", err
	}
	newer := "none yet"
	switch {
	case applied.Count == 1:
		newer = fmt.Sprintf("%d", applied.First)
	case applied.Count > 1:
		newer = fmt.Sprintf("%d in all, %d to %d", applied.Count, applied.First, applied.Last)
	}
	why := fmt.Sprintf("late: mailbox row %d committed after its gap %d-%d was declared permanent at %s (missing since %s, %s before it was found); "+
		"newer messages already applied: %s; not processed so that an older change does not overwrite newer ones: replay it to apply it after them",
		r.ID, g.From, g.To, g.DeclaredAt.UTC().Format(time.RFC3339), g.FirstSeenAt.UTC().Format(time.RFC3339),
		now.Sub(g.FirstSeenAt).Round(time.Second), newer)
	stored, err := inbox.EnqueueDead(ctx, tx, p.stream, now, inbox.Incoming{ID: r.ID, Payload: r.Msg}, inbox.Late, why)
	if err != nil {
		return "", err
	}
	if !stored {
		// Its writer's own enqueue (the HTTP ingress, a broker source) took
		// it in already: the inbox keeps what it has; the log says so.
		why = "already in the inbox, left as it is; " + why
	}
	return why, nil
}
