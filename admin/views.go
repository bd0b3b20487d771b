package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
)

// StreamNames lists the streams the API reports on, in configuration order.
func (s *Server) StreamNames() []string {
	names, _ := s.pickStreams("")
	return names
}

// TargetNames lists the relay's targets.
func (s *Server) TargetNames() []string { return append([]string(nil), s.cfg.Targets...) }

// Payload returns at most max bytes of a message's payload and its full size.
func (s *Server) Payload(ctx context.Context, stream string, id int64, max int) ([]byte, int, error) {
	var b []byte
	var n int
	err := s.cfg.DB.QueryRow(ctx, s.q.Get("Payload"), stream, id, max).Scan(&b, &n)
	if errors.Is(err, store.ErrNoRows) {
		return nil, 0, errorf(http.StatusNotFound, "no message %d in stream %s", id, stream)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("admin: payload of %d: %w", id, err)
	}
	return b, n, nil
}

// Gap is a permanent gap of a stream's mailbox ids: ids the poller waited
// for and then declared missing, with the late rows found in it since.
type Gap struct {
	ID          int64     `json:"id"`
	Stream      string    `json:"stream"`
	From        int64     `json:"from_id"`
	To          int64     `json:"to_id"`
	FirstSeenAt time.Time `json:"first_seen_at"`
	DeclaredAt  time.Time `json:"declared_at"`
	LateRows    int64     `json:"late_rows"`
}

// Gaps lists the newest permanent gaps of every stream (at most limit each).
func (s *Server) Gaps(ctx context.Context, limit int) ([]Gap, error) {
	out := []Gap{}
	for _, st := range s.StreamNames() {
		rows, err := s.cfg.DB.Query(ctx, s.q.Get("GapList"), st, limit)
		if err != nil {
			return nil, fmt.Errorf("admin: gaps of %s: %w", st, err)
		}
		for rows.Next() {
			var g Gap
			if err := rows.Scan(&g.ID, &g.Stream, &g.From, &g.To, &g.FirstSeenAt, &g.DeclaredAt, &g.LateRows); err != nil {
				rows.Close()
				return nil, fmt.Errorf("admin: gaps of %s: %w", st, err)
			}
			out = append(out, g)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("admin: gaps of %s: %w", st, err)
		}
	}
	return out, nil
}

// Progress reads the current status of replayed messages (inbox, of a
// stream) or events (outbox), by id; an unknown one is "not found".
func (s *Server) Progress(ctx context.Context, source, stream string, ids []string) (map[string]string, error) {
	out := make(map[string]string, len(ids))
	for _, id := range ids {
		if err := readable(id); err != nil {
			return nil, fmt.Errorf("%w: id %w", ErrBadParameter, err)
		}
		switch source {
		case "inbox":
			n, err := strconv.ParseInt(id, 10, 64)
			if err != nil {
				return nil, errorf(http.StatusBadRequest, "%q is not a message id", id)
			}
			row, err := inbox.Get(ctx, s.cfg.DB, stream, n)
			switch {
			case errors.Is(err, inbox.ErrNotFound):
				out[id] = "not found"
			case err != nil:
				return nil, err
			default:
				out[id] = string(row.Status)
			}
		case "outbox":
			rec, err := outbox.Get(ctx, s.cfg.DB, id)
			switch {
			case errors.Is(err, outbox.ErrNotFound):
				out[id] = "not found"
			case err != nil:
				return nil, err
			default:
				out[id] = string(rec.Status)
			}
		default:
			return nil, errorf(http.StatusBadRequest, "source: %q is neither inbox nor outbox", source)
		}
	}
	return out, nil
}

// IDs is how many ids the gap spans.
func (g Gap) IDs() int64 { return g.To - g.From + 1 }
