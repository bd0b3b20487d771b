package sis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/pipeline/sis/sisxml"
	"github.com/msgx/msgx/store"
)

// match is the request a RESP answers.
type match struct {
	id     int64
	reason string // set when the match was degraded (clock skew tolerated)
}

// guard finds the open request a RESP answers (its TYPE is the request's
// answer type). The RESP matches when the request is SENT or WAITING, its
// time is not up at the RESP's processing time, and DTTM is at or after the
// request's sent time — both compared as instants at second resolution (DTTM
// is read in the airport zone and has whole seconds). With a clock-skew
// tolerance, a DTTM up to that much before the sent time still matches, and
// the degraded match is logged and noted on the request. Otherwise skip
// says why it does not match (the reason of the SKIPPED no-match).
func (p *Processor) guard(ctx context.Context, tx store.Tx, msg *inbox.Message, m *sisxml.Message) (mt match, skip string, err error) {
	q, err := queries.For(tx.Dialect())
	if err != nil {
		return match{}, "", err
	}
	var (
		status       string
		sent         *time.Time
		expires      time.Time
		id           int64
		answerType   = m.Meta.Type
		noOpenReason = "no-match:no-open-request"
	)
	err = tx.QueryRow(ctx, q.Get("LatestRequest"), answerType).Scan(&id, &status, &sent, &expires)
	if errors.Is(err, store.ErrNoRows) {
		return match{}, noOpenReason, nil
	}
	if err != nil {
		return match{}, "", fmt.Errorf("sis: request guard: %w", err)
	}
	rid := strconv.FormatInt(id, 10)
	switch {
	case status == ReqExpired:
		return match{}, "no-match:request " + rid + " expired", nil
	case status == ReqRegistered || sent == nil:
		return match{}, "no-match:request " + rid + " not sent", nil
	case status != ReqSent && status != ReqWaiting:
		return match{}, noOpenReason, nil
	case !msg.Now.Before(expires):
		return match{}, "no-match:request " + rid + " expired", nil
	}
	dttm := m.Meta.Sent.UTC().Truncate(time.Second)
	at := sent.UTC().Truncate(time.Second)
	if !dttm.Before(at) {
		return match{id: id}, "", nil
	}
	if skew := at.Sub(dttm); skew <= p.cfg.RequestSkew {
		reason := fmt.Sprintf("matched with clock skew: DTTM %s is %s before the request was sent", m.Meta.SentRaw, skew)
		p.log.Warn("sis: RESP matched a request despite an earlier DTTM", "msg_id", msg.ID, "request", id, "skew", skew,
			"tolerance", p.cfg.RequestSkew)
		return match{id: id, reason: reason}, "", nil
	}
	return match{}, fmt.Sprintf("no-match:late: DTTM %s is before request %s was sent (%s)", m.Meta.SentRaw, rid,
		sent.In(p.cfg.Location).Format("20060102150405")), nil
}

// answered marks the matched request DONE in the RESP's transaction, so it
// is DONE exactly when the data is committed.
func (p *Processor) answered(ctx context.Context, tx store.Tx, msg *inbox.Message, mt match) error {
	q, err := queries.For(tx.Dialect())
	if err != nil {
		return err
	}
	var reason any
	if mt.reason != "" {
		reason = mt.reason
	}
	if _, err := tx.Exec(ctx, q.Get("MarkRequestDone"), mt.id, msg.Now, msg.ID, reason); err != nil {
		return fmt.Errorf("sis: request %d done: %w", mt.id, err)
	}
	return nil
}

// guarded runs apply for a RESP when the request guard is on: only as the
// answer to an open request, which becomes DONE with the data.
func (p *Processor) guarded(ctx context.Context, tx store.Tx, msg *inbox.Message, m *sisxml.Message,
	apply func() (inbox.Outcome, bool, error)) (inbox.Outcome, bool, error) {
	mt, skip, err := p.guard(ctx, tx, msg, m)
	if err != nil {
		return inbox.Outcome{}, false, err
	}
	if skip != "" {
		return inbox.Skip(skip), false, nil
	}
	out, changed, err := apply()
	if err != nil || out.Status != inbox.Succeeded {
		return out, changed, err
	}
	return out, changed, p.answered(ctx, tx, msg, mt)
}
