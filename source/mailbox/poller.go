package mailbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/internal/clock"
	"github.com/msgx/msgx/store"
)

// Scanner reads mailbox rows after a watermark; *Table implements it.
type Scanner interface {
	Scan(ctx context.Context, after int64, limit int) ([]Row, error)
}

// Poller enqueues new mailbox rows into a stream of the inbox. It reads rows
// with an id above the stream's watermark W in id order, enqueues the ones
// that follow W without a hole and advances W to the last of them — both in
// one transaction of the store, so a crash in between loses nothing and a
// rescan enqueues nothing twice. A missing id (a gap: a row not committed
// yet, or never) stops it there until the row appears or the gap is older
// than the max commit delay; then the gap is recorded as permanent and
// skipped. It never reads the processed mark.
type Poller struct {
	table  Scanner
	db     *store.DB
	stream string
	o      pollerOptions
	nudge  chan struct{}
}

type pollerOptions struct {
	clock          clock.Clock
	log            *slog.Logger
	interval       time.Duration
	batch          int
	maxCommitDelay time.Duration
	startAfter     int64
	scans          int
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

// WithStartAfter sets the watermark a stream starts from when it has none
// (default 0: every row of the table). Use the current maximum id to skip the
// rows an earlier system already handled.
func WithStartAfter(id int64) PollerOption { return func(o *pollerOptions) { o.startAfter = id } }

// NewPoller returns a poller enqueueing rows of table into stream in db.
func NewPoller(table Scanner, db *store.DB, stream string, opts ...PollerOption) *Poller {
	o := pollerOptions{clock: clock.Real{}, log: slog.Default(), interval: time.Second, batch: 50, maxCommitDelay: time.Minute, scans: 10}
	for _, opt := range opts {
		opt(&o)
	}
	if o.batch < 1 {
		o.batch = 1
	}
	if o.scans < 1 {
		o.scans = 1
	}
	return &Poller{table: table, db: db, stream: stream, o: o, nudge: make(chan struct{}, 1)}
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
}

// Poll reads the rows after W and enqueues the ones it may, in one transaction.
func (p *Poller) Poll(ctx context.Context) (PollResult, error) {
	cur, ok, err := inbox.LoadCursor(ctx, p.db, p.stream)
	if err != nil {
		return PollResult{}, err
	}
	if !ok {
		if err := inbox.InitCursor(ctx, p.db, p.stream, p.o.startAfter, p.o.clock.Now()); err != nil {
			return PollResult{}, err
		}
		if cur, _, err = inbox.LoadCursor(ctx, p.db, p.stream); err != nil {
			return PollResult{}, err
		}
	}
	now := p.o.clock.Now()
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
			return PollResult{Watermark: cur.Watermark, GapFrom: cur.GapFrom}, err
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
		More:     full && next.Watermark > cur.Watermark}
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
			return PollResult{Watermark: cur.Watermark, More: true}, nil
		}
		return PollResult{Watermark: cur.Watermark, GapFrom: cur.GapFrom}, fmt.Errorf("mailbox: enqueue: %w", err)
	}
	return res, nil
}

// Run scans until ctx ends; it implements inbox.Source.
func (p *Poller) Run(ctx context.Context, wake func()) error {
	failures := 0
	for {
		res, err := p.Poll(ctx)
		if ctx.Err() != nil {
			return nil
		}
		wait := p.o.interval
		if err != nil {
			failures++
			p.o.log.Warn("mailbox: poll failed", "stream", p.stream, "err", err, "failures", failures)
		} else {
			failures = 0
			if res.Advanced {
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
		case <-p.nudge:
		case <-t.C():
		}
		t.Stop()
	}
}
