package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/msgx/msgx/store"
)

// maintenance job bookkeeping.
type scheduled struct {
	Job
	next time.Time
}

// maintain runs the backfill (once after each commit, and the sweep), the
// archive and the added jobs on one goroutine of its own, so they never hold
// up the pump; each run is one bounded batch.
func (e *Engine) maintain(ctx context.Context) {
	var jobs []*scheduled
	now := e.clk.Now()
	if e.writesBack() {
		// Where the marks are written in the pump transaction, the sweep
		// still finds intents registered before (by an earlier version).
		jobs = append(jobs, &scheduled{Job: Job{Name: "backfill-sweep", Every: e.o.backfillEvery, Run: e.SweepBackfill}, next: now})
	}
	if e.o.archiveAfter > 0 {
		jobs = append(jobs, &scheduled{Job: Job{Name: "archive", Every: e.o.archiveEvery, Run: e.Archive}, next: now})
	}
	for _, j := range e.o.jobs {
		jobs = append(jobs, &scheduled{Job: j, next: now})
	}
	for {
		var due *scheduled
		for _, j := range jobs {
			if due == nil || j.next.Before(due.next) {
				due = j
			}
		}
		var timer <-chan time.Time
		stop := func() {}
		if due != nil {
			d := due.next.Sub(e.clk.Now())
			if d < 0 {
				d = 0
			}
			t := e.clk.NewTimer(d)
			timer, stop = t.C(), func() { t.Stop() }
		}
		select {
		case <-ctx.Done():
			stop()
			return
		case ids := <-e.backfillCh:
			stop()
			// Commits that queued up meanwhile are written together: one
			// mailbox transaction instead of one per pump transaction.
		drain:
			for len(ids) < e.o.backfillBatch {
				select {
				case more := <-e.backfillCh:
					ids = append(ids, more...)
				default:
					break drain
				}
			}
			e.runBounded(ctx, "backfill", func(ctx context.Context) (bool, error) {
				return false, e.backfillIDs(ctx, ids)
			})
		case <-timer:
			more := e.runBounded(ctx, due.Name, due.Run)
			if more {
				due.next = e.clk.Now()
			} else {
				due.next = e.clk.Now().Add(due.Every)
			}
		}
	}
}

// runBounded runs one job batch under the job timeout and logs its failure.
func (e *Engine) runBounded(ctx context.Context, name string, run func(context.Context) (bool, error)) bool {
	jctx, cancel := context.WithTimeout(ctx, e.o.jobTimeout)
	defer cancel()
	more, err := run(jctx)
	if err != nil && ctx.Err() == nil {
		e.log.Warn("inbox: maintenance job failed", "job", name, "err", err)
		return false
	}
	return more
}

// SweepBackfill writes the processed mark of one batch of terminal messages
// whose backfill is due (or overdue); it reports whether more may be due.
func (e *Engine) SweepBackfill(ctx context.Context) (bool, error) {
	now := e.clk.Now()
	if !e.writesBack() {
		return false, nil
	}
	rows, err := e.db.Query(ctx, e.q.Get("BackfillDue"), e.stream, now, now.Add(-e.o.overdue), e.o.backfillBatch)
	if err != nil {
		return false, fmt.Errorf("inbox: read due backfills: %w", err)
	}
	var ids []int64
	attempts := map[int64]int{}
	for rows.Next() {
		var id int64
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			rows.Close()
			return false, fmt.Errorf("inbox: read due backfills: %w", err)
		}
		ids = append(ids, id)
		attempts[id] = n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return false, fmt.Errorf("inbox: read due backfills: %w", err)
	}
	if len(ids) == 0 {
		return false, nil
	}
	return len(ids) == e.o.backfillBatch, e.backfill(ctx, ids, attempts, now)
}

// backfillIDs is the one try right after a commit.
func (e *Engine) backfillIDs(ctx context.Context, ids []int64) error {
	return e.backfill(ctx, ids, nil, e.clk.Now())
}

// backfill writes the mark of ids and records the result on their rows.
func (e *Engine) backfill(ctx context.Context, ids []int64, attempts map[int64]int, now time.Time) error {
	werr := e.o.backfiller.Backfill(ctx, ids, now)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if werr == nil {
		if _, err := e.db.Exec(ctx, e.q.Get("BackfillDone"), e.stream, listArg(e.db.Dialect(), ids), now); err != nil {
			return fmt.Errorf("inbox: record backfill: %w", err)
		}
		e.m.backfilled.Add(float64(len(ids)))
		return nil
	}
	e.m.backfillFailures.Inc()
	reason := truncate(werr.Error())
	err := e.db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		for _, id := range ids {
			next := now.Add(e.o.backfillBackoff.Delay(attempts[id] + 1))
			if _, err := tx.Exec(ctx, e.q.Get("BackfillFailed"), e.stream, id, next, reason); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return errors.Join(fmt.Errorf("inbox: backfill: %w", werr), fmt.Errorf("inbox: record backfill failure: %w", err))
	}
	return fmt.Errorf("inbox: backfill of %d messages: %w", len(ids), werr)
}

// Archive moves one batch of old terminal messages to the archive table; it
// reports whether more may be waiting.
func (e *Engine) Archive(ctx context.Context) (bool, error) {
	if e.o.archiveAfter <= 0 {
		return false, nil
	}
	now := e.clk.Now()
	var n int
	err := e.db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		rows, err := tx.Query(ctx, e.q.Get("ArchiveCandidates"), e.stream, now.Add(-e.o.archiveAfter), e.o.archiveBatch)
		if err != nil {
			return err
		}
		var ids []int64
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return err
			}
			ids = append(ids, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil || len(ids) == 0 {
			return err
		}
		list := listArg(tx.Dialect(), ids)
		if _, err := tx.Exec(ctx, e.q.Get("ArchiveCopy"), e.stream, list, now); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, e.q.Get("ArchiveDelete"), e.stream, list); err != nil {
			return err
		}
		n = len(ids)
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("inbox: archive: %w", err)
	}
	if n > 0 {
		e.log.Info("inbox: archived terminal messages", "count", n)
	}
	return n == e.o.archiveBatch, nil
}
