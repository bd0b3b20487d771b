package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
)

// StreamStatus is what an operator sees of a stream.
type StreamStatus struct {
	Stream string `json:"stream"`
	// Leader is whether the instance answering holds the stream's lease.
	Leader bool `json:"leader"`
	// LeaseHolder is the instance id of the instance holding the stream's
	// lease ("" when none does); LeaseOwner is the lease's owner as
	// recorded, LeaseExpires when it runs out unless renewed (a holder
	// whose lease has run out pumps no more).
	LeaseHolder  string     `json:"lease_holder,omitempty"`
	LeaseOwner   string     `json:"lease_owner,omitempty"`
	LeaseExpires *time.Time `json:"lease_expires,omitempty"`
	// HeadID is the smallest unfinished message (0: none).
	HeadID int64 `json:"head_id"`
	// HeadReceived is when the head was received (nil: no head).
	HeadReceived *time.Time `json:"head_received,omitempty"`
	HeadStatus   string     `json:"head_status,omitempty"`
	HeadAttempts int        `json:"head_attempts,omitempty"`
	HeadClass    string     `json:"head_error_class,omitempty"`
	HeadReason   string     `json:"head_reason,omitempty"`
	HeadAge      float64    `json:"head_age_seconds"`
	// HeadBlocked is how long the head has been tried (0 until its first attempt).
	HeadBlocked float64    `json:"head_blocked_seconds"`
	Backlog     int64      `json:"backlog"`
	Failed      int64      `json:"failed"`
	Dead        int64      `json:"dead"`
	LastSuccess *time.Time `json:"last_success,omitempty"`
	Watermark   int64      `json:"watermark"`
	GapFrom     int64      `json:"gap_from,omitempty"`
	GapOpen     float64    `json:"gap_open_seconds"`
	GapsSkipped int64      `json:"gaps_declared"`
	IDsSkipped  int64      `json:"ids_skipped"`
	// MailboxUnreadable is how long the stream's poller has failed to read
	// its mailbox (0: it reads), MailboxError the last failure.
	MailboxUnreadable float64 `json:"mailbox_unreadable_seconds,omitempty"`
	MailboxError      string  `json:"mailbox_error,omitempty"`
}

// TargetStatus is what an operator sees of a relay target.
type TargetStatus struct {
	Target string `json:"target"`
	// Relayed is whether a relay target of this instance serves it
	// (relay.targets lists it). A target that has events in the outbox but
	// no relay is shown with Relayed false: its events wait for ever.
	Relayed bool    `json:"relayed"`
	Pending int64   `json:"pending"`
	Dead    int64   `json:"dead"`
	Lag     float64 `json:"lag_seconds"`
	// Paused: this process's relay sends nothing to the target because its
	// broker is unavailable; it probes the broker and resumes on its own.
	Paused      bool       `json:"paused"`
	PausedSince *time.Time `json:"paused_since,omitempty"`
	// LastError is this process's last failed send (or probe) to the target.
	LastError   string     `json:"last_error,omitempty"`
	LastErrorAt *time.Time `json:"last_error_at,omitempty"`
	// Lane is the target's lane in this process's relay (unordered, per-key,
	// compacted; empty when no relay here serves it).
	Lane string `json:"lane,omitempty"`
	// BlockedKeys counts, on a per-key target, the keys held by a DEAD event
	// (not skipped): their later events wait for its replay or skip.
	// Blocked lists the first BlockedShown of them, oldest dead event first,
	// each with the event holding it and how many events wait behind it.
	BlockedKeys int64               `json:"blocked_keys"`
	Blocked     []outbox.BlockedKey `json:"blocked,omitempty"`
}

// BlockedShown bounds the blocked keys a target's status lists.
const BlockedShown = 10

// Status is GET /v1/status.
type Status struct {
	Time    time.Time      `json:"time"`
	Streams []StreamStatus `json:"streams"`
	Targets []TargetStatus `json:"targets"`
	// WAL is the WAL relay's slot (outbox.mode wal): who streams from it,
	// its confirmed position, the WAL it retains and its lag.
	WAL    *outbox.WALStatus `json:"wal,omitempty"`
	Checks []CheckResult     `json:"checks"`
	Ready  bool              `json:"ready"`
}

func (s *Server) status(ctx context.Context, _ *http.Request, _ string) (any, error) {
	st, err := s.Status(ctx)
	if err != nil {
		return nil, err
	}
	st.Checks, st.Ready = s.runChecks(ctx)
	return st, nil
}

// Status reads the state of every stream and target.
func (s *Server) Status(ctx context.Context) (Status, error) {
	now, err := s.now(ctx)
	if err != nil {
		return Status{}, err
	}
	out := Status{Time: now, Streams: []StreamStatus{}, Targets: []TargetStatus{}}
	if s.cfg.WAL != nil {
		w := s.cfg.WAL()
		out.WAL = &w
	}
	for _, st := range s.cfg.Streams {
		ss, err := s.streamStatus(ctx, st, now)
		if err != nil {
			return out, err
		}
		out.Streams = append(out.Streams, ss)
	}
	ts, err := s.targetStatus(ctx)
	if err != nil {
		return out, err
	}
	out.Targets = ts
	return out, nil
}

func (s *Server) streamStatus(ctx context.Context, st Stream, now time.Time) (StreamStatus, error) {
	ss := StreamStatus{Stream: st.Name}
	if st.Engine != nil {
		ss.Leader = st.Engine.IsLeader()
	}
	var received time.Time
	var started *time.Time
	err := s.cfg.DB.QueryRow(ctx, s.q.Get("StreamHead"), st.Name).Scan(&ss.HeadID, &ss.HeadStatus, &received, &started,
		&ss.HeadAttempts, &ss.HeadClass, &ss.HeadReason)
	switch {
	case errors.Is(err, store.ErrNoRows):
	case err != nil:
		return ss, fmt.Errorf("admin: head of %s: %w", st.Name, err)
	default:
		ss.HeadReceived = &received
		ss.HeadAge = seconds(now.Sub(received))
		if started != nil {
			ss.HeadBlocked = seconds(now.Sub(*started))
		}
	}
	if err := s.cfg.DB.QueryRow(ctx, s.q.Get("StreamCounts"), st.Name).Scan(&ss.Backlog, &ss.Failed, &ss.Dead); err != nil {
		return ss, fmt.Errorf("admin: counts of %s: %w", st.Name, err)
	}
	if err := s.cfg.DB.QueryRow(ctx, s.q.Get("StreamGaps"), st.Name).Scan(&ss.GapsSkipped, &ss.IDsSkipped); err != nil {
		return ss, fmt.Errorf("admin: gaps of %s: %w", st.Name, err)
	}
	h, ok, err := inbox.HolderOf(ctx, s.cfg.DB, st.Name)
	if err != nil {
		return ss, err
	}
	if ok {
		ss.LeaseHolder, ss.LeaseOwner, ss.LeaseExpires = h.Instance, h.Owner, &h.Expires
	}
	cur, ok, err := inbox.LoadCursor(ctx, s.cfg.DB, st.Name)
	if err != nil {
		return ss, err
	}
	if ok {
		ss.Watermark, ss.GapFrom = cur.Watermark, cur.GapFrom
		if cur.GapFrom != 0 {
			ss.GapOpen = seconds(now.Sub(cur.GapSeenAt))
		}
	}
	if st.LastSuccess != nil {
		if t := st.LastSuccess(); !t.IsZero() {
			ss.LastSuccess = &t
		}
	}
	if st.Mailbox != nil {
		if since, err := st.Mailbox(); !since.IsZero() {
			// The poller's own clock, the host's: it stamped since.
			ss.MailboxUnreadable = seconds(s.hostNow().Sub(since))
			if err != nil {
				ss.MailboxError = err.Error()
			}
		}
	}
	return ss, nil
}

func (s *Server) targetStatus(ctx context.Context) ([]TargetStatus, error) {
	by := map[string]*TargetStatus{}
	for _, t := range s.cfg.Targets {
		by[t] = &TargetStatus{Target: t, Relayed: true}
	}
	rows, err := s.cfg.DB.Query(ctx, s.q.Get("TargetCounts"))
	if err != nil {
		return nil, fmt.Errorf("admin: relay targets: %w", err)
	}
	for rows.Next() {
		var t TargetStatus
		if err := rows.Scan(&t.Target, &t.Pending, &t.Dead); err != nil {
			rows.Close()
			return nil, fmt.Errorf("admin: relay targets: %w", err)
		}
		if have := by[t.Target]; have != nil {
			have.Pending, have.Dead = t.Pending, t.Dead
		} else {
			// Events for a target this process does not relay: shown, so
			// that a misnamed or forgotten target is noticed.
			by[t.Target] = &t
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("admin: relay targets: %w", err)
	}
	if s.cfg.Lag != nil {
		lag, err := s.cfg.Lag(ctx)
		if err != nil {
			return nil, err
		}
		for t, d := range lag {
			if have := by[t]; have != nil {
				have.Lag = seconds(d)
			}
		}
	}
	if s.cfg.TargetStates != nil {
		for _, ts := range s.cfg.TargetStates() {
			have := by[ts.Target]
			if have == nil {
				continue
			}
			have.Paused, have.LastError, have.Lane = ts.Paused, ts.LastError, ts.Kind.String()
			if ts.Kind == outbox.PerKey {
				if err := s.blocked(ctx, have); err != nil {
					return nil, err
				}
			}
			if ts.Paused {
				have.PausedSince = &ts.PausedSince
			}
			if !ts.LastErrorAt.IsZero() {
				have.LastErrorAt = &ts.LastErrorAt
			}
		}
	}
	out := make([]TargetStatus, 0, len(by))
	for _, t := range by {
		out = append(out, *t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Target < out[j].Target })
	return out, nil
}

// blocked fills in the keys of a per-key target held by a DEAD event.
func (s *Server) blocked(ctx context.Context, t *TargetStatus) error {
	if t.Dead == 0 {
		return nil // no dead event, nothing held: no query
	}
	n, err := outbox.BlockedKeyCount(ctx, s.cfg.DB, t.Target)
	if err != nil {
		return err
	}
	t.BlockedKeys = n
	if n > 0 {
		t.Blocked, err = outbox.BlockedKeys(ctx, s.cfg.DB, t.Target, BlockedShown)
	}
	return err
}

// perKey says whether this process's relay serves target with a per-key
// lane (false when no relay here serves it: its lane is unknown).
func (s *Server) perKey(target string) bool {
	if s.cfg.TargetStates == nil {
		return false
	}
	for _, ts := range s.cfg.TargetStates() {
		if ts.Target == target {
			return ts.Kind == outbox.PerKey
		}
	}
	return false
}

// BackfillStatus is GET /v1/backfill, one per stream.
type BackfillStatus struct {
	Stream string `json:"stream"`
	// Pending counts terminal messages whose processed mark is not written yet.
	Pending int64 `json:"pending"`
	// Overdue were received longer than the overdue limit ago.
	Overdue int64      `json:"overdue"`
	Failing int64      `json:"failing"`
	Oldest  *time.Time `json:"oldest_received,omitempty"`
}

func (s *Server) backfill(ctx context.Context, _ *http.Request, _ string) (any, error) {
	return s.Backfill(ctx)
}

// Backfill reads the backfill state of every stream.
func (s *Server) Backfill(ctx context.Context) ([]BackfillStatus, error) {
	now, err := s.now(ctx)
	if err != nil {
		return nil, err
	}
	out := []BackfillStatus{}
	for _, st := range s.cfg.Streams {
		b := BackfillStatus{Stream: st.Name}
		overdue := st.Overdue
		if overdue <= 0 {
			overdue = time.Hour
		}
		if err := s.cfg.DB.QueryRow(ctx, s.q.Get("BackfillStatus"), st.Name, now.Add(-overdue)).Scan(&b.Pending, &b.Overdue, &b.Failing, &b.Oldest); err != nil {
			return nil, fmt.Errorf("admin: backfill of %s: %w", st.Name, err)
		}
		out = append(out, b)
	}
	return out, nil
}

// hostNow is this host's time, the one the components of this process
// stamp their own state with.
func (s *Server) hostNow() time.Time {
	if s.cfg.HostClock != nil {
		return s.cfg.HostClock.Now()
	}
	return s.cfg.Clock.Now()
}

// Unserved returns the targets with PENDING events that no relay target of
// this instance serves, and logs each at ERROR: nothing will ever publish
// those events until relay.targets names the target.
func (s *Server) Unserved(ctx context.Context) ([]TargetStatus, error) {
	ts, err := s.targetStatus(ctx)
	if err != nil {
		return nil, err
	}
	return s.unserved(ts), nil
}

func (s *Server) unserved(ts []TargetStatus) []TargetStatus {
	var out []TargetStatus
	for _, t := range ts {
		if t.Relayed || t.Pending == 0 {
			continue
		}
		out = append(out, t)
		s.cfg.Logger.Error("admin: outbox events wait for a target no relay serves; add it under relay.targets",
			"target", t.Target, "pending", t.Pending, "relayed_targets", strings.Join(s.cfg.Targets, ","))
	}
	return out
}

func seconds(d time.Duration) float64 {
	if d < 0 {
		return 0
	}
	return d.Seconds()
}
