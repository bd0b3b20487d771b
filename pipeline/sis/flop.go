package sis

import (
	"context"
	"fmt"

	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/pipeline/sis/sisxml"
	"github.com/msgx/msgx/store"
)

// flopScalars are the FLOP subtypes that set scalar fields, with the fields
// (elements) each one sets; every one of them is set or cleared by the
// message, so an absent or empty element clears its field.
var flopScalars = map[string][]string{
	"HNAG": {"PHAG", "FHAG", "MHAG"},
	"TAOP": {"TAOP", "TAFL", "TAID"},
	"EXSS": {"EXSC", "EXSR"},
	"VIPP": {"VIPP", "VIPR"},
}

// flopSingle are the subtypes that set the one field of their own name
// (with its attributes: FDIV DDES/DDIR, FLAB ARES, FRET REID).
var flopSingle = []string{"ACFT", "APPT", "BOTM", "CNCL", "COBT", "CTOT", "EGSR", "EGST", "EOBT",
	"FDIV", "FINT", "FLAB", "FLIN", "FLTY", "FRET", "FTSS", "IEST", "LACL", "MAXP", "NAAT", "NEAT",
	"PADT", "PEDT", "REMC", "RENO", "RUNW", "STND", "TOBT", "TRML"}

func init() {
	for _, s := range flopSingle {
		flopScalars[s] = []string{s}
	}
}

// knownFlop reports whether a FLOP subtype has a processor.
func knownFlop(styp string) bool {
	if _, ok := flopScalars[styp]; ok {
		return true
	}
	return isCollection(styp) || styp == "FDEL"
}

// FlopSubtypes returns every FLOP subtype the processor handles, FDEL
// included.
func FlopSubtypes() []string {
	out := []string{"FDEL"}
	for s := range flopScalars {
		out = append(out, s)
	}
	// The collection subtypes replace the collection of their own name.
	out = append(out, sortedKeys(collectionSeq)...)
	return sortedUnique(out)
}

// flopBody returns the body element of a single-flight message and its FLID.
func flopBody(m *sisxml.Message) (*sisxml.Element, string, error) {
	b := body(m, m.Meta.Type)
	if b == nil {
		b = body(m, "FLOP")
	}
	if b == nil {
		return nil, "", inbox.Failf(inbox.Protocol, "sis: %s without a <%s> body", m.Meta.Kind(), m.Meta.Type)
	}
	flid := b.ChildText("FLID")
	if flid == "" {
		return nil, "", inbox.Failf(inbox.Protocol, "sis: %s without FLID", m.Meta.Kind())
	}
	return b, flid, nil
}

// singleFlight runs a single-flight message (FLOP, FDEL): apply changes a
// copy of the flight's state and returns whether the message deletes it and
// the collections it touched. A flight not stored, or deleted, is no match.
func (p *Processor) singleFlight(ctx context.Context, tx store.Tx, msg *inbox.Message, m *sisxml.Message,
	apply func(f *Flight, b *sisxml.Element) (deleted bool, touched []string)) (inbox.Outcome, bool, error) {
	b, flid, err := flopBody(m)
	if err != nil {
		return inbox.Outcome{}, false, err
	}
	got, err := p.cache.get(ctx, tx, []string{flid})
	if err != nil {
		return inbox.Outcome{}, false, err
	}
	old := got[flid]
	switch {
	case old == nil:
		return inbox.Skip("no-match:unknown FLID " + flid), false, nil
	case old.Status == StatusDeleted:
		return inbox.Skip("no-match:FLID " + flid + " is deleted"), false, nil
	}
	f := old.clone()
	deleted, touched := apply(f, b)
	if deleted {
		f.Status, f.doc = StatusDeleted, old.doc
	} else {
		if err := f.encode(); err != nil {
			return inbox.Outcome{}, false, err
		}
		if unchanged(old, f) {
			return inbox.Done(), false, nil
		}
	}
	return inbox.Done(), true, p.write(ctx, tx, msg, m, []change{{f: f, old: old, record: b, touched: touched, deleted: deleted}})
}

// flop applies a FLOP message to its flight.
func (p *Processor) flop(ctx context.Context, tx store.Tx, msg *inbox.Message, m *sisxml.Message) (inbox.Outcome, bool, error) {
	styp := m.Meta.Subtype
	return p.singleFlight(ctx, tx, msg, m, func(f *Flight, b *sisxml.Element) (bool, []string) {
		return false, applyFlop(f, styp, b)
	})
}

// applyFlop applies the body b of a FLOP of subtype styp to f and returns
// the collections it touched.
func applyFlop(f *Flight, styp string, b *sisxml.Element) (touched []string) {
	if fields, ok := flopScalars[styp]; ok {
		for _, name := range fields {
			setScalar(f.Fields, name, b.Child(name))
		}
		return nil
	}
	f.setCollection(styp, items(b.All(styp)))
	return []string{styp}
}

// fdel deletes a flight softly: STATUS=DELETED, a new version, the FDEL
// message as a msg event and a tombstone on schd. Its details stay.
func (p *Processor) fdel(ctx context.Context, tx store.Tx, msg *inbox.Message, m *sisxml.Message) (inbox.Outcome, bool, error) {
	return p.singleFlight(ctx, tx, msg, m, func(*Flight, *sisxml.Element) (bool, []string) { return true, nil })
}

// change is one flight a message changed.
type change struct {
	f, old  *Flight
	record  *sisxml.Element // what the message carried for it (FLOP body or FLTR)
	touched []string        // the collections the message carried
	deleted bool
}

// write stores the changed flights with new versions, each version's record
// (flight_version: the message, the changes, the events) and their events,
// in one round trip on PostgreSQL.
func (p *Processor) write(ctx context.Context, tx store.Tx, msg *inbox.Message, m *sisxml.Message, changes []change) error {
	fs, err := newFlightStore(tx.Dialect())
	if err != nil {
		return err
	}
	var stmts []store.Stmt
	events := make([]eventPair, 0, len(changes))
	trace := traceHeaders(ctx)
	for _, c := range changes {
		c.f.LastMsgID = msg.ID
		if c.old == nil {
			c.f.Version = 1
		} else {
			c.f.Version = c.old.Version + 1
		}
		colls, err := collectionChanges(c)
		if err != nil {
			return fmt.Errorf("sis: changes of %s: %w", c.f.FLID, err)
		}
		if c.deleted {
			stmts = append(stmts, fs.setStatus(c.f, msg.Now))
		} else {
			stmts = append(stmts, fs.save(c.f, c.old, colls, msg.Now)...)
		}
		ev, err := p.events(msg, m, c, trace)
		if err != nil {
			return fmt.Errorf("sis: events of %s: %w", c.f.FLID, err)
		}
		events = append(events, ev)
		stmts = append(stmts, fs.versionStmts(msg, m, c, colls, ev)...)
	}
	if err := store.Hold(ctx, tx, stmts...); err != nil {
		return fmt.Errorf("sis: write message %d: %w", msg.ID, err)
	}
	if err := p.enqueue(ctx, tx, msg, events); err != nil {
		return fmt.Errorf("sis: write message %d: %w", msg.ID, err)
	}
	for _, c := range changes {
		p.cache.put(tx, c.f)
	}
	return nil
}
