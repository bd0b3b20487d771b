package sis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/pipeline/sis/sisxml"
	"github.com/msgx/msgx/store"
)

// RefEvent is the payload of a TargetRef event: one reference record that
// was added, changed or deleted by a message (docs/events.md).
type RefEvent struct {
	Schema   string `json:"schema"`
	MsgID    int64  `json:"msgId"`
	Identity string `json:"identity"`
	Kind     string `json:"kind"`
	Meta     Meta   `json:"meta"`
	RTYPE    string `json:"rtype"`
	RKEY     string `json:"rkey"`
	// Op is RefUpsert or RefDelete.
	Op string `json:"op"`
	// Version is the record's after the change (for a delete, the deleted
	// record's version + 1).
	Version int64 `json:"version"`
	// Record is the record in the generic JSON shape (see Item); for a
	// delete, the record as it was stored.
	Record json.RawMessage `json:"record"`
	// Extra holds the packet's elements other than RECS and its records, in
	// the generic JSON shape (absent when it has none).
	Extra json.RawMessage `json:"extra,omitempty"`
}

// The operations of a RefEvent.
const (
	RefUpsert = "upsert"
	RefDelete = "delete"
)

// refRow is a stored reference record.
type refRow struct {
	version int64
	record  string
}

// refRecord is a record a message carries.
type refRecord struct {
	key    string
	record string
}

// reference applies a reference-data message of type typ: DNLD and RESP
// replace the type's whole set (records not carried are deleted), ADD and
// UPD upsert the carried records, DEL deletes them. A record's key (RKEY) is
// the text of its first child element. The packet is validated whole before
// anything is written (every record has a key, once).
func (p *Processor) reference(ctx context.Context, tx store.Tx, msg *inbox.Message, m *sisxml.Message) (inbox.Outcome, bool, error) {
	typ, styp, kind := m.Meta.Type, m.Meta.Subtype, m.Meta.Kind()
	recs, extra, warn, err := refRecords(m)
	if err != nil {
		return inbox.Outcome{}, false, err
	}
	if warn != "" {
		p.log.Warn("sis: reference packet applied as carried although its RECS disagrees", "msg_id", msg.ID, "kind", kind, "detail", warn)
	}
	q, err := queries.For(tx.Dialect())
	if err != nil {
		return inbox.Outcome{}, false, err
	}
	replace := styp == "DNLD" || styp == "RESP"
	keys := make([]string, len(recs))
	for i, r := range recs {
		keys[i] = r.key
	}
	var rows store.Rows
	if replace {
		rows, err = tx.Query(ctx, q.Get("LoadRefType"), typ)
	} else {
		rows, err = tx.Query(ctx, q.Get("LoadRefKeys"), typ, listArg(tx.Dialect(), keys))
	}
	if err != nil {
		return inbox.Outcome{}, false, fmt.Errorf("sis: load %s records: %w", typ, err)
	}
	stored := map[string]refRow{}
	for rows.Next() {
		var k string
		var r refRow
		if err := rows.Scan(&k, &r.version, &r.record); err != nil {
			rows.Close()
			return inbox.Outcome{}, false, fmt.Errorf("sis: load %s records: %w", typ, err)
		}
		stored[k] = r
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return inbox.Outcome{}, false, fmt.Errorf("sis: load %s records: %w", typ, err)
	}

	var (
		stmts []store.Stmt
		evs   []outbox.Event
	)
	if extra != "" {
		// Kept whether or not a record changes: an element the interface
		// added is not lost.
		stmts = append(stmts, store.Stmt{SQL: q.Get("KeepRefExtra"), Args: []any{msg.ID, kind, extra, msg.Now}})
	}
	changes := len(stmts)
	emit := func(op, key string, version int64, record string) error {
		ev, err := p.refEvent(msg, m, op, key, version, record, extra)
		evs = append(evs, ev)
		return err
	}
	carried := make(map[string]bool, len(recs))
	for _, r := range recs {
		carried[r.key] = true
		old, ok := stored[r.key]
		if styp == "DEL" {
			if !ok {
				continue
			}
			stmts = append(stmts, store.Stmt{SQL: q.Get("DeleteRef"), Args: []any{typ, r.key}})
			if err := emit(RefDelete, r.key, old.version+1, old.record); err != nil {
				return inbox.Outcome{}, false, err
			}
			continue
		}
		if ok && old.record == r.record {
			continue
		}
		v := old.version + 1
		stmts = append(stmts, store.Stmt{SQL: q.Get("UpsertRef"), Args: []any{typ, r.key, r.record, v, msg.ID, msg.Now}})
		if err := emit(RefUpsert, r.key, v, r.record); err != nil {
			return inbox.Outcome{}, false, err
		}
	}
	if replace {
		for _, k := range sortedKeys(stored) {
			if carried[k] {
				continue
			}
			old := stored[k]
			stmts = append(stmts, store.Stmt{SQL: q.Get("DeleteRef"), Args: []any{typ, k}})
			if err := emit(RefDelete, k, old.version+1, old.record); err != nil {
				return inbox.Outcome{}, false, err
			}
		}
	}
	if len(stmts) == 0 {
		return inbox.Done(), false, nil
	}
	if len(stmts) == changes && len(evs) == 0 {
		// Only the extra elements are new: keep them, change no record.
		if err := tx.ExecBatch(ctx, stmts...); err != nil {
			return inbox.Outcome{}, false, fmt.Errorf("sis: write %s message %d: %w", kind, msg.ID, err)
		}
		return inbox.Done(), false, nil
	}
	// The writes travel with the events' statements: one round trip.
	if err := store.Hold(ctx, tx, stmts...); err != nil {
		return inbox.Outcome{}, false, fmt.Errorf("sis: write %s message %d: %w", kind, msg.ID, err)
	}
	if err := outbox.Enqueue(ctx, tx, msg.Now, evs...); err != nil {
		return inbox.Outcome{}, false, fmt.Errorf("sis: write %s message %d: %w", kind, msg.ID, err)
	}
	return inbox.Done(), true, nil
}

// refRecords validates a reference packet and returns its records, each
// encoded in the generic JSON shape.
//
// Unlike a flight schedule, a reference packet whose RECS does not count its
// records is applied as carried (real AODB traffic has such packets, e.g. an
// AIRC DNLD saying 1 and carrying 2: the records are whole, the counter is
// wrong); warn says so, and the processor logs it. The packet's other
// elements (none the interface defines today) are returned in extra, in
// the generic JSON shape ("" when there are none), so that they are kept.
func refRecords(m *sisxml.Message) (recs []refRecord, extra, warn string, err error) {
	typ, kind := m.Meta.Type, m.Meta.Kind()
	var (
		recsTxt string
		hasRecs bool
		others  []*sisxml.Element
	)
	seen := map[string]bool{}
	for _, e := range m.Body {
		switch e.Name {
		case "RECS":
			recsTxt, hasRecs = e.Text, true
		case typ:
			if len(e.Children) == 0 {
				return nil, "", "", inbox.Failf(inbox.Protocol, "sis: %s: record %d is empty (no key); nothing written", kind, len(recs)+1)
			}
			first := e.Children[0]
			key := strings.TrimSpace(first.Text)
			if key == "" {
				return nil, "", "", inbox.Failf(inbox.Protocol, "sis: %s: record %d has an empty key %s; nothing written", kind, len(recs)+1, first.Name)
			}
			if seen[key] {
				return nil, "", "", inbox.Failf(inbox.Protocol, "sis: %s: key %s=%s is carried twice; nothing written", kind, first.Name, key)
			}
			seen[key] = true
			b, err := json.Marshal(object(e))
			if err != nil {
				return nil, "", "", fmt.Errorf("sis: %s: record %s: %w", kind, key, err)
			}
			recs = append(recs, refRecord{key: key, record: string(b)})
		default:
			others = append(others, e)
		}
	}
	if len(others) > 0 {
		b, err := json.Marshal(object(&sisxml.Element{Children: others}))
		if err != nil {
			return nil, "", "", fmt.Errorf("sis: %s: elements besides the records: %w", kind, err)
		}
		extra = string(b)
	}
	if hasRecs {
		if n, err := strconv.Atoi(strings.TrimSpace(recsTxt)); err != nil || n != len(recs) {
			warn = fmt.Sprintf("RECS %q, %d <%s> carried", recsTxt, len(recs), typ)
		}
	}
	return recs, extra, warn, nil
}

// refEvent builds the event of one reference change.
func (p *Processor) refEvent(msg *inbox.Message, m *sisxml.Message, op, key string, version int64, record, extra string) (outbox.Event, error) {
	ev := RefEvent{
		Schema: SchemaRef, MsgID: msg.ID, Identity: msg.Identity, Kind: m.Meta.Kind(), Meta: eventMeta(m),
		RTYPE: m.Meta.Type, RKEY: key, Op: op, Version: version, Record: json.RawMessage(record),
	}
	if extra != "" {
		ev.Extra = json.RawMessage(extra)
	}
	b, err := json.Marshal(ev)
	if err != nil {
		return outbox.Event{}, err
	}
	k := m.Meta.Type + ":" + key
	return outbox.Event{ID: msg.Stream + ":" + strconv.FormatInt(msg.ID, 10) + ":ref:" + k,
		Target: TargetRef, Topic: p.cfg.RefTopic, Key: k, Payload: b}, nil
}

// eventMeta is the META header of m in an event.
func eventMeta(m *sisxml.Message) Meta {
	return Meta{SNDR: m.Meta.Sender, SEQN: m.Meta.Seq, DTTM: m.Meta.SentRaw, TYPE: m.Meta.Type, STYP: m.Meta.Subtype,
		Sent: m.Meta.Sent.Format(time.RFC3339)}
}

// listArg is a text list argument: an array on PostgreSQL, JSON on SQLite.
func listArg(d store.Dialect, s []string) any {
	return flightStore{d: d}.list(s)
}

// season applies a seasonal schedule (SCHS DNLD/RESP): it replaces the
// stored schedule of its season (SNAM) and airport (APCD), kept whole as
// JSON. No flight changes and no event is published.
func (p *Processor) season(ctx context.Context, tx store.Tx, msg *inbox.Message, m *sisxml.Message) (inbox.Outcome, bool, error) {
	kind := m.Meta.Kind()
	b := body(m, "SCHS")
	if b == nil {
		return inbox.Outcome{}, false, inbox.Failf(inbox.Protocol, "sis: %s without a <SCHS> body", kind)
	}
	snam, apcd := strings.TrimSpace(b.ChildText("SNAM")), strings.TrimSpace(b.ChildText("APCD"))
	if snam == "" {
		return inbox.Outcome{}, false, inbox.Failf(inbox.Protocol, "sis: %s without a season name (SNAM)", kind)
	}
	fltrs := len(b.All("FLTR"))
	n, err := strconv.Atoi(strings.TrimSpace(b.ChildText("RECS")))
	if err != nil || n != fltrs {
		return inbox.Outcome{}, false, inbox.Failf(inbox.Protocol, "sis: %s: RECS %q does not count the %d FLTR carried; nothing written", kind, b.ChildText("RECS"), fltrs)
	}
	doc, err := json.Marshal(object(b))
	if err != nil {
		return inbox.Outcome{}, false, fmt.Errorf("sis: %s: %w", kind, err)
	}
	q, err := queries.For(tx.Dialect())
	if err != nil {
		return inbox.Outcome{}, false, err
	}
	var (
		version int64
		old     string
	)
	err = tx.QueryRow(ctx, q.Get("LoadSeason"), snam, apcd).Scan(&version, &old)
	if err != nil && !errors.Is(err, store.ErrNoRows) {
		return inbox.Outcome{}, false, fmt.Errorf("sis: load season %s/%s: %w", snam, apcd, err)
	}
	if err == nil && old == string(doc) {
		return inbox.Done(), false, nil
	}
	if _, err := tx.Exec(ctx, q.Get("UpsertSeason"), snam, apcd, b.ChildText("SDAT"), b.ChildText("EDAT"), n, string(doc),
		version+1, msg.ID, msg.Now); err != nil {
		return inbox.Outcome{}, false, fmt.Errorf("sis: store season %s/%s: %w", snam, apcd, err)
	}
	return inbox.Done(), true, nil
}
