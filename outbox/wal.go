package outbox

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/msgx/msgx/store"
)

// Mode says how Enqueue hands events to the relay.
type Mode int32

// The outbox modes.
const (
	// ModeTable writes each event as a row of msgx_outbox (the default, and
	// the only mode on SQLite); Relay claims and publishes the rows.
	ModeTable Mode = iota
	// ModeWAL writes the events of an Enqueue call into PostgreSQL's
	// write-ahead log with pg_logical_emit_message, in the caller's
	// transaction, and touches no table; WALRelay streams them from a logical
	// replication slot in commit order.
	ModeWAL
)

func (m Mode) String() string {
	switch m {
	case ModeTable:
		return "table"
	case ModeWAL:
		return "wal"
	}
	return fmt.Sprintf("mode(%d)", int(m))
}

// ParseMode reads "table" (or "") or "wal".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "", "table":
		return ModeTable, nil
	case "wal":
		return ModeWAL, nil
	}
	return 0, fmt.Errorf("outbox: unknown mode %q (want table or wal)", s)
}

type modeKey struct{}

// modeOf is the mode box of a DB handle.
func modeOf(db *store.DB) *atomic.Int32 {
	return db.Shared(modeKey{}, func() any { return new(atomic.Int32) }).(*atomic.Int32)
}

// SetMode chooses how Enqueue writes the events of the transactions db opens
// (DB.InTx): the mode belongs to the database handle, so that business code
// calls Enqueue the same way in either mode. The WAL mode needs PostgreSQL.
// Set it before the first transaction that enqueues, and run a WALRelay
// (besides a Relay, which relays what the WAL relay hands back to the table).
func SetMode(db *store.DB, m Mode) error {
	if m != ModeTable && m != ModeWAL {
		return fmt.Errorf("outbox: unknown mode %d", m)
	}
	if m == ModeWAL && db.Dialect() != store.Postgres {
		return fmt.Errorf("outbox: the wal mode needs PostgreSQL, not %s", db.Dialect())
	}
	modeOf(db).Store(int32(m))
	return nil
}

// ModeOf reports the mode of db's transactions (SetMode).
func ModeOf(db *store.DB) Mode { return Mode(modeOf(db).Load()) }

// txMode is the mode of tx: its handle's, or the table mode for a
// transaction no DB.InTx opened.
func txMode(tx store.Tx) Mode {
	if db := store.DBOf(tx); db != nil && db.Dialect() == store.Postgres {
		return ModeOf(db)
	}
	return ModeTable
}

// WALPrefix is the prefix of the logical decoding messages Enqueue emits in
// the WAL mode; the schema Enqueue's transaction writes in (its
// current_schema(), the one its msgx_outbox table would be in) follows it, so
// that the installations sharing a database each relay only their own events.
const WALPrefix = "msgx.outbox:"

// walVersion is the first byte of every envelope: a relay refuses (and
// reports) an envelope of a version it does not know rather than guess.
const walVersion = 1

// walStatements returns the one statement that emits all events of the call
// as one logical decoding message (transactional: decoded only if the
// transaction commits, in commit order).
func walStatements(now time.Time, events []Event) ([]store.Stmt, error) {
	if len(events) == 0 {
		return nil, nil
	}
	if err := fillEvents(now, events); err != nil {
		return nil, err
	}
	q, err := queriesFor(store.Postgres)
	if err != nil {
		return nil, err
	}
	return []store.Stmt{{SQL: q.Get("WALEmit"), Args: []any{encodeEnvelope(events)}}}, nil
}

// fillEvents checks the events and fills in missing ids, types and creation
// times, as statements does.
func fillEvents(now time.Time, events []Event) error {
	for i := range events {
		e := &events[i]
		if e.Target == "" || e.Topic == "" {
			return errors.New("outbox: event needs a target and a topic")
		}
		if e.ID == "" {
			e.ID = NewEventID()
		}
		if e.Type == "" {
			e.Type = Upsert
		}
		if e.Type != Upsert && e.Type != Tombstone {
			return fmt.Errorf("outbox: event %s: unknown type %q", e.ID, e.Type)
		}
		if e.CreatedAt.IsZero() {
			e.CreatedAt = now
		}
	}
	return nil
}

// encodeEnvelope writes events in the version 1 envelope:
//
//	version byte (1), uvarint event count, then per event:
//	id, target, topic, key (each uvarint length + bytes), type byte
//	(0 upsert, 1 tombstone), created_at (varint Unix microseconds),
//	uvarint header count + sorted (name, value) pairs, payload
//	(uvarint length+1 + bytes; 0 for no payload).
func encodeEnvelope(events []Event) []byte {
	size := 1 + binary.MaxVarintLen64
	for i := range events {
		e := &events[i]
		size += len(e.ID) + len(e.Target) + len(e.Topic) + len(e.Key) + len(e.Payload) + 8*binary.MaxVarintLen64
		for k, v := range e.Headers {
			size += len(k) + len(v) + 2*binary.MaxVarintLen64
		}
	}
	b := make([]byte, 0, size)
	b = append(b, walVersion)
	b = binary.AppendUvarint(b, uint64(len(events)))
	str := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	for i := range events {
		e := &events[i]
		str(e.ID)
		str(e.Target)
		str(e.Topic)
		str(e.Key)
		if e.Type == Tombstone {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
		b = binary.AppendVarint(b, e.CreatedAt.UnixMicro())
		b = binary.AppendUvarint(b, uint64(len(e.Headers)))
		if len(e.Headers) > 0 {
			names := make([]string, 0, len(e.Headers))
			for k := range e.Headers {
				names = append(names, k)
			}
			slices.Sort(names)
			for _, k := range names {
				str(k)
				str(e.Headers[k])
			}
		}
		if e.Payload == nil {
			b = append(b, 0)
		} else {
			b = binary.AppendUvarint(b, uint64(len(e.Payload))+1)
			b = append(b, e.Payload...)
		}
	}
	return b
}

var errEnvelope = errors.New("outbox: malformed wal envelope")

// decodeEnvelope reads an envelope; the events own their bytes (src may be
// reused by the caller).
func decodeEnvelope(src []byte) ([]Event, error) {
	if len(src) == 0 {
		return nil, errEnvelope
	}
	if src[0] != walVersion {
		return nil, fmt.Errorf("outbox: wal envelope version %d is not known to this msgx (it knows %d)", src[0], walVersion)
	}
	b := src[1:]
	bad := false
	uv := func() uint64 {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			bad = true
			return 0
		}
		b = b[n:]
		return v
	}
	raw := func(n uint64) []byte {
		if bad || n > uint64(len(b)) {
			bad = true
			return nil
		}
		r := b[:n]
		b = b[n:]
		return r
	}
	str := func() string { return string(raw(uv())) }
	n := uv()
	if bad || n > uint64(len(b)) {
		return nil, errEnvelope
	}
	events := make([]Event, n)
	for i := range events {
		e := &events[i]
		e.ID, e.Target, e.Topic, e.Key = str(), str(), str(), str()
		switch t := raw(1); {
		case bad:
		case t[0] == 0:
			e.Type = Upsert
		case t[0] == 1:
			e.Type = Tombstone
		default:
			bad = true
		}
		us, k := binary.Varint(b)
		if bad || k <= 0 {
			return nil, errEnvelope
		}
		b = b[k:]
		e.CreatedAt = time.UnixMicro(us).UTC()
		if nh := uv(); nh > 0 && !bad {
			if nh > uint64(len(b)) {
				return nil, errEnvelope
			}
			e.Headers = make(map[string]string, nh)
			for range nh {
				k := str()
				e.Headers[k] = str()
			}
		}
		if pl := uv(); pl > 0 && !bad {
			e.Payload = slices.Clone(raw(pl - 1))
			if e.Payload == nil && !bad {
				e.Payload = []byte{}
			}
		}
		if bad {
			return nil, errEnvelope
		}
	}
	if len(b) != 0 {
		return nil, errEnvelope
	}
	return events, nil
}

// enqueueWAL is Enqueue in the WAL mode.
func enqueueWAL(ctx context.Context, tx store.Tx, now time.Time, events []Event) error {
	stmts, err := walStatements(now, events)
	if err != nil {
		return err
	}
	// The emit returns nothing anyone reads: it travels with the
	// transaction's next statement or its COMMIT, at no round trip of its own.
	if err := store.Hold(ctx, tx, stmts...); err != nil {
		return fmt.Errorf("outbox: enqueue %d events (first %s) into the wal: %w", len(events), events[0].ID, err)
	}
	return nil
}
