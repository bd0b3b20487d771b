package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strings"

	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
)

// SkipRequest is the body of POST /v1/skip: DEAD outbox events, by id, that
// no longer hold their key on a per-key target. A skipped event stays DEAD
// (marked skipped, still replayable); the key's waiting events go.
type SkipRequest struct {
	IDs []string `json:"ids"`
	// DryRun only shows what would be skipped (and audits the preview).
	DryRun bool   `json:"dry_run"`
	Reason string `json:"reason"`
}

// SkipResult is the answer: what was (or would be) skipped, how many events
// of its key each let go, and what was refused and why.
type SkipResult struct {
	DryRun  bool              `json:"dry_run"`
	Skipped []string          `json:"skipped"`
	Waiting map[string]int64  `json:"waiting,omitempty"`
	Refused map[string]string `json:"refused"`
}

func (s *Server) skip(ctx context.Context, r *http.Request, actor string) (any, error) {
	var req SkipRequest
	if err := decodeRequest(r, "skip", &req); err != nil {
		return nil, err
	}
	return s.Skip(ctx, actor, req)
}

// Skip carries out (or previews) a skip of DEAD outbox events and audits it.
func (s *Server) Skip(ctx context.Context, actor string, req SkipRequest) (SkipResult, error) {
	res := SkipResult{DryRun: req.DryRun, Skipped: []string{}, Refused: map[string]string{}}
	if strings.TrimSpace(req.Reason) == "" {
		return res, errorf(http.StatusBadRequest, "a skip needs a reason (it is audited)")
	}
	if len(req.IDs) == 0 {
		return res, errorf(http.StatusBadRequest, "skip needs a list of event ids")
	}
	var selected []string
	perKey := map[string]bool{}
	for _, id := range req.IDs {
		rec, err := outbox.Get(ctx, s.cfg.DB, id)
		switch {
		case errors.Is(err, outbox.ErrNotFound):
			res.Refused[id] = "not found"
		case err != nil:
			return res, err
		case rec.Status != outbox.StatusDead:
			res.Refused[id] = "status " + string(rec.Status)
		case rec.SkippedAt != nil:
			res.Refused[id] = "already skipped at " + rec.SkippedAt.UTC().Format("2006-01-02T15:04:05Z")
		default:
			selected = append(selected, id)
			if s.perKey(rec.Target) {
				perKey[id] = true
			}
		}
	}
	sort.Strings(selected)
	var waiting ReplayResult
	if err := s.waiting(ctx, selected, perKey, &waiting); err != nil {
		return res, err
	}
	res.Waiting = waiting.Waiting
	action := "skip"
	var err error
	switch {
	case req.DryRun:
		action = "skip-dry-run"
		res.Skipped = append(res.Skipped, selected...)
		err = s.auditSkip(ctx, s.cfg.DB, actor, action, req, res)
	case len(selected) == 0:
		err = s.auditSkip(ctx, s.cfg.DB, actor, action, req, res)
	default:
		err = s.cfg.DB.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
			out, err := outbox.Skip(ctx, tx, s.cfg.Clock.Now(), outbox.SkipRequest{EventIDs: selected, Actor: actor, Reason: req.Reason})
			if err != nil {
				return err
			}
			if len(out.Skipped) != len(selected) {
				// Replayed or skipped by another operator meanwhile.
				return errorf(http.StatusConflict, "%d of the %d selected events changed meanwhile; nothing skipped, run it again", len(selected)-len(out.Skipped), len(selected))
			}
			res.Skipped = append(res.Skipped, out.Skipped...)
			return s.auditSkip(ctx, tx, actor, action, req, res)
		})
	}
	if err != nil {
		return res, err
	}
	level := slog.LevelWarn // the key's waiting events go without the skipped one
	if req.DryRun {
		level = slog.LevelInfo
	}
	s.cfg.Logger.Log(ctx, level, "admin: "+action, "actor", actor, "count", len(res.Skipped), "events", res.Skipped,
		"refused", len(res.Refused), "reason", req.Reason)
	return res, nil
}

func (s *Server) auditSkip(ctx context.Context, q store.Querier, actor, action string, req SkipRequest, res SkipResult) error {
	detail, _ := json.Marshal(map[string]any{"skipped": res.Skipped, "waiting": res.Waiting, "refused": res.Refused})
	if _, err := q.Exec(ctx, s.q.Get("AuditInsert"), s.cfg.Clock.Now(), actor, action, "outbox", "", "ids",
		req.DryRun, len(res.Skipped), req.Reason, string(detail)); err != nil {
		return fmt.Errorf("admin: audit: %w", err)
	}
	return nil
}
