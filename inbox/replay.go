package inbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/msgx/msgx/store"
)

// ReplayRequest selects FAILED or DEAD messages to run again: every message
// of a replayable Class, or the listed IDs. Actor and Reason go to the audit.
type ReplayRequest struct {
	Class  Class
	IDs    []int64
	Actor  string
	Reason string
	// Limit bounds a replay by class (default 10 000).
	Limit int
}

// ReplayResult lists what was replayed and, for a replay by id, what was
// refused and why.
type ReplayResult struct {
	Replayed []int64
	Refused  map[int64]string
}

// Replay moves the selected FAILED/DEAD messages of stream back to PENDING,
// resetting attempts and times but keeping their identity and error history,
// and records the replay in the audit table — all in one transaction. Only
// CODEC_ERROR, UNSUPPORTED, INFRA, EXHAUSTED and LATE failures are replayable;
// MALFORMED and PROTOCOL are not. A replayed message that is older than the
// head becomes the head again: replay restores processing, not history.
func Replay(ctx context.Context, db *store.DB, stream string, now time.Time, req ReplayRequest) (ReplayResult, error) {
	res := ReplayResult{Refused: map[int64]string{}}
	if req.Actor == "" || req.Reason == "" {
		return res, errors.New("inbox: replay needs an actor and a reason")
	}
	if (req.Class == "") == (len(req.IDs) == 0) {
		return res, errors.New("inbox: replay either a class or a list of ids")
	}
	if req.Class != "" && !req.Class.Replayable() {
		return res, fmt.Errorf("inbox: class %s is not replayable", req.Class)
	}
	if req.Limit <= 0 {
		req.Limit = 10000
	}
	q, err := queriesFor(db.Dialect())
	if err != nil {
		return res, err
	}
	err = db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		res = ReplayResult{Refused: map[int64]string{}}
		selector := "class:" + string(req.Class)
		if req.Class != "" {
			ids, err := queryIDs(ctx, tx, q.Get("ReplayByClass"), stream, string(req.Class), req.Limit)
			if err != nil {
				return err
			}
			res.Replayed = ids
		} else {
			selector = "ids"
			if err := selectReplayable(ctx, tx, q, stream, req.IDs, &res); err != nil {
				return err
			}
		}
		if len(res.Replayed) > 0 {
			n, err := tx.Exec(ctx, q.Get("ReplayReset"), stream, listArg(tx.Dialect(), res.Replayed))
			if err != nil {
				return fmt.Errorf("inbox: replay: %w", err)
			}
			if int(n) != len(res.Replayed) {
				return fmt.Errorf("inbox: replay reset %d of %d messages", n, len(res.Replayed))
			}
		}
		list, _ := json.Marshal(append([]int64{}, res.Replayed...))
		if _, err := tx.Exec(ctx, q.Get("ReplayAudit"), stream, now, req.Actor, req.Reason, selector, string(list), len(res.Replayed)); err != nil {
			return fmt.Errorf("inbox: replay audit: %w", err)
		}
		return nil
	})
	if err != nil {
		return ReplayResult{}, err
	}
	return res, nil
}

func selectReplayable(ctx context.Context, tx store.Tx, q store.Queries, stream string, ids []int64, res *ReplayResult) error {
	rows, err := tx.Query(ctx, q.Get("ReplayByIDs"), stream, listArg(tx.Dialect(), ids))
	if err != nil {
		return fmt.Errorf("inbox: replay: %w", err)
	}
	defer rows.Close()
	found := map[int64]bool{}
	for rows.Next() {
		var id int64
		var status, class string
		if err := rows.Scan(&id, &status, &class); err != nil {
			return fmt.Errorf("inbox: replay: %w", err)
		}
		found[id] = true
		switch {
		case Status(status) != Failed && Status(status) != Dead:
			res.Refused[id] = "status " + status
		case !Class(class).Replayable():
			res.Refused[id] = "class " + class + " is not replayable"
		default:
			res.Replayed = append(res.Replayed, id)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("inbox: replay: %w", err)
	}
	for _, id := range ids {
		if !found[id] {
			res.Refused[id] = "not found"
		}
	}
	return nil
}

func queryIDs(ctx context.Context, q store.Querier, sql string, args ...any) ([]int64, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// Replay replays messages of this engine's stream and wakes the pump.
func (e *Engine) Replay(ctx context.Context, req ReplayRequest) (ReplayResult, error) {
	res, err := Replay(ctx, e.db, e.stream, e.clk.Now(), req)
	if err == nil && len(res.Replayed) > 0 {
		e.rescan.Store(true)
		e.log.Info("inbox: replayed", "actor", req.Actor, "reason", req.Reason, "class", req.Class, "count", len(res.Replayed))
		e.Wake()
	}
	return res, err
}
