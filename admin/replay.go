package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
)

// ReplayRequest is the body of POST /v1/replay: the dead letters of one
// source, by class (inbox) or target (outbox), or by ids.
type ReplayRequest struct {
	// Source is inbox or outbox.
	Source string `json:"source"`
	// Stream (inbox) and Class select every replayable FAILED/DEAD message of
	// a class; IDs select messages (inbox) or event ids (outbox).
	Stream string   `json:"stream,omitempty"`
	Class  string   `json:"class,omitempty"`
	Target string   `json:"target,omitempty"`
	IDs    []string `json:"ids,omitempty"`
	// DryRun only shows what would be replayed (and audits the preview).
	DryRun bool   `json:"dry_run"`
	Reason string `json:"reason"`
	// Limit bounds a replay by class or target (default 10 000).
	Limit int `json:"limit,omitempty"`
}

// ReplayResult is the answer: what was (or would be) replayed, and what was
// refused and why.
type ReplayResult struct {
	DryRun   bool              `json:"dry_run"`
	Source   string            `json:"source"`
	Replayed []string          `json:"replayed"`
	Refused  map[string]string `json:"refused"`
	// Covered are DEAD events of a compacted key whose newer state was sent
	// since: recorded as covered by it rather than sent back in time.
	Covered []string `json:"covered,omitempty"`
	// Warnings (a preview's) say what replaying a selected message would do
	// beyond running it again: a LATE message is older than messages that
	// were applied after it was missed, and replaying it applies its change
	// over theirs.
	Warnings map[string]string `json:"warnings,omitempty"`
	// Waiting (outbox, per-key targets) counts, per selected DEAD event, the
	// PENDING events of its key that wait behind it: the replay sends the
	// dead event first, then them, in order.
	Waiting map[string]int64 `json:"waiting,omitempty"`
}

func (s *Server) replay(ctx context.Context, r *http.Request, actor string) (any, error) {
	var req ReplayRequest
	if err := decodeRequest(r, "replay", &req); err != nil {
		return nil, err
	}
	return s.Replay(ctx, actor, req)
}

// decodeRequest reads the JSON body of a write (at most 1 MiB, no unknown
// fields) into v; a body that does not decode is a 400 naming the request.
func decodeRequest(r *http.Request, what string, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return errorf(http.StatusBadRequest, "%s request: %v", what, err)
	}
	return nil
}

// Replay carries out (or previews) a replay and audits it.
func (s *Server) Replay(ctx context.Context, actor string, req ReplayRequest) (ReplayResult, error) {
	res := ReplayResult{DryRun: req.DryRun, Source: req.Source, Replayed: []string{}, Refused: map[string]string{}}
	if strings.TrimSpace(req.Reason) == "" {
		return res, errorf(http.StatusBadRequest, "a replay needs a reason (it is audited)")
	}
	if err := readableRequest(req); err != nil {
		return res, err
	}
	if req.Limit <= 0 {
		req.Limit = 10000
	}
	var err error
	switch req.Source {
	case "inbox":
		err = s.replayInbox(ctx, actor, req, &res)
	case "outbox":
		err = s.replayOutbox(ctx, actor, req, &res)
	default:
		return res, errorf(http.StatusBadRequest, "source: %q is neither inbox nor outbox", req.Source)
	}
	if err != nil {
		return res, err
	}
	action := "replay"
	if req.DryRun {
		action = "replay-dry-run"
		// A preview changes nothing; its audit row stands alone.
		err = s.audit(ctx, s.cfg.DB, actor, action, req, res)
	}
	if err == nil {
		s.cfg.Logger.Info("admin: "+action, "actor", actor, "source", req.Source, "stream", req.Stream, "target", req.Target,
			"class", req.Class, "count", len(res.Replayed), "refused", len(res.Refused), "reason", req.Reason)
	}
	return res, err
}

func (s *Server) replayInbox(ctx context.Context, actor string, req ReplayRequest, res *ReplayResult) error {
	st, ok := s.streams[req.Stream]
	if !ok {
		return errorf(http.StatusNotFound, "no stream %q", req.Stream)
	}
	if (req.Class == "") == (len(req.IDs) == 0) {
		return errorf(http.StatusBadRequest, "replay either a class or a list of ids")
	}
	var ids []int64
	for _, v := range req.IDs {
		id, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return errorf(http.StatusBadRequest, "%q is not a message id", v)
		}
		ids = append(ids, id)
	}
	class := inbox.Class(strings.ToUpper(req.Class))
	if class != "" && !class.Replayable() {
		return errorf(http.StatusBadRequest, "class %s is not replayable (replayable: CODEC_ERROR, UNSUPPORTED, INFRA, EXHAUSTED, LATE)", class)
	}
	if req.DryRun {
		return s.previewInbox(ctx, req.Stream, class, ids, req.Limit, res)
	}
	if st.Engine == nil {
		return errorf(http.StatusConflict, "stream %s does not run in this process", req.Stream)
	}
	out, err := st.Engine.Replay(ctx, inbox.ReplayRequest{Class: class, IDs: ids, Actor: actor, Reason: req.Reason, Limit: req.Limit})
	if err != nil {
		return err
	}
	for _, id := range out.Replayed {
		res.Replayed = append(res.Replayed, strconv.FormatInt(id, 10))
	}
	for id, why := range out.Refused {
		res.Refused[strconv.FormatInt(id, 10)] = why
	}
	// The inbox audits the replay in its own transaction; this row records
	// it among the other admin operations.
	return s.audit(ctx, s.cfg.DB, actor, "replay", req, *res)
}

// readableRequest refuses text in a replay request that no stream, target,
// class or id holds and the database would refuse with its own error: not
// UTF-8, NUL and other control characters (a reason may have line breaks
// and tabs), or too long.
func readableRequest(req ReplayRequest) error {
	for name, v := range map[string]string{"source": req.Source, "stream": req.Stream, "class": req.Class, "target": req.Target} {
		if err := readable(v); err != nil {
			return fmt.Errorf("%w: %s %w", ErrBadParameter, name, err)
		}
	}
	for _, id := range req.IDs {
		if err := readable(id); err != nil {
			return fmt.Errorf("%w: an id %w", ErrBadParameter, err)
		}
	}
	reason := strings.NewReplacer("\n", "", "\r", "", "\t", "").Replace(req.Reason)
	if err := readable(reason); err != nil || len(req.Reason) > maxReasonBytes {
		if err == nil {
			err = fmt.Errorf("is longer than %d bytes", maxReasonBytes)
		}
		return fmt.Errorf("%w: reason %w", ErrBadParameter, err)
	}
	return nil
}

// maxReasonBytes bounds a replay's reason: a sentence or a ticket's
// summary, not a log.
const maxReasonBytes = 2000

// previewInbox applies the inbox's replay rule without changing anything.
func (s *Server) previewInbox(ctx context.Context, stream string, class inbox.Class, ids []int64, limit int, res *ReplayResult) error {
	if class != "" {
		rows, err := s.cfg.DB.Query(ctx, s.q.Get("ReplayCandidates"), stream, string(class), limit)
		if err != nil {
			return fmt.Errorf("admin: replay preview: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				return fmt.Errorf("admin: replay preview: %w", err)
			}
			res.Replayed = append(res.Replayed, strconv.FormatInt(id, 10))
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("admin: replay preview: %w", err)
		}
		if class != inbox.Late {
			return nil
		}
		for _, key := range res.Replayed {
			id, _ := strconv.ParseInt(key, 10, 64) // formatted above
			row, err := inbox.Get(ctx, s.cfg.DB, stream, id)
			if err != nil {
				return err
			}
			warnLate(res, key, row)
		}
		return nil
	}
	for _, id := range ids {
		key := strconv.FormatInt(id, 10)
		row, err := inbox.Get(ctx, s.cfg.DB, stream, id)
		switch {
		case errors.Is(err, inbox.ErrNotFound):
			res.Refused[key] = "not found"
		case err != nil:
			return err
		case row.Status != inbox.Failed && row.Status != inbox.Dead:
			res.Refused[key] = "status " + string(row.Status)
		case !row.ErrorClass.Replayable():
			res.Refused[key] = "class " + string(row.ErrorClass) + " is not replayable"
		default:
			res.Replayed = append(res.Replayed, key)
			warnLate(res, key, row)
		}
	}
	return nil
}

// warnLate warns that replaying a LATE message applies an older change
// after newer ones; its reason says which.
func warnLate(res *ReplayResult, key string, row inbox.Row) {
	if row.ErrorClass != inbox.Late {
		return
	}
	if res.Warnings == nil {
		res.Warnings = map[string]string{}
	}
	res.Warnings[key] = "older than what was applied: replaying it applies it after the newer messages (" + row.Reason + ")"
}

func (s *Server) replayOutbox(ctx context.Context, actor string, req ReplayRequest, res *ReplayResult) error {
	if (req.Target == "") == (len(req.IDs) == 0) {
		return errorf(http.StatusBadRequest, "replay either a target's dead letters or a list of event ids")
	}
	// Select what is DEAD now; the replay below moves exactly those rows,
	// in the same transaction as its audit row.
	var selected []string
	perKey := map[string]bool{} // the selected events of per-key targets
	if req.Target != "" {
		var after int64
		for len(selected) < req.Limit {
			recs, err := outbox.ListDead(ctx, s.cfg.DB, req.Target, after, min(500, req.Limit-len(selected)))
			if err != nil {
				return err
			}
			for _, r := range recs {
				selected = append(selected, r.EventID)
				after = r.Seq
				if s.perKey(r.Target) {
					perKey[r.EventID] = true
				}
			}
			if len(recs) == 0 {
				break
			}
		}
	} else {
		for _, id := range req.IDs {
			rec, err := outbox.Get(ctx, s.cfg.DB, id)
			switch {
			case errors.Is(err, outbox.ErrNotFound):
				res.Refused[id] = "not found"
			case err != nil:
				return err
			case rec.Status != outbox.StatusDead:
				res.Refused[id] = "status " + string(rec.Status)
			default:
				selected = append(selected, id)
				if s.perKey(rec.Target) {
					perKey[id] = true
				}
			}
		}
	}
	sort.Strings(selected)
	if err := s.waiting(ctx, selected, perKey, res); err != nil {
		return err
	}
	if req.DryRun || len(selected) == 0 {
		res.Replayed = append(res.Replayed, selected...)
		if !req.DryRun {
			return s.audit(ctx, s.cfg.DB, actor, "replay", req, *res)
		}
		return nil
	}
	return s.cfg.DB.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		res.Replayed = res.Replayed[:0]
		out, err := outbox.Replay(ctx, tx, s.cfg.Clock.Now(), outbox.ReplayRequest{EventIDs: selected, Actor: actor, Reason: req.Reason})
		if err != nil {
			return err
		}
		if n := len(out.Replayed) + len(out.Covered); n != len(selected) {
			// Another operator (or process) moved some meanwhile: do nothing
			// rather than report what did not happen.
			return errorf(http.StatusConflict, "%d of the %d selected events changed meanwhile; nothing replayed, run it again", len(selected)-n, len(selected))
		}
		res.Replayed = append(res.Replayed, out.Replayed...)
		// A compacted key's older state is not sent again once a newer one
		// went out: the outbox records it as covered instead.
		res.Covered = out.Covered
		return s.audit(ctx, tx, actor, "replay", req, *res)
	})
}

// waiting fills in how many events wait behind each selected DEAD event of
// a per-key target.
func (s *Server) waiting(ctx context.Context, selected []string, perKey map[string]bool, res *ReplayResult) error {
	if len(perKey) == 0 {
		return nil
	}
	ids := make([]string, 0, len(perKey))
	for _, id := range selected {
		if perKey[id] {
			ids = append(ids, id)
		}
	}
	n, err := outbox.WaitingBehind(ctx, s.cfg.DB, ids)
	if err != nil {
		return err
	}
	res.Waiting = map[string]int64{}
	for _, id := range ids {
		res.Waiting[id] = n[id] // 0 for an event without a key
	}
	return nil
}

func (s *Server) audit(ctx context.Context, q store.Querier, actor, action string, req ReplayRequest, res ReplayResult) error {
	scope := req.Stream
	if req.Source == "outbox" {
		scope = req.Target
	}
	selector := "ids"
	switch {
	case req.Class != "":
		selector = "class:" + strings.ToUpper(req.Class)
	case req.Source == "outbox" && req.Target != "" && len(req.IDs) == 0:
		selector = "target"
	}
	detail, _ := json.Marshal(map[string]any{"replayed": res.Replayed, "refused": res.Refused})
	if _, err := q.Exec(ctx, s.q.Get("AuditInsert"), s.cfg.Clock.Now(), actor, action, req.Source, scope, selector,
		req.DryRun, len(res.Replayed), req.Reason, string(detail)); err != nil {
		return fmt.Errorf("admin: audit: %w", err)
	}
	return nil
}
