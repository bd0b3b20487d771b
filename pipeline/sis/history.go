package sis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/pipeline/sis/sisxml"
	"github.com/msgx/msgx/store"
)

// Defaults of the history sweep.
const (
	DefaultHistoryRetention = 14 * 24 * time.Hour
	DefaultSnapLogRetention = 90 * 24 * time.Hour
	DefaultHistoryBatch     = 500
	DefaultHistoryAt        = "03:30"
)

// HistoryOption configures a History.
type HistoryOption func(*History)

// WithRetention sets how long a flight stays: a flight whose operation day
// ended longer ago, or that nothing changed for longer, moves to history
// (default 14 days).
func WithRetention(d time.Duration) HistoryOption { return func(h *History) { h.retention = d } }

// WithSnapLogRetention sets how long the snapshot log keeps its rows
// (default 90 days).
func WithSnapLogRetention(d time.Duration) HistoryOption {
	return func(h *History) { h.snapRetention = d }
}

// WithHistoryBatch sets the flights moved per transaction (default 500).
func WithHistoryBatch(n int) HistoryOption { return func(h *History) { h.batch = n } }

// WithHistoryAt sets the daily time of the sweep, HH:MM airport time
// (default 03:30).
func WithHistoryAt(hhmm string) HistoryOption { return func(h *History) { h.at = hhmm } }

// WithHistoryClock sets the clock (default the real one).
func WithHistoryClock(c clock.Clock) HistoryOption { return func(h *History) { h.clk = c } }

// WithHistoryLogger sets the logger (default slog.Default()).
func WithHistoryLogger(l *slog.Logger) HistoryOption { return func(h *History) { h.log = l } }

// WithHistoryConfig takes the airport time zone and the schd topic of cfg.
func WithHistoryConfig(cfg Config) HistoryOption {
	return func(h *History) { cfg.defaults(); h.loc, h.schdTopic = cfg.Location, cfg.SchdTopic }
}

// History is the daily sweep of flight state: flights past retention
// (terminal or quiet, DELETED included) are copied to flight_schd_hst, then
// deleted with their detail rows and their versions (flight_version), in batches of their own transactions
// (rows a message transaction holds are skipped until the next round, so
// the sweep never waits on the FIFO pump nor makes it wait long). A flight
// purged without an FDEL gets a schd tombstone in the same transaction.
// The snapshot log (sis_snap_log) loses its rows past its retention.
type History struct {
	db            *store.DB
	q             store.Queries
	retention     time.Duration
	snapRetention time.Duration
	batch         int
	at            string
	hour, minute  int
	clk           clock.Clock
	log           *slog.Logger
	loc           *time.Location
	schdTopic     string
}

// SweepResult says what a sweep did.
type SweepResult struct {
	// Moved is the flights moved to history, Tombstoned those of them that
	// were not deleted (a tombstone was published).
	Moved, Tombstoned int
	// SnapLogPurged is the snapshot-log rows deleted.
	SnapLogPurged int64
}

// NewHistory returns the sweep of db's flight state.
func NewHistory(db *store.DB, opts ...HistoryOption) (*History, error) {
	h := &History{db: db, retention: DefaultHistoryRetention, snapRetention: DefaultSnapLogRetention,
		batch: DefaultHistoryBatch, at: DefaultHistoryAt, clk: clock.Real{}, log: slog.Default(),
		loc: sisxml.DefaultLocation(), schdTopic: DefaultSchdTopic}
	for _, o := range opts {
		o(h)
	}
	t, err := time.Parse("15:04", h.at)
	if err != nil {
		return nil, fmt.Errorf("sis: history time %q: want HH:MM", h.at)
	}
	h.hour, h.minute = t.Hour(), t.Minute()
	if h.retention <= 0 || h.snapRetention <= 0 || h.batch <= 0 {
		return nil, errors.New("sis: history: retention and batch must be positive")
	}
	if h.q, err = queries.For(db.Dialect()); err != nil {
		return nil, err
	}
	return h, nil
}

// Next is the time of the next sweep after now.
func (h *History) Next(now time.Time) time.Time {
	l := now.In(h.loc)
	next := time.Date(l.Year(), l.Month(), l.Day(), h.hour, h.minute, 0, 0, h.loc)
	if !next.After(l) {
		next = time.Date(l.Year(), l.Month(), l.Day()+1, h.hour, h.minute, 0, 0, h.loc)
	}
	return next
}

// Run sweeps every day at the configured time until ctx ends; a failed
// sweep is logged and tried again the next day.
func (h *History) Run(ctx context.Context) error {
	for {
		now := h.clk.Now()
		t := h.clk.NewTimer(h.Next(now).Sub(now))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C():
		}
		res, err := h.Sweep(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			h.log.Error("sis: history sweep failed", "err", err, "moved", res.Moved)
			continue
		}
		h.log.Info("sis: history sweep", "moved", res.Moved, "tombstoned", res.Tombstoned, "snap_log_purged", res.SnapLogPurged)
	}
}

// Sweep runs one sweep now.
func (h *History) Sweep(ctx context.Context) (SweepResult, error) {
	var res SweepResult
	now := h.clk.Now()
	cutoff := now.Add(-h.retention)
	cutoffDay := cutoff.In(h.loc).Format(time.DateOnly)
	for {
		n, tomb, err := h.moveBatch(ctx, now, cutoffDay, cutoff)
		res.Moved += n
		res.Tombstoned += tomb
		if err != nil {
			return res, err
		}
		if n < h.batch {
			break
		}
	}
	for {
		n, err := h.db.Exec(ctx, h.q.Get("PurgeSnapLog"), now.Add(-h.snapRetention), h.batch)
		if err != nil {
			return res, fmt.Errorf("sis: purge snapshot log: %w", err)
		}
		res.SnapLogPurged += n
		if n < int64(h.batch) {
			return res, nil
		}
	}
}

// moveBatch moves one batch of flights in one transaction.
func (h *History) moveBatch(ctx context.Context, now time.Time, cutoffDay string, cutoff time.Time) (moved, tombstoned int, err error) {
	err = h.db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		moved, tombstoned = 0, 0
		rows, err := tx.Query(ctx, h.q.Get("HistoryCandidates"), cutoffDay, cutoff, h.batch)
		if err != nil {
			return err
		}
		var (
			flids []string
			evs   []outbox.Event
		)
		for rows.Next() {
			var flid, status string
			var version int64
			if err := rows.Scan(&flid, &status, &version); err != nil {
				rows.Close()
				return err
			}
			flids = append(flids, flid)
			if status != StatusDeleted {
				evs = append(evs, outbox.Event{ID: "sis-history:" + flid + ":" + strconv.FormatInt(version, 10),
					Target: TargetSchd, Topic: h.schdTopic, Key: flid, Type: outbox.Tombstone})
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if len(flids) == 0 {
			return nil
		}
		list := listArg(tx.Dialect(), flids)
		stmts := []store.Stmt{{SQL: h.q.Get("CopyToHistory"), Args: []any{list, now}}}
		for _, t := range detailTables {
			stmts = append(stmts, store.Stmt{SQL: h.q.Get("PurgeDetails" + t.name), Args: []any{list}})
		}
		stmts = append(stmts, store.Stmt{SQL: h.q.Get("PurgeVersions"), Args: []any{list}},
			store.Stmt{SQL: h.q.Get("DeleteFlights"), Args: []any{list}})
		// The move travels with the tombstones' statements: one round trip.
		if err := store.Hold(ctx, tx, stmts...); err != nil {
			return err
		}
		if err := outbox.Enqueue(ctx, tx, now, evs...); err != nil {
			return err
		}
		moved, tombstoned = len(flids), len(evs)
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("sis: history: %w", err)
	}
	return moved, tombstoned, nil
}
