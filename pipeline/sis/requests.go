package sis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/pipeline/sis/sisxml"
	"github.com/msgx/msgx/store"
)

// Request kinds: what msgx asks the AODB for.
const (
	// RQFD asks for the flights of a period (STDB..STDE); the AODB answers
	// with a SCHD RESP.
	RQFD = "RQFD"
	// RQRD asks for the records of a reference type (RTYP); the AODB
	// answers with a RESP of that type.
	RQRD = "RQRD"
)

// Request statuses (REQ_TRACK lifecycle).
const (
	ReqRegistered = "REGISTERED"
	ReqSent       = "SENT"
	ReqWaiting    = "WAITING"
	ReqDone       = "DONE"
	ReqExpired    = "EXPIRED"
)

// Defaults of the coordinator.
const (
	DefaultRequestTimeout = 10 * time.Minute
	DefaultRequestCheck   = 5 * time.Second
	DefaultSenderCode     = "MSGX"
)

// ErrShadow is returned by Request in shadow mode: nothing is written to
// the shared systems then.
var ErrShadow = errors.New("sis: shadow mode: requests are not sent")

// errBadRequest marks a request refused for its parameters.
var errBadRequest = errors.New("bad request")

// RequestParams are the parameters of a request.
type RequestParams struct {
	// From and To bound an RQFD (STDB, STDE), written as ddMONyyHHmm in
	// the airport time zone.
	From time.Time `json:"from,omitzero"`
	To   time.Time `json:"to,omitzero"`
	// RefType is the reference type an RQRD asks for (GLST, AIRL, ...).
	RefType string `json:"refType,omitempty"`
}

// Request is a tracked request (a sis_req_track row).
type Request struct {
	ID int64 `json:"id"`
	// Kind is RQFD or RQRD; AnswerType the TYPE of the RESP that answers
	// it (SCHD, or the reference type).
	Kind         string          `json:"kind"`
	AnswerType   string          `json:"answerType"`
	Params       json.RawMessage `json:"params"`
	Seq          int64           `json:"seqn"`
	Body         string          `json:"body"`
	Status       string          `json:"status"`
	Reason       string          `json:"reason,omitempty"`
	RegisteredAt time.Time       `json:"registeredAt"`
	SentAt       *time.Time      `json:"sentAt,omitempty"`
	ExpiresAt    time.Time       `json:"expiresAt"`
	FinishedAt   *time.Time      `json:"finishedAt,omitempty"`
	OutboundID   *int64          `json:"outboundId,omitempty"`
	AnswerMsgID  *int64          `json:"answerMsgId,omitempty"`
}

// Outbound is where requests are written: the outbound mailbox (COUTMSGS,
// a *mailbox.Outbound).
type Outbound interface {
	// Insert stores a message to send and returns its id once confirmed.
	Insert(ctx context.Context, msg []byte, inserted time.Time) (int64, error)
	// SentAt reports whether (and when) the dispatcher sent row id.
	SentAt(ctx context.Context, id int64) (time.Time, bool, error)
}

// CoordinatorOption configures a Coordinator.
type CoordinatorOption func(*Coordinator)

// WithSenderCode sets SNDR of the requests, our system code (default MSGX).
func WithSenderCode(code string) CoordinatorOption { return func(c *Coordinator) { c.sender = code } }

// WithRequestTimeout sets how long a request waits for its answer before it
// expires (default 10 min).
func WithRequestTimeout(d time.Duration) CoordinatorOption {
	return func(c *Coordinator) { c.timeout = d }
}

// WithRequestCheck sets the period of Run's expiry and dispatch checks
// (default 5 s).
func WithRequestCheck(d time.Duration) CoordinatorOption {
	return func(c *Coordinator) { c.interval = d }
}

// WithRequestClock sets the clock (default the real one).
func WithRequestClock(clk clock.Clock) CoordinatorOption { return func(c *Coordinator) { c.clk = clk } }

// WithRequestLogger sets the logger (default slog.Default()).
func WithRequestLogger(l *slog.Logger) CoordinatorOption { return func(c *Coordinator) { c.log = l } }

// WithRequestLocation sets the airport time zone of DTTM, STDB and STDE
// (default Asia/Shanghai).
func WithRequestLocation(loc *time.Location) CoordinatorOption {
	return func(c *Coordinator) { c.loc = loc }
}

// WithShadow turns shadow mode on: Request refuses with ErrShadow.
func WithShadow(on bool) CoordinatorOption { return func(c *Coordinator) { c.shadow = on } }

// Coordinator sends requests through the outbound mailbox and tracks them
// (sis_req_track); the processor's RESP guard matches the answers. Run
// expires the requests whose time is up and notes the ones the dispatcher
// has sent.
type Coordinator struct {
	db       *store.DB
	out      Outbound
	q        store.Queries
	sender   string
	timeout  time.Duration
	interval time.Duration
	clk      clock.Clock
	log      *slog.Logger
	loc      *time.Location
	shadow   bool
}

// NewCoordinator returns a coordinator writing requests to out.
func NewCoordinator(db *store.DB, out Outbound, opts ...CoordinatorOption) (*Coordinator, error) {
	c := &Coordinator{db: db, out: out, sender: DefaultSenderCode, timeout: DefaultRequestTimeout,
		interval: DefaultRequestCheck, clk: clock.Real{}, log: slog.Default(), loc: sisxml.DefaultLocation()}
	for _, o := range opts {
		o(c)
	}
	if c.sender == "" || c.timeout <= 0 || c.interval <= 0 {
		return nil, errors.New("sis: coordinator: sender code, timeout and check period are required")
	}
	if out == nil && !c.shadow {
		return nil, errors.New("sis: coordinator: no outbound mailbox")
	}
	q, err := queries.For(db.Dialect())
	if err != nil {
		return nil, err
	}
	c.q = q
	return c, nil
}

// Request registers a request, expiring the open one of the same kind,
// writes it to the outbound mailbox and marks it SENT once the insert is
// confirmed. A failed insert leaves it EXPIRED with the error as reason; the
// error keeps the mailbox's class (driver.Code: Unavailable when the mailbox
// could not be reached, Rejected when it refused the row).
func (c *Coordinator) Request(ctx context.Context, kind string, p RequestParams) (Request, error) {
	if c.shadow {
		return Request{}, ErrShadow
	}
	answer, body, err := c.requestBody(kind, p)
	if err != nil {
		return Request{}, fmt.Errorf("%w: %w", errBadRequest, err)
	}
	params, err := json.Marshal(p)
	if err != nil {
		return Request{}, err
	}
	now := c.clk.Now()
	r := Request{Kind: kind, AnswerType: answer, Params: params, Status: ReqRegistered, RegisteredAt: now, ExpiresAt: now.Add(c.timeout)}
	err = c.db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		if _, err := tx.Exec(ctx, c.q.Get("ExpireOpenRequests"), answer, "superseded by a new request", now); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, c.q.Get("NextSeq"), "request:"+c.sender).Scan(&r.Seq); err != nil {
			return err
		}
		body.Meta.Seq = r.Seq
		body.Meta.SentRaw = now.In(c.loc).Format("20060102150405")
		r.Body = string(sisxml.Encode(body))
		return tx.QueryRow(ctx, c.q.Get("InsertRequest"), kind, answer, string(params), r.Seq, r.Body, now, r.ExpiresAt).Scan(&r.ID)
	})
	if err != nil {
		return Request{}, fmt.Errorf("sis: register %s: %w", kind, err)
	}
	outID, err := c.out.Insert(ctx, []byte(r.Body), now)
	if err != nil {
		// The mailbox's class of the failure (driver.Code): an unavailable
		// mailbox is its state, and the caller may send the request again
		// once it is back; a rejected one will be refused again.
		reason := "not sent: " + err.Error()
		if driver.Code(err) == driver.Unavailable {
			reason = "not sent: the outbound mailbox is unavailable: " + err.Error()
		}
		c.log.Warn("sis: request not sent", "request", r.ID, "kind", kind, "class", driver.Code(err).String(), "err", err)
		if _, uerr := c.db.Exec(context.WithoutCancel(ctx), c.q.Get("MarkRequestNotSent"), r.ID, reason, c.clk.Now()); uerr != nil {
			c.log.Error("sis: request not sent and not marked", "request", r.ID, "err", uerr)
		}
		return Request{}, fmt.Errorf("sis: send %s %d: %w", kind, r.ID, err)
	}
	// Sent as of the confirmed insert: a RESP must be dated at or after it.
	sent := c.clk.Now()
	if _, err := c.db.Exec(ctx, c.q.Get("MarkRequestSent"), r.ID, sent, outID); err != nil {
		// The message is out; the request stays REGISTERED, so no RESP
		// matches it, and Run expires it on time.
		return Request{}, fmt.Errorf("sis: %s %d is in the outbound mailbox (row %d) but not marked SENT: %w", kind, r.ID, outID, err)
	}
	r.Status, r.SentAt, r.OutboundID = ReqSent, &sent, &outID
	c.log.Info("sis: request sent", "request", r.ID, "kind", kind, "seqn", r.Seq, "outbound_id", outID)
	return r, nil
}

// requestBody builds the message of a request (SEQN and DTTM are set when
// it is registered) and names the TYPE of its answer.
func (c *Coordinator) requestBody(kind string, p RequestParams) (string, *sisxml.Message, error) {
	m := &sisxml.Message{Meta: sisxml.Meta{Sender: c.sender, Type: kind}}
	switch kind {
	case RQFD:
		if p.From.IsZero() || p.To.IsZero() || p.To.Before(p.From) {
			return "", nil, errors.New("sis: RQFD needs From <= To")
		}
		m.Meta.Subtype = "NONE"
		m.Body = []*sisxml.Element{{Name: "RQFD", Children: []*sisxml.Element{
			{Name: "STDB", Text: bodyTime(p.From, c.loc)}, {Name: "STDE", Text: bodyTime(p.To, c.loc)}}}}
		return "SCHD", m, nil
	case RQRD:
		t := strings.ToUpper(strings.TrimSpace(p.RefType))
		if !slices.Contains(ReferenceTypes, t) {
			return "", nil, fmt.Errorf("sis: RQRD: %q is not a reference type", p.RefType)
		}
		m.Meta.Subtype = t
		m.Body = []*sisxml.Element{{Name: "RQRD", Children: []*sisxml.Element{{Name: "RTYP", Text: t}}}}
		return t, m, nil
	}
	return "", nil, fmt.Errorf("sis: unknown request kind %q (RQFD or RQRD)", kind)
}

// bodyTime writes t as a SIS body time, ddMONyyHHmm in loc.
func bodyTime(t time.Time, loc *time.Location) string {
	return strings.ToUpper(t.In(loc).Format("02Jan061504"))
}

// Run expires the requests whose time is up and marks WAITING the SENT
// ones the dispatcher has sent, every check period, until ctx ends.
func (c *Coordinator) Run(ctx context.Context) error {
	for {
		if err := c.Check(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("sis: request check failed", "err", err)
		}
		t := c.clk.NewTimer(c.interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C():
		}
	}
}

// Check runs one pass of Run.
func (c *Coordinator) Check(ctx context.Context) error {
	n, err := c.db.Exec(ctx, c.q.Get("ExpireDueRequests"), c.clk.Now())
	if err != nil {
		return fmt.Errorf("sis: expire requests: %w", err)
	}
	if n > 0 {
		c.log.Info("sis: requests expired", "count", n)
	}
	rows, err := c.db.Query(ctx, c.q.Get("SentRequests"))
	if err != nil {
		return fmt.Errorf("sis: sent requests: %w", err)
	}
	type sent struct{ id, out int64 }
	var list []sent
	for rows.Next() {
		var s sent
		if err := rows.Scan(&s.id, &s.out); err != nil {
			rows.Close()
			return err
		}
		list = append(list, s)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, s := range list {
		_, ok, err := c.out.SentAt(ctx, s.out)
		if err != nil {
			return err
		}
		if ok {
			if _, err := c.db.Exec(ctx, c.q.Get("MarkRequestWaiting"), s.id); err != nil {
				return err
			}
		}
	}
	return nil
}

// ListRequests lists tracked requests, newest first: status filters ("" is
// all), before pages (ids below it; 0 is from the newest), limit bounds.
func ListRequests(ctx context.Context, db store.Querier, status string, before int64, limit int) ([]Request, error) {
	q, err := queries.For(db.Dialect())
	if err != nil {
		return nil, err
	}
	rows, err := db.Query(ctx, q.Get("ListRequests"), status, before, limit)
	if err != nil {
		return nil, fmt.Errorf("sis: list requests: %w", err)
	}
	defer rows.Close()
	out := []Request{}
	for rows.Next() {
		var r Request
		var params string
		var reason *string
		if err := rows.Scan(&r.ID, &r.Kind, &r.AnswerType, &params, &r.Seq, &r.Body, &r.Status, &reason,
			&r.RegisteredAt, &r.SentAt, &r.ExpiresAt, &r.FinishedAt, &r.OutboundID, &r.AnswerMsgID); err != nil {
			return nil, fmt.Errorf("sis: list requests: %w", err)
		}
		r.Params = json.RawMessage(params)
		if reason != nil {
			r.Reason = *reason
		}
		out = append(out, r)
	}
	return out, rows.Err()
}
