package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/outbox"
)

// DeadMessage is a FAILED or DEAD inbox message.
type DeadMessage struct {
	Stream     string     `json:"stream"`
	ID         int64      `json:"id"`
	Status     string     `json:"status"`
	Class      string     `json:"error_class"`
	Reason     string     `json:"reason"`
	Kind       string     `json:"kind,omitempty"`
	Attempts   int        `json:"attempts"`
	ReceivedAt time.Time  `json:"received_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	Replayable bool       `json:"replayable"`
}

// DeadEvent is a DEAD outbox event.
type DeadEvent struct {
	EventID   string     `json:"event_id"`
	Seq       int64      `json:"seq"`
	Target    string     `json:"target"`
	Topic     string     `json:"topic"`
	Key       string     `json:"key"`
	Status    string     `json:"status"`
	Attempts  int        `json:"attempts"`
	LastError string     `json:"last_error"`
	CreatedAt time.Time  `json:"created_at"`
	DoneAt    *time.Time `json:"done_at,omitempty"`
}

// DeadList is GET /v1/dead.
type DeadList struct {
	Inbox  []DeadMessage `json:"inbox"`
	Outbox []DeadEvent   `json:"outbox"`
}

// HistoryEntry is one recorded failure of a message.
type HistoryEntry struct {
	Attempt int       `json:"attempt"`
	Class   string    `json:"error_class"`
	Reason  string    `json:"reason"`
	At      time.Time `json:"at"`
}

// DeadDetail is GET /v1/dead/inbox/{stream}/{id}.
type DeadDetail struct {
	DeadMessage
	Identity     string         `json:"identity,omitempty"`
	NextAttempt  *time.Time     `json:"next_attempt_at,omitempty"`
	History      []HistoryEntry `json:"history"`
	BackfilledAt *time.Time     `json:"backfilled_at,omitempty"`
}

func intParam(r *http.Request, name string, def, max int64) (int64, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	switch {
	case max > 0 && (err != nil || n < 0 || n > max):
		return 0, errorf(http.StatusBadRequest, "%s: %q is not a number from 0 to %d", name, v, max)
	case err != nil || n < 0:
		return 0, errorf(http.StatusBadRequest, "%s: %q is not a number from 0 up", name, v)
	}
	return n, nil
}

// deadParams are the parameters of GET /v1/dead.
var deadParams = []string{"after", "class", "limit", "source", "stream", "target"}

// DeadFilter selects dead letters: of one source ("": both), stream, class
// (inbox), target (outbox); ids after After, at most Limit per stream or target.
type DeadFilter struct {
	Source, Stream, Class, Target string
	After                         int64
	Limit                         int
}

func (s *Server) deadList(ctx context.Context, r *http.Request, _ string) (any, error) {
	qp := r.URL.Query()
	if err := readableParams(qp); err != nil {
		return nil, err
	}
	for name, vs := range qp {
		if !slices.Contains(deadParams, name) {
			return nil, fmt.Errorf("%w: %q is not a parameter of this query (known: %s)", ErrBadParameter, name, strings.Join(deadParams, ", "))
		}
		if len(vs) > 1 {
			return nil, fmt.Errorf("%w: %s is given %d times; give it once", ErrBadParameter, name, len(vs))
		}
	}
	limit, err := intParam(r, "limit", 100, 1000)
	if err != nil {
		return nil, err
	}
	after, err := intParam(r, "after", 0, 0)
	if err != nil {
		return nil, err
	}
	return s.DeadLetters(ctx, DeadFilter{Source: qp.Get("source"), Stream: qp.Get("stream"), Class: qp.Get("class"),
		Target: qp.Get("target"), After: after, Limit: int(limit)})
}

// DeadLetters lists the FAILED and DEAD inbox messages and the DEAD outbox
// events a filter selects.
func (s *Server) DeadLetters(ctx context.Context, f DeadFilter) (DeadList, error) {
	out := DeadList{Inbox: []DeadMessage{}, Outbox: []DeadEvent{}}
	if f.Source != "" && f.Source != "inbox" && f.Source != "outbox" {
		return out, errorf(http.StatusBadRequest, "source: %q is neither inbox nor outbox", f.Source)
	}
	if f.Class != "" && !classShape.MatchString(f.Class) {
		return out, fmt.Errorf("%w: class %q: want a failure class (MALFORMED, INFRA, EXHAUSTED, …)", ErrBadParameter, f.Class)
	}
	if err := readable(f.Target); err != nil {
		return out, fmt.Errorf("%w: target %w", ErrBadParameter, err)
	}
	if f.Limit <= 0 || f.Limit > 1000 {
		f.Limit = 100
	}
	if f.Source != "outbox" {
		streams, err := s.pickStreams(f.Stream)
		if err != nil {
			return out, err
		}
		for _, st := range streams {
			rows, err := s.cfg.DB.Query(ctx, s.q.Get("DeadList"), st, f.Class, f.After, f.Limit)
			if err != nil {
				return out, fmt.Errorf("admin: dead letters of %s: %w", st, err)
			}
			for rows.Next() {
				d := DeadMessage{Stream: st}
				if err := rows.Scan(&d.ID, &d.Status, &d.Class, &d.Reason, &d.Kind, &d.Attempts, &d.ReceivedAt, &d.FinishedAt); err != nil {
					rows.Close()
					return out, fmt.Errorf("admin: dead letters of %s: %w", st, err)
				}
				d.Replayable = inbox.Class(d.Class).Replayable()
				out.Inbox = append(out.Inbox, d)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return out, fmt.Errorf("admin: dead letters of %s: %w", st, err)
			}
		}
	}
	if f.Source != "inbox" {
		targets := s.cfg.Targets
		if f.Target != "" {
			targets = []string{f.Target}
		}
		for _, t := range targets {
			recs, err := outbox.ListDead(ctx, s.cfg.DB, t, f.After, f.Limit)
			if err != nil {
				return out, err
			}
			for _, r := range recs {
				out.Outbox = append(out.Outbox, deadEvent(r))
			}
		}
	}
	return out, nil
}

func deadEvent(r outbox.Record) DeadEvent {
	return DeadEvent{EventID: r.EventID, Seq: r.Seq, Target: r.Target, Topic: r.Topic, Key: r.Key, Status: string(r.Status),
		Attempts: r.Attempts, LastError: r.LastError, CreatedAt: r.CreatedAt, DoneAt: r.DoneAt}
}

func (s *Server) pickStreams(name string) ([]string, error) {
	if name != "" {
		if _, ok := s.streams[name]; !ok {
			return nil, errorf(http.StatusNotFound, "no stream %q", name)
		}
		return []string{name}, nil
	}
	out := make([]string, 0, len(s.cfg.Streams))
	for _, st := range s.cfg.Streams {
		out = append(out, st.Name)
	}
	return out, nil
}

func (s *Server) deadInbox(ctx context.Context, r *http.Request, _ string) (any, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		return nil, errorf(http.StatusBadRequest, "%q is not a message id", r.PathValue("id"))
	}
	return s.DeadInbox(ctx, r.PathValue("stream"), id)
}

// DeadInbox reads one inbox message with its history of failures.
func (s *Server) DeadInbox(ctx context.Context, stream string, id int64) (DeadDetail, error) {
	if _, err := s.pickStreams(stream); err != nil {
		return DeadDetail{}, err
	}
	row, err := inbox.Get(ctx, s.cfg.DB, stream, id)
	if errors.Is(err, inbox.ErrNotFound) {
		return DeadDetail{}, errorf(http.StatusNotFound, "no message %d in stream %s", id, stream)
	}
	if err != nil {
		return DeadDetail{}, err
	}
	d := DeadDetail{
		DeadMessage: DeadMessage{Stream: stream, ID: row.ID, Status: string(row.Status), Class: string(row.ErrorClass),
			Reason: row.Reason, Kind: row.Kind, Attempts: row.Attempts, ReceivedAt: row.ReceivedAt, FinishedAt: row.FinishedAt,
			Replayable: (row.Status == inbox.Failed || row.Status == inbox.Dead) && row.ErrorClass.Replayable()},
		Identity: row.Identity, NextAttempt: row.NextAttemptAt, BackfilledAt: row.BackfilledAt, History: []HistoryEntry{},
	}
	rows, err := s.cfg.DB.Query(ctx, s.q.Get("ErrorHistory"), stream, id)
	if err != nil {
		return d, fmt.Errorf("admin: history of %d: %w", id, err)
	}
	defer rows.Close()
	for rows.Next() {
		var h HistoryEntry
		if err := rows.Scan(&h.Attempt, &h.Class, &h.Reason, &h.At); err != nil {
			return d, fmt.Errorf("admin: history of %d: %w", id, err)
		}
		d.History = append(d.History, h)
	}
	return d, rows.Err()
}

func (s *Server) deadOutbox(ctx context.Context, r *http.Request, _ string) (any, error) {
	return s.DeadOutbox(ctx, r.PathValue("event"))
}

// classShape is what a failure class looks like.
var classShape = regexp.MustCompile(`^[A-Za-z_]{1,40}$`)

// DeadOutbox reads one outbox event.
func (s *Server) DeadOutbox(ctx context.Context, eventID string) (DeadEvent, error) {
	if err := readable(eventID); err != nil {
		return DeadEvent{}, fmt.Errorf("%w: event id %w", ErrBadParameter, err)
	}
	rec, err := outbox.Get(ctx, s.cfg.DB, eventID)
	if errors.Is(err, outbox.ErrNotFound) {
		return DeadEvent{}, errorf(http.StatusNotFound, "no outbox event %q", eventID)
	}
	if err != nil {
		return DeadEvent{}, err
	}
	return deadEvent(rec), nil
}
