package inbox

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/failpoint"
	"github.com/msgx/msgx/store"
)

// stepResult tells the pump loop what to do after a step.
type stepResult struct {
	// progress: something changed; look again at once.
	progress bool
	// wakeAt: the head waits until then; zero with no progress means idle.
	wakeAt time.Time
}

// unfinished is a PENDING or FAILED row as the pump reads it.
type unfinished struct {
	id        int64
	status    Status
	attempts  int
	nextAt    *time.Time
	startedAt *time.Time
	identity  string
	class     string
	payload   []byte
	// traceparent and tracestate: the ingest's W3C trace context, or "".
	traceparent, tracestate string
}

// work is one message of a batch.
type work struct {
	row      unfinished
	dec      Decoded
	decErr   error
	identity string
	// bound: the identity is already bound to this message (a retry).
	bound bool
	// boundNow: this batch bound the identity to this message.
	boundNow bool
}

// settled is a status change made in the current transaction.
type settled struct {
	id     int64
	status Status
	class  Class
}

// takenError: the identity is bound to another message.
type takenError struct{ owner int64 }

func (t *takenError) Error() string { return "identity taken by " + strconv.FormatInt(t.owner, 10) }

const maxReason = 2000

// fullScanEvery bounds how long the pump reads the head from its low mark
// before it looks from the start again, which finds messages replayed by
// another process.
const fullScanEvery = 10 * time.Second

// committing is a pump transaction that has processed every message of its
// batch well and is sending its held-back writes and statuses and
// committing, which then succeed or fail as a whole. Meanwhile the next step
// reads ahead: it reads, decodes and binds the messages that follow and lets
// the processor prepare them, and processes them only once it knows the
// outcome. What is left of a batch at that point is the database's work,
// and the next batch's first round trips and decoding fill that time
// instead of following it.
type committing struct {
	attempted []unfinished
	// done is closed once the commit returned, and, when it succeeded, the
	// batch's afterCommit ran; err is its error then.
	done chan struct{}
	err  error
}

// next is the first message id after the batch.
func (c *committing) next() int64 { return c.attempted[len(c.attempted)-1].id + 1 }

// errPrevFailed: the transaction before this step's failed after it handed
// over (its held-back writes or its commit); this one, which read ahead of
// it, is rolled back.
var errPrevFailed = errors.New("inbox: the previous pump transaction failed")

// step runs one pump transaction: it looks at the head and either waits,
// declares it EXHAUSTED, or processes the ready messages from it on.
//
// With readAhead, a transaction whose messages all went well hands itself
// back as committing before its writes are sent, and the caller starts the
// next step at once with it as prev (PostgreSQL only: SQLite has one
// writer). prev is the previous step's committing transaction or nil; the
// step waits for its outcome before it touches the head, and handles its
// failure when it failed.
func (e *Engine) step(ctx context.Context, prev *committing, readAhead bool) (stepResult, *committing, error) {
	handoff := make(chan *committing, 1)
	type ended struct {
		res stepResult
		err error
	}
	end := make(chan ended, 1)
	go func() {
		res, err := e.stepTx(ctx, prev, readAhead, handoff)
		end <- ended{res, err}
	}()
	select {
	case c := <-handoff:
		return stepResult{progress: true}, c, nil
	case r := <-end:
		return r.res, nil, r.err
	}
}

// stepTx is the transaction of a step; see step.
func (e *Engine) stepTx(ctx context.Context, prev *committing, readAhead bool, handoff chan<- *committing) (stepResult, error) {
	now := e.clk.Now()
	limit := e.o.groupSize
	if e.isolate > 0 {
		limit = 1
	}
	var (
		res       stepResult
		changes   []settled
		attempted []unfinished
		cur       *committing
		awaited   bool
	)
	// await waits for the previous transaction's outcome (once) and
	// reports it, every time it is asked.
	await := func() error {
		if prev == nil {
			return nil
		}
		if !awaited {
			awaited = true
			<-prev.done
		}
		if prev.err != nil {
			return errPrevFailed
		}
		return nil
	}
	err := e.db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		if err := e.lease.fence(ctx, tx, now); err != nil {
			return err
		}
		from := e.lowMark
		if prev != nil {
			// Everything before prev's next is finished or being committed.
			from = prev.next()
		} else if e.rescan.Swap(false) || !now.Before(e.fullScanAt) {
			e.lowMark, e.fullScanAt, from = 0, now.Add(fullScanEvery), 0
		}
		rows, err := e.loadUnfinished(ctx, tx, limit, from)
		if err != nil {
			return err
		}
		var pre *batch
		if prev != nil && allPending(rows) {
			// Read ahead: decode and bind while prev commits. A
			// binding of an identity prev bound too waits for its
			// commit, and finds it taken.
			if pre, err = e.prepare(ctx, tx, rows, now); err != nil {
				return err
			}
		}
		if err := await(); err != nil {
			return err
		}
		if len(rows) == 0 {
			e.setHead(0, now)
			return nil
		}
		head := rows[0]
		e.setHead(head.id, now)
		e.lowMark = head.id // everything below the head is finished
		e.m.headBlocked.Set(0)
		if head.status == Failed && head.startedAt != nil {
			e.m.headBlocked.Set(now.Sub(*head.startedAt).Seconds())
		}
		if head.status == Failed {
			if why, dead := e.exhausted(head, now); dead {
				res.progress = true
				ch, err := e.settleExhausted(ctx, tx, head, why, now)
				changes = append(changes, ch)
				return err
			}
			if head.nextAt != nil && now.Before(*head.nextAt) {
				res.wakeAt = *head.nextAt
				if head.startedAt != nil {
					if dl := head.startedAt.Add(e.o.headDeadline); dl.Before(res.wakeAt) {
						res.wakeAt = dl
					}
				}
				return nil
			}
		}
		attempted = e.readyPrefix(rows, now)
		res.progress = true
		if pre == nil {
			if pre, err = e.prepare(ctx, tx, attempted, now); err != nil {
				return err
			}
		} // else every row is pending, so ready: pre is the attempted batch
		allDone := func(done []settled) {
			if readAhead && e.mayReadAhead(done, now) {
				cur = &committing{attempted: attempted, done: make(chan struct{})}
				handoff <- cur
			}
		}
		changes, err = e.processBatch(ctx, tx, pre, now, allDone)
		return err
	})
	if cur != nil {
		// The next step goes on from this one's batch; it waits for this.
		if err == nil {
			e.afterCommit(changes)
		}
		cur.err = err
		close(cur.done)
		return res, nil
	}
	if err == nil {
		if e.isolate > 0 && len(attempted) > 0 {
			e.isolate--
		}
		e.afterCommit(changes)
		return res, nil
	}
	// This step's transaction is over; what became of prev's?
	if errors.Is(err, errPrevFailed) || await() != nil {
		// Nothing of this step is kept; prev's failure is handled as if
		// prev had been alone.
		prevRes, ferr := e.failedTx(ctx, prev.attempted, prev.err)
		if ferr != nil {
			return stepResult{}, ferr
		}
		if !errors.Is(err, errPrevFailed) {
			return stepResult{}, err
		}
		return prevRes, nil
	}
	return e.failedTx(ctx, attempted, err)
}

// failedTx handles a pump transaction that failed as a whole after it
// attempted messages (at commit, or the connection broke): nothing of it is
// kept.
func (e *Engine) failedTx(ctx context.Context, attempted []unfinished, err error) (stepResult, error) {
	if ctx.Err() != nil {
		return stepResult{}, ctx.Err()
	}
	if errors.Is(err, ErrLeaseLost) || len(attempted) == 0 {
		return stepResult{}, err
	}
	e.m.batchFailures.Inc()
	if len(attempted) > 1 {
		e.isolate = len(attempted)
		e.log.Warn("inbox: group transaction failed; retrying its messages one per transaction",
			"from", attempted[0].id, "count", len(attempted), "err", err)
		return stepResult{progress: true}, nil
	}
	// Alone in its transaction, the message is the one that fails: record it.
	ch, rerr := e.recordTxFailure(ctx, attempted[0], err)
	if rerr != nil {
		return stepResult{}, errors.Join(err, rerr)
	}
	e.afterCommit([]settled{ch})
	return stepResult{progress: true}, nil
}

// mayReadAhead reports whether the next step may read ahead while this
// one's transaction commits: every message of the batch finished well, no
// messages are being retried one by one, and the next step is not due to
// look from the start (it reads ahead only after this batch).
func (e *Engine) mayReadAhead(changes []settled, now time.Time) bool {
	if e.db.Dialect() != store.Postgres || e.isolate > 0 || len(changes) == 0 {
		return false
	}
	if e.rescan.Load() || !now.Before(e.fullScanAt) {
		return false
	}
	for _, ch := range changes {
		if ch.status != Succeeded && ch.status != Skipped {
			return false
		}
	}
	return true
}

// allPending reports whether rows is non-empty and none of it was tried.
func allPending(rows []unfinished) bool {
	for _, u := range rows {
		if u.status != Pending {
			return false
		}
	}
	return len(rows) > 0
}

func (e *Engine) loadUnfinished(ctx context.Context, tx store.Tx, limit int, from int64) ([]unfinished, error) {
	rows, err := tx.Query(ctx, e.q.Get("Unfinished"), e.stream, limit, from, e.noCursorBound)
	if err != nil {
		return nil, fmt.Errorf("inbox: read head: %w", err)
	}
	defer rows.Close()
	var out []unfinished
	for rows.Next() {
		var u unfinished
		var status string
		if err := rows.Scan(&u.id, &status, &u.attempts, &u.nextAt, &u.startedAt, &u.identity, &u.class, &u.payload, &u.traceparent, &u.tracestate); err != nil {
			return nil, fmt.Errorf("inbox: read head: %w", err)
		}
		u.status = Status(status)
		out = append(out, u)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("inbox: read head: %w", err)
	}
	return out, nil
}

// exhausted reports whether a FAILED head has used its attempts or held the
// head past its deadline.
func (e *Engine) exhausted(u unfinished, now time.Time) (string, bool) {
	if u.attempts >= e.o.maxAttempts {
		return fmt.Sprintf("exhausted after %d attempts (last: %s)", u.attempts, u.class), true
	}
	if u.startedAt != nil && !now.Before(u.startedAt.Add(e.o.headDeadline)) {
		return fmt.Sprintf("held the head longer than %s (last: %s)", e.o.headDeadline, u.class), true
	}
	return "", false
}

// readyPrefix returns the consecutive messages from the head that may run now.
func (e *Engine) readyPrefix(rows []unfinished, now time.Time) []unfinished {
	for i, u := range rows {
		if u.status == Pending {
			continue
		}
		if _, dead := e.exhausted(u, now); dead || (u.nextAt != nil && now.Before(*u.nextAt)) {
			return rows[:i]
		}
	}
	return rows
}

// success is a message processed in the batch; its status is written
// together with the others' at the end of the batch, in one statement, before
// the commit.
type success struct {
	id       int64
	status   Status
	reason   string
	identity string
	kind     string
}

// failure is a classified failed attempt.
type failure struct {
	class Class
	cause error
}

// batch is the work of one pump transaction, decoded and bound.
type batch struct {
	ws []*work
	// owners: the owner of every identity of the batch.
	owners map[string]int64
}

// prepare decodes rows and binds their new identities (bindFirst).
func (e *Engine) prepare(ctx context.Context, tx store.Tx, rows []unfinished, now time.Time) (*batch, error) {
	ws := make([]*work, len(rows))
	for i, u := range rows {
		w := &work{row: u, identity: u.identity, bound: u.identity != ""}
		if len(u.payload) == 0 {
			w.decErr = Failf(Malformed, "empty payload")
		} else {
			w.dec, w.decErr = e.decode(u.payload)
		}
		if !w.bound && w.decErr == nil {
			w.identity = w.dec.Identity
		}
		ws[i] = w
	}
	owners, err := e.bindFirst(ctx, tx, ws, now)
	if err != nil {
		return nil, err
	}
	e.prepareProcessor(ctx, tx, ws)
	return &batch{ws: ws, owners: owners}, nil
}

// prepareProcessor lets a Preparer read ahead for the decoded messages of a
// batch. It is an optimisation: a failure is logged, its savepoint rolled
// back, and each message reads what it needs when it is processed.
func (e *Engine) prepareProcessor(ctx context.Context, tx store.Tx, ws []*work) {
	p, ok := e.proc.(Preparer)
	if !ok {
		return
	}
	vals := make([]any, 0, len(ws))
	for _, w := range ws {
		if w.decErr == nil {
			vals = append(vals, w.dec.Value)
		}
	}
	if len(vals) == 0 {
		return
	}
	err := tx.Savepoint(ctx, func(ctx context.Context) (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
			}
		}()
		return p.Prepare(ctx, tx, vals)
	})
	if err != nil && ctx.Err() == nil {
		e.m.prepareFailures.Inc()
		e.log.Warn("inbox: the processor's read-ahead failed; its messages read for themselves", "from", ws[0].row.id, "err", err)
	}
}

// processBatch processes a prepared and bound batch in order, each message
// in its own savepoint, and stops after the first that fails.
//
// With more than one message, the processor's ExecBatch writes are held back
// (store.Defer) and reach the database in one pipeline with the statuses at
// the end: a batch of writers costs one round trip, not one per message. A
// held-back write that fails aborts the whole transaction; the pump then runs
// the batch's messages one per transaction, where each failure is its own.
//
// allDone is called when every message of the batch was processed well,
// before the statuses and the held-back writes are sent.
func (e *Engine) processBatch(ctx context.Context, tx store.Tx, b *batch, now time.Time, allDone func([]settled)) ([]settled, error) {
	ws, owners := b.ws, b.owners
	var err error
	var out []settled
	run := func(ctx context.Context) error {
		var done []success
		for i, w := range ws {
			if i == len(ws)/2 && i > 0 {
				e.o.failpoints.Hit(failpoint.InboxMidBatch)
			}
			ok, fail, err := e.processOne(ctx, tx, w, owners, now)
			if err != nil {
				return err
			}
			if ok != nil {
				done = append(done, *ok)
				out = append(out, settled{id: ok.id, status: ok.status})
				continue
			}
			// The batch ends at its first failure.
			if err := e.flush(ctx, tx, done, now); err != nil {
				return err
			}
			ch, err := e.recordFailure(ctx, tx, w, fail.class, fail.cause, now)
			if err != nil {
				return err
			}
			out = append(out, ch)
			return e.release(ctx, tx, ws[i+1:])
		}
		allDone(out)
		return e.flush(ctx, tx, done, now)
	}
	if len(ws) > 1 {
		err = store.Defer(ctx, tx, run)
	} else {
		err = run(ctx)
	}
	return out, err
}

// bindFirst binds each new identity of the batch to the first message (in
// id order) that decoded it, unless it is bound already, and returns the
// owner of every identity. Binding before processing is what processing would
// do: a message binds its identity whether it succeeds or fails, and no later
// message can own it first. Only this stream's pump binds identities, under
// the lease held by this transaction.
func (e *Engine) bindFirst(ctx context.Context, tx store.Tx, ws []*work, now time.Time) (map[string]int64, error) {
	owners := map[string]int64{}
	var (
		idents []string
		ids    []int64
	)
	for _, w := range ws {
		if !w.bound && w.identity != "" {
			idents = append(idents, w.identity)
			ids = append(ids, w.row.id)
		}
	}
	if len(idents) == 0 {
		return owners, nil
	}
	if tx.Dialect() == store.Postgres {
		if err := e.scanOwners(ctx, tx, owners, e.q.Get("BindFirst"), e.stream, idents, ids, now); err != nil {
			return nil, fmt.Errorf("inbox: bind identities: %w", err)
		}
		// Identities bound before (a duplicate, a retry) are looked up
		// apart: the common batch binds all of its identities anew.
		var old []string
		for _, ident := range idents {
			if _, ok := owners[ident]; !ok {
				old = append(old, ident)
			}
		}
		if len(old) > 0 {
			if err := e.scanOwners(ctx, tx, owners, e.q.Get("Owners"), e.stream, old); err != nil {
				return nil, fmt.Errorf("inbox: read identities: %w", err)
			}
		}
	} else {
		// In process (SQLite), a statement per identity costs no round trip.
		for i, ident := range idents {
			if _, ok := owners[ident]; ok {
				continue
			}
			n, err := tx.Exec(ctx, e.q.Get("Bind"), e.stream, ident, ids[i], now)
			if err != nil {
				return nil, fmt.Errorf("inbox: bind identity of %d: %w", ids[i], err)
			}
			owner := ids[i]
			if n == 0 {
				if err := tx.QueryRow(ctx, e.q.Get("Owner"), e.stream, ident).Scan(&owner); err != nil {
					return nil, fmt.Errorf("inbox: read identity owner: %w", err)
				}
			}
			owners[ident] = owner
		}
	}
	for _, w := range ws {
		if !w.bound && w.identity != "" {
			w.bound = owners[w.identity] == w.row.id
			w.boundNow = w.bound
		}
	}
	return owners, nil
}

// release unbinds the identities this batch bound for messages it did not
// reach (it ended early at a failure): an earlier message that failed to
// decode may read the same identity once its codec is fixed, and must own it
// rather than be a duplicate of a message that never ran.
func (e *Engine) release(ctx context.Context, tx store.Tx, unreached []*work) error {
	var (
		idents []string
		ids    []int64
	)
	for _, w := range unreached {
		if w.boundNow {
			idents = append(idents, w.identity)
			ids = append(ids, w.row.id)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	if tx.Dialect() == store.Postgres {
		if _, err := tx.Exec(ctx, e.q.Get("Release"), e.stream, idents, ids); err != nil {
			return fmt.Errorf("inbox: release identities: %w", err)
		}
		return nil
	}
	for i := range ids {
		if _, err := tx.Exec(ctx, e.q.Get("Release"), e.stream, idents[i], ids[i]); err != nil {
			return fmt.Errorf("inbox: release identity of %d: %w", ids[i], err)
		}
	}
	return nil
}

// scanOwners adds the (identity, owner) rows of a query to owners.
func (e *Engine) scanOwners(ctx context.Context, tx store.Tx, owners map[string]int64, q string, args ...any) error {
	rows, err := tx.Query(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var owner int64
		if err := rows.Scan(&id, &owner); err != nil {
			return err
		}
		owners[id] = owner
	}
	return rows.Err()
}

// processOne runs one message: a duplicate is skipped, anything else goes
// through the processor inside a savepoint, so that a failure undoes only
// this message's writes.
func (e *Engine) processOne(ctx context.Context, tx store.Tx, w *work, owners map[string]int64, now time.Time) (*success, *failure, error) {
	u := w.row
	if w.decErr != nil {
		return nil, &failure{class: decodeClass(w.decErr), cause: w.decErr}, nil
	}
	if !w.bound && w.identity != "" {
		if owner, ok := owners[w.identity]; ok && owner != u.id {
			return &success{id: u.id, status: Skipped, reason: duplicateOf(owner), identity: w.identity, kind: w.dec.Kind}, nil, nil
		}
	}
	msg := &Message{
		Stream: e.stream, ID: u.id, Payload: u.payload, Attempt: u.attempts + 1,
		Identity: w.identity, Kind: w.dec.Kind, Decoded: w.dec.Value, Now: now,
		TraceParent: u.traceparent, TraceState: u.tracestate,
	}
	var out Outcome
	err := tx.Savepoint(ctx, func(ctx context.Context) error {
		actx, cancel := e.attemptContext(ctx)
		defer cancel()
		var err error
		out, err = e.process(actx, tx, msg)
		if errors.Is(context.Cause(actx), errAttemptTimeout) && ctx.Err() == nil {
			// Whatever the processor made of its ended context, the
			// attempt failed for taking too long.
			return Failf(Infra, "%w (%s); processor said: %v", errAttemptTimeout, e.o.attemptLimit, err)
		}
		if err != nil {
			return err
		}
		if out.Status == "" {
			out.Status = Succeeded
		}
		if out.Status != Succeeded && out.Status != Skipped {
			return Failf(Infra, "processor returned status %q", out.Status)
		}
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			// Interrupted: nothing is recorded; the transaction rolls back.
			return nil, nil, ctx.Err()
		}
		if errors.Is(err, store.ErrDeferredFailed) {
			// A held-back write failed, maybe another message's: the
			// transaction is lost as a whole.
			return nil, nil, err
		}
		return nil, &failure{class: ClassOf(err), cause: err}, nil
	}
	return &success{id: u.id, status: out.Status, reason: out.Reason, identity: w.identity, kind: w.dec.Kind}, nil, nil
}

// flush writes the statuses of the successful messages.
func (e *Engine) flush(ctx context.Context, tx store.Tx, done []success, now time.Time) error {
	if len(done) == 0 {
		return nil
	}
	if tx.Dialect() != store.Postgres {
		// In process (SQLite), a statement per message costs no round trip.
		for _, s := range done {
			if err := e.settle(ctx, tx, s.id, s.status, "", s.reason, s.identity, s.kind, 1, nil, now, &now); err != nil {
				return err
			}
		}
		return nil
	}
	var (
		ids                          = make([]int64, len(done))
		statuses, reasons, idents, k = make([]string, len(done)), make([]string, len(done)), make([]string, len(done)), make([]string, len(done))
	)
	for i, s := range done {
		ids[i], statuses[i], reasons[i], idents[i], k[i] = s.id, string(s.status), s.reason, s.identity, s.kind
	}
	// The marks are held back (under Defer) and travel in the statuses'
	// pipeline.
	if err := e.mark(ctx, tx, ids, now); err != nil {
		return err
	}
	n, err := tx.Exec(ctx, e.q.Get("SettleMany"), e.stream, ids, statuses, reasons, idents, k, now, e.backfillIntent(now), e.markedAt(now))
	if err != nil {
		return fmt.Errorf("inbox: settle %d messages: %w", len(ids), err)
	}
	if int(n) != len(ids) {
		return fmt.Errorf("inbox: settled %d of %d messages", n, len(ids))
	}
	return nil
}

func duplicateOf(owner int64) string { return "duplicate-of:" + strconv.FormatInt(owner, 10) }

// decode runs the processor's decoder; a panic is a codec failure.
func (e *Engine) decode(p []byte) (d Decoded, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = Failf(CodecError, "decoder panic: %v", r)
		}
	}()
	return e.proc.Decode(p)
}

func decodeClass(err error) Class {
	var f *Failure
	if errors.As(err, &f) && f.Class != "" {
		return f.Class
	}
	return CodecError
}

// errAttemptTimeout ends the context of an attempt that ran past the
// attempt timeout.
var errAttemptTimeout = errors.New("processing attempt timed out")

// attemptContext bounds one processing attempt on the engine's clock.
func (e *Engine) attemptContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if clock.Paced(e.clk) {
		return context.WithTimeoutCause(ctx, e.o.attemptLimit, errAttemptTimeout)
	}
	actx, cancel := context.WithCancelCause(ctx)
	t := e.clk.NewTimer(e.o.attemptLimit)
	go func() {
		select {
		case <-t.C():
			cancel(errAttemptTimeout)
		case <-actx.Done():
			t.Stop()
		}
	}()
	return actx, func() { cancel(context.Canceled) }
}

// setHead records the current head (0: none) for the head-age gauge.
func (e *Engine) setHead(id int64, now time.Time) {
	if id == 0 {
		e.headID.Store(0)
		e.headSince.Store(0)
		return
	}
	if e.headID.Swap(id) != id {
		e.headSince.Store(now.UnixNano())
	}
}

// headAge is how long the current head has been the head, in seconds.
func (e *Engine) headAge() float64 {
	since := e.headSince.Load()
	if since == 0 || e.headID.Load() == 0 {
		return 0
	}
	return e.clk.Now().Sub(time.Unix(0, since)).Seconds()
}

// process runs the processor; a panic is an INFRA failure of the message.
func (e *Engine) process(ctx context.Context, tx store.Tx, msg *Message) (out Outcome, err error) {
	defer func() {
		if r := recover(); r != nil {
			e.log.Error("inbox: processor panic", "msg_id", msg.ID, "panic", r, "stack", string(debug.Stack()))
			err = Failf(Infra, "processor panic: %v", r)
		}
	}()
	return e.proc.Process(ctx, tx, msg)
}

// bind binds the message's identity to it unless it already is; takenError
// when another message owns it.
func (e *Engine) bind(ctx context.Context, tx store.Tx, w *work, now time.Time) error {
	if w.bound || w.identity == "" {
		return nil
	}
	n, err := tx.Exec(ctx, e.q.Get("Bind"), e.stream, w.identity, w.row.id, now)
	if err != nil {
		return fmt.Errorf("inbox: bind identity of %d: %w", w.row.id, err)
	}
	if n == 0 {
		var owner int64
		if err := tx.QueryRow(ctx, e.q.Get("Owner"), e.stream, w.identity).Scan(&owner); err != nil {
			return fmt.Errorf("inbox: read identity owner: %w", err)
		}
		if owner != w.row.id {
			return &takenError{owner: owner}
		}
	}
	return nil
}

// recordFailure records a failed attempt where the message is held: FAILED
// with backoff for retryable classes, DEAD otherwise. The identity is bound
// even so, so a retry does not find itself a duplicate: in a batch bindFirst
// bound it; after a lost transaction it is bound here.
func (e *Engine) recordFailure(ctx context.Context, tx store.Tx, w *work, class Class, cause error, now time.Time) (settled, error) {
	u := w.row
	if !w.bound && w.identity != "" {
		err := e.bind(ctx, tx, w, now)
		var taken *takenError
		if errors.As(err, &taken) {
			return e.settleDuplicate(ctx, tx, w, taken.owner, now)
		}
		if err != nil {
			return settled{}, err
		}
	}
	attempt := u.attempts + 1
	reason := truncate(cause.Error())
	status := Failed
	var next, finished *time.Time
	if class.Retryable() {
		t := now.Add(e.o.backoff.Delay(attempt))
		next = &t
	} else {
		status = Dead
		finished = &now
	}
	if err := e.settle(ctx, tx, u.id, status, class, reason, w.identity, w.dec.Kind, 1, next, now, finished); err != nil {
		return settled{}, err
	}
	if err := e.logError(ctx, tx, u.id, attempt, class, reason, now); err != nil {
		return settled{}, err
	}
	e.log.Warn("inbox: message failed", "msg_id", u.id, "class", class, "attempt", attempt, "status", status,
		"next_attempt_at", next, "err", reason)
	return settled{id: u.id, status: status, class: class}, nil
}

// recordTxFailure records an INFRA failure of a message whose whole
// transaction failed, in a new transaction.
func (e *Engine) recordTxFailure(ctx context.Context, u unfinished, cause error) (settled, error) {
	now := e.clk.Now()
	var ch settled
	err := e.db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		if err := e.lease.fence(ctx, tx, now); err != nil {
			return err
		}
		w := &work{row: u, identity: u.identity, bound: u.identity != ""}
		var err error
		ch, err = e.recordFailure(ctx, tx, w, Infra, fmt.Errorf("transaction failed: %w", cause), now)
		return err
	})
	return ch, err
}

func (e *Engine) settleDuplicate(ctx context.Context, tx store.Tx, w *work, owner int64, now time.Time) (settled, error) {
	if err := e.settle(ctx, tx, w.row.id, Skipped, "", duplicateOf(owner), w.identity, w.dec.Kind, 1, nil, now, &now); err != nil {
		return settled{}, err
	}
	return settled{id: w.row.id, status: Skipped}, nil
}

func (e *Engine) settleExhausted(ctx context.Context, tx store.Tx, u unfinished, why string, now time.Time) (settled, error) {
	if err := e.settle(ctx, tx, u.id, Dead, Exhausted, why, "", "", 0, nil, now, &now); err != nil {
		return settled{}, err
	}
	if err := e.logError(ctx, tx, u.id, u.attempts, Exhausted, why, now); err != nil {
		return settled{}, err
	}
	e.log.Warn("inbox: message dead", "msg_id", u.id, "class", Exhausted, "attempts", u.attempts, "reason", why)
	return settled{id: u.id, status: Dead, class: Exhausted}, nil
}

// settle is the one statement that moves an unfinished message on. A
// terminal one (finished set) gets its backfill intent, or, when the mailbox
// is in the store, its processed mark in the same transaction.
func (e *Engine) settle(ctx context.Context, tx store.Tx, id int64, status Status, class Class, reason, identity, kind string,
	attempts int, next *time.Time, started time.Time, finished *time.Time) error {
	var backfill, marked *time.Time
	if finished != nil {
		backfill, marked = e.backfillIntent(*finished), e.markedAt(*finished)
	}
	n, err := tx.Exec(ctx, e.q.Get("Settle"), e.stream, id, string(status), nullable(string(class)), nullable(reason),
		nullable(identity), nullable(kind), attempts, next, started, finished, backfill, marked)
	if err != nil {
		return fmt.Errorf("inbox: settle %d as %s: %w", id, status, err)
	}
	if n != 1 {
		return fmt.Errorf("inbox: settle %d as %s: message is not unfinished", id, status)
	}
	if finished != nil {
		return e.mark(ctx, tx, []int64{id}, *finished)
	}
	return nil
}

func (e *Engine) logError(ctx context.Context, tx store.Tx, id int64, attempt int, class Class, reason string, now time.Time) error {
	if _, err := tx.Exec(ctx, e.q.Get("LogError"), e.stream, id, attempt, string(class), reason, now); err != nil {
		return fmt.Errorf("inbox: record error of %d: %w", id, err)
	}
	return nil
}

// writesBack reports whether the processed marks are written back at all.
func (e *Engine) writesBack() bool { return e.o.backfiller != nil && !e.o.shadow }

// backfillIntent is the due time registered with a terminal status, or nil
// when nothing is left to write back after the commit.
func (e *Engine) backfillIntent(now time.Time) *time.Time {
	if !e.writesBack() || e.txMark != nil {
		return nil
	}
	return &now
}

// markedAt is the backfill time recorded with a terminal status whose mark is
// written in the same transaction, or nil.
func (e *Engine) markedAt(now time.Time) *time.Time {
	if !e.writesBack() || e.txMark == nil {
		return nil
	}
	return &now
}

// mark writes the processed mark of terminal messages in the pump
// transaction when the mailbox lives in the store. A failure fails the
// transaction, as any of its writes: the marks commit with the statuses.
func (e *Engine) mark(ctx context.Context, tx store.Tx, ids []int64, now time.Time) error {
	if e.markedAt(now) == nil || len(ids) == 0 {
		return nil
	}
	if err := e.txMark.BackfillTx(ctx, tx, ids, now); err != nil {
		return fmt.Errorf("inbox: write the processed mark of %d messages: %w", len(ids), err)
	}
	return nil
}

// afterCommit runs once the pump transaction committed.
func (e *Engine) afterCommit(changes []settled) {
	if len(changes) == 0 {
		return
	}
	c := Committed{Stream: e.stream}
	for _, ch := range changes {
		e.m.settled(ch)
		if ch.status.Terminal() {
			c.IDs = append(c.IDs, ch.id)
		}
		if ch.status == Failed || ch.status == Dead {
			c.Failed = ch.id
		}
	}
	e.m.batch.Observe(float64(len(changes)))
	if len(c.IDs) > 0 && e.writesBack() {
		// Committed: a crash here leaves the marks to the sweep, unless
		// they were written in the transaction.
		e.o.failpoints.Hit(failpoint.InboxAfterCommit)
		if e.txMark != nil {
			e.m.backfilled.Add(float64(len(c.IDs)))
		} else {
			// Try once right away, off the pump goroutine; if the
			// maintenance goroutine is busy the sweep finds the durable
			// intent later.
			select {
			case e.backfillCh <- c.IDs:
			default:
			}
		}
	}
	if e.o.onCommit != nil {
		e.o.onCommit(c)
	}
}

// truncate bounds a reason and keeps it valid text for every database.
func truncate(s string) string {
	if len(s) > maxReason {
		s = s[:maxReason]
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "?"), "\x00", "?")
}
