package sis

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/msgx/msgx/failpoint"
	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/pipeline/sis/sisxml"
	"github.com/msgx/msgx/store"
)

// record is one flight record (FLTR) of a schedule message.
type record struct {
	flid, day string
	elem      *sisxml.Element
}

// schedule applies a SCHD message: a snapshot (DNLD, RESP) or an ADFT.
// The whole packet is validated before anything is written and is applied
// in the message's transaction, so it is applied whole or not at all:
//   - RECS equals the number of FLTR (a snapshot must carry RECS);
//   - every FLTR has a FLID, once, and a derivable operation day;
//   - a snapshot covers one operation day;
//   - no FLID is stored under another operation day.
//
// A violation makes the message DEAD(PROTOCOL) with a reason naming the
// FLID and the days. Flights the packet does not carry are left alone; a
// flight it carries is merged (see mergeRecord), so a snapshot applied again
// changes nothing and publishes nothing.
func (p *Processor) schedule(ctx context.Context, tx store.Tx, msg *inbox.Message, m *sisxml.Message, snapshot bool) (inbox.Outcome, bool, error) {
	recs, err := p.records(m, snapshot)
	if err != nil {
		return inbox.Outcome{}, false, err
	}
	if len(recs) == 0 {
		return inbox.Done(), false, nil
	}
	flids := make([]string, len(recs))
	for i, r := range recs {
		flids[i] = r.flid
	}
	stored, err := p.cache.get(ctx, tx, flids)
	if err != nil {
		return inbox.Outcome{}, false, err
	}
	for _, r := range recs {
		if f := stored[r.flid]; f != nil && f.OperationDay != r.day {
			return inbox.Outcome{}, false, inbox.Failf(inbox.Protocol,
				"sis: %s: FLID %s is stored under operation day %s, the packet says %s; nothing written",
				m.Meta.Kind(), r.flid, f.OperationDay, r.day)
		}
	}
	var changes []change
	for _, r := range recs {
		old := stored[r.flid]
		var f *Flight
		if old == nil {
			f = &Flight{FLID: r.flid, OperationDay: r.day, Fields: map[string]string{}, Collections: map[string][]Item{}}
		} else {
			f = old.clone()
		}
		// A schedule carrying a deleted flight brings it back: the AODB says
		// it exists.
		f.Status = StatusActive
		touched := mergeRecord(f, r.elem)
		if err := f.encode(); err != nil {
			return inbox.Outcome{}, false, err
		}
		if unchanged(old, f) {
			continue
		}
		changes = append(changes, change{f: f, old: old, record: r.elem, touched: touched})
	}
	if snapshot {
		if err := logSnapshot(ctx, tx, msg, m, recs, len(changes)); err != nil {
			return inbox.Outcome{}, false, err
		}
	}
	if len(changes) == 0 {
		return inbox.Done(), false, nil
	}
	if err := p.write(ctx, tx, msg, m, changes); err != nil {
		return inbox.Outcome{}, false, err
	}
	// The flights and their events are in the transaction (or held back
	// with the group's other writes), not committed.
	p.fp.Hit(failpoint.SISMidSnapshot)
	return inbox.Done(), true, nil
}

// logSnapshot notes an applied snapshot in sis_snap_log (SCHD_SNAP_LOG).
func logSnapshot(ctx context.Context, tx store.Tx, msg *inbox.Message, m *sisxml.Message, recs []record, changed int) error {
	q, err := queries.For(tx.Dialect())
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, q.Get("LogSnapshot"), msg.ID, m.Meta.Kind(), recs[0].day, len(recs), changed, msg.Now); err != nil {
		return fmt.Errorf("sis: snapshot log: %w", err)
	}
	return nil
}

// records validates the packet and returns its flight records.
func (p *Processor) records(m *sisxml.Message, snapshot bool) ([]record, error) {
	kind := m.Meta.Kind()
	b := body(m, "SCHD")
	if b == nil {
		return nil, inbox.Failf(inbox.Protocol, "sis: %s without a <SCHD> body", kind)
	}
	fltrs := b.All("FLTR")
	if rs := b.Child("RECS"); rs != nil || snapshot {
		n, err := strconv.Atoi(strings.TrimSpace(b.ChildText("RECS")))
		if err != nil {
			return nil, inbox.Failf(inbox.Protocol, "sis: %s: RECS %q is not a number of records", kind, b.ChildText("RECS"))
		}
		if n != len(fltrs) {
			return nil, inbox.Failf(inbox.Protocol, "sis: %s: RECS says %d records, the packet carries %d FLTR; nothing written", kind, n, len(fltrs))
		}
	}
	recs := make([]record, 0, len(fltrs))
	seen := map[string]bool{}
	for i, fr := range fltrs {
		flid := fr.ChildText("FLID")
		if flid == "" {
			return nil, inbox.Failf(inbox.Protocol, "sis: %s: FLTR %d has no FLID; nothing written", kind, i+1)
		}
		if seen[flid] {
			return nil, inbox.Failf(inbox.Protocol, "sis: %s: FLID %s is carried twice; nothing written", kind, flid)
		}
		seen[flid] = true
		day, err := p.operationDay(fr)
		if err != nil {
			return nil, inbox.Failf(inbox.Protocol, "sis: %s: FLID %s: no operation day: %v; nothing written", kind, flid, err)
		}
		if snapshot && len(recs) > 0 && recs[0].day != day {
			return nil, inbox.Failf(inbox.Protocol, "sis: %s crosses operation days: FLID %s is on %s, FLID %s on %s; nothing written",
				kind, recs[0].flid, recs[0].day, flid, day)
		}
		recs = append(recs, record{flid: flid, day: day, elem: fr})
	}
	return recs, nil
}
