package reliability

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// flight is the oracle's model of a flight: the only fields the generated
// traffic touches.
type flight struct {
	version int64
	stnd    string
	gates   []string
}

// oracle replays the accepted messages in mailbox order over the model.
type oracle struct {
	flights  map[string]*flight
	events   map[string]int64 // expected msg event id -> state version it carries
	accepted map[int64]string // mailbox id -> "SUCCEEDED" or "SKIPPED"
	dups     int
}

type mailboxRow struct {
	id        int64
	body      string
	processed bool
}

// replay computes what msgx must have done with the rows: the first row of
// an identity is processed, later copies are duplicates; a FLOP changes the
// flight only when the new value differs, and only then writes an event.
func replay(rows []mailboxRow) *oracle {
	o := &oracle{flights: map[string]*flight{}, events: map[string]int64{}, accepted: map[int64]string{}}
	seen := map[string]bool{}
	for _, r := range rows {
		p, ok := parse(r.body)
		if !ok {
			continue
		}
		if seen[p.identity] {
			o.accepted[r.id] = "SKIPPED"
			o.dups++
			continue
		}
		seen[p.identity] = true
		o.accepted[r.id] = "SUCCEEDED"
		switch p.styp {
		case "DNLD", "ADFT":
			for _, f := range p.flids {
				if o.flights[f] == nil {
					o.flights[f] = &flight{version: 1}
					o.events[fmt.Sprintf("sis:%d:msg:%s", r.id, f)] = 1
				}
			}
		case "STND", "GTDT":
			f := o.flights[p.flids[0]]
			if f == nil {
				o.accepted[r.id] = "SKIPPED"
				continue
			}
			next := *f
			if p.styp == "STND" {
				next.stnd = p.stnd
			} else {
				next.gates = p.gates
			}
			if next.stnd == f.stnd && slices.Equal(next.gates, f.gates) {
				continue
			}
			next.version++
			*f = next
			o.events[fmt.Sprintf("sis:%d:msg:%s", r.id, p.flids[0])] = next.version
		}
	}
	return o
}

// Violations found by the checker, by kind.
type Violations struct {
	Lost          []string // expected events never seen, rows never processed or backfilled
	Doubled       []string // effects applied twice: extra events, versions beyond the oracle's
	Order         []string // per-key order broken on the wire
	State         []string // flight state not equal to the oracle's
	DeadByFault   []string // healthy messages or events dead
	Stuck         []string // unfinished rows or events after the faults stopped
	WrongDup      []string // a duplicate on the wire with another content than the first
	BadInputFates []string // hostile input that did not end DEAD/SKIPPED with a reason
	Leak          []string // goroutines or memory growing over the soak
	Blocked       []string // a DEAD event on a per-key target that did not hold its key, or the rest that did not flow
}

// Count is the number of violations of every kind.
func (v Violations) Count() int {
	return len(v.Lost) + len(v.Doubled) + len(v.Order) + len(v.State) + len(v.DeadByFault) + len(v.Stuck) + len(v.WrongDup) + len(v.BadInputFates) + len(v.Leak) + len(v.Blocked)
}

func (v Violations) String() string {
	var b strings.Builder
	for _, k := range []struct {
		n string
		l []string
	}{{"lost", v.Lost}, {"doubled", v.Doubled}, {"order", v.Order}, {"state", v.State}, {"dead-by-fault", v.DeadByFault},
		{"stuck", v.Stuck}, {"wrong-duplicate", v.WrongDup}, {"bad-input", v.BadInputFates}, {"leak", v.Leak}, {"blocked", v.Blocked}} {
		for i, s := range k.l {
			if i == 20 {
				fmt.Fprintf(&b, "%s: ... %d more\n", k.n, len(k.l)-20)
				break
			}
			fmt.Fprintf(&b, "%s: %s\n", k.n, s)
		}
	}
	return b.String()
}

func readMailbox(ctx context.Context, db *sql.DB, table string) ([]mailboxRow, error) {
	rows, err := db.QueryContext(ctx, "SELECT CMINMSGS_ID, CMINMSGS_CLOB_MSG, COALESCE(CMINMSGS_STATUS,'') = 'PROCESSED' FROM "+table+" ORDER BY CMINMSGS_ID")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []mailboxRow
	for rows.Next() {
		var r mailboxRow
		if err := rows.Scan(&r.id, &r.body, &r.processed); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

type inboxRow struct {
	status, class, reason string
	backfilled            bool
}

func readInbox(ctx context.Context, pg *pgxpool.Pool) (map[int64]inboxRow, error) {
	rows, err := pg.Query(ctx, "SELECT msg_id, status, COALESCE(error_class,''), COALESCE(reason,''), backfilled_at IS NOT NULL FROM msgx_inbox WHERE stream = 'sis'")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int64]inboxRow{}
	for rows.Next() {
		var id int64
		var r inboxRow
		if err := rows.Scan(&id, &r.status, &r.class, &r.reason, &r.backfilled); err != nil {
			return nil, err
		}
		out[id] = r
	}
	return out, rows.Err()
}

// readLate lists the rows the inbox refused as late: DEAD with class LATE
// and recorded REFUSED among the late rows of permanent gaps. That is the
// configured policy's outcome for a row that committed after its gap was
// declared permanent, not a failure.
func readLate(ctx context.Context, pg *pgxpool.Pool) (map[int64]bool, error) {
	rows, err := pg.Query(ctx, `SELECT i.msg_id FROM msgx_inbox i JOIN msgx_inbox_late l ON l.stream = i.stream AND l.msg_id = i.msg_id
		WHERE i.stream = 'sis' AND i.status = 'DEAD' AND i.error_class = 'LATE' AND l.action = 'REFUSED'`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int64]bool{}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out[id] = true
	}
	return out, rows.Err()
}

// applied leaves out the rows refused as late: msgx did not apply them, and
// neither does the oracle.
func applied(rows []mailboxRow, late map[int64]bool) []mailboxRow {
	out := make([]mailboxRow, 0, len(rows))
	for _, r := range rows {
		if !late[r.id] {
			out = append(out, r)
		}
	}
	return out
}

// check compares the history with the oracle. scriptedLate are the rows the
// campaign committed after their gap was declared permanent: each must be
// refused as LATE (the default policy), recorded and not applied.
func check(ctx context.Context, pg *pgxpool.Pool, rows []mailboxRow, hostileIDs map[int64]string, scriptedLate map[int64]bool, w *wire, f *Figures) (Violations, error) {
	var v Violations
	late, err := readLate(ctx, pg)
	if err != nil {
		return v, err
	}
	o := replay(applied(rows, late))
	f.MailboxDuplicates = o.dups
	inbox, err := readInbox(ctx, pg)
	if err != nil {
		return v, err
	}
	for _, r := range rows {
		in, ok := inbox[r.id]
		if kind, bad := hostileIDs[r.id]; bad {
			f.BadInputTried++
			f.BadInputOutcomes = append(f.BadInputOutcomes, fmt.Sprintf("%s: %s %s %.100s", kind, in.status, in.class, in.reason))
			if !ok || (in.status != "DEAD" && in.status != "SKIPPED") || in.reason == "" {
				v.BadInputFates = append(v.BadInputFates, fmt.Sprintf("row %d (%s): %q %q", r.id, kind, in.status, in.reason))
			}
			continue
		}
		if late[r.id] {
			// Refused by policy: DEAD as LATE, recorded, no processed mark.
			f.LateRefused++
			continue
		}
		if scriptedLate[r.id] {
			v.State = append(v.State, fmt.Sprintf("row %d committed after its gap was declared permanent: %s %s %s, want DEAD LATE with a late record",
				r.id, in.status, in.class, in.reason))
			continue
		}
		want, gen := o.accepted[r.id]
		switch {
		case !ok:
			v.Lost = append(v.Lost, fmt.Sprintf("mailbox row %d never reached the inbox", r.id))
			continue
		case in.status == "DEAD":
			v.DeadByFault = append(v.DeadByFault, fmt.Sprintf("row %d DEAD %s: %s", r.id, in.class, in.reason))
		case in.status != "SUCCEEDED" && in.status != "SKIPPED":
			v.Stuck = append(v.Stuck, fmt.Sprintf("row %d %s %s", r.id, in.status, in.reason))
		case gen && in.status != want:
			v.State = append(v.State, fmt.Sprintf("row %d %s (%s), the oracle says %s", r.id, in.status, in.reason, want))
		}
		if !r.processed {
			v.Stuck = append(v.Stuck, fmt.Sprintf("mailbox row %d has no processed mark", r.id))
		}
	}
	var n int
	if err := pg.QueryRow(ctx, "SELECT COUNT(*) FROM msgx_outbox WHERE status = 'DEAD'").Scan(&n); err != nil {
		return v, err
	}
	if n > 0 {
		v.DeadByFault = append(v.DeadByFault, fmt.Sprintf("%d outbox events DEAD", n))
	}
	if err := pg.QueryRow(ctx, "SELECT COUNT(*) FROM msgx_outbox WHERE status = 'PENDING'").Scan(&n); err != nil {
		return v, err
	}
	if n > 0 {
		v.Stuck = append(v.Stuck, fmt.Sprintf("%d outbox events still PENDING", n))
	}

	// Flight state against the oracle.
	srows, err := pg.Query(ctx, "SELECT flid, state_version, state FROM flight_schd")
	if err != nil {
		return v, err
	}
	got := map[string]bool{}
	for srows.Next() {
		var flid string
		var ver int64
		var doc []byte
		if err := srows.Scan(&flid, &ver, &doc); err != nil {
			srows.Close()
			return v, err
		}
		got[flid] = true
		want := o.flights[flid]
		if want == nil {
			continue // a hostile message's flight cannot exist: it was never announced
		}
		var st struct {
			Fields      map[string]any              `json:"fields"`
			Collections map[string][]map[string]any `json:"collections"`
		}
		if err := json.Unmarshal(doc, &st); err != nil {
			v.State = append(v.State, fmt.Sprintf("flight %s: state document: %v", flid, err))
			continue
		}
		stnd, _ := st.Fields["STND"].(string)
		var gates []string
		for _, g := range st.Collections["GTDT"] {
			s, _ := g["GATE"].(string)
			gates = append(gates, s)
		}
		if stnd != want.stnd || !slices.Equal(gates, want.gates) {
			v.State = append(v.State, fmt.Sprintf("flight %s: STND %q gates %v, the oracle says %q %v", flid, stnd, gates, want.stnd, want.gates))
		}
		if ver > want.version {
			v.Doubled = append(v.Doubled, fmt.Sprintf("flight %s: version %d, the oracle counts %d changes", flid, ver, want.version))
		} else if ver < want.version {
			v.State = append(v.State, fmt.Sprintf("flight %s: version %d, the oracle counts %d changes", flid, ver, want.version))
		}
	}
	srows.Close()
	for flid := range o.flights {
		if !got[flid] {
			v.Lost = append(v.Lost, "flight "+flid+" not stored")
		}
	}

	// The wire: every expected event at least once, nothing unexpected,
	// duplicates identical, per-key order.
	recs, ids := w.snapshot()
	first := map[string]string{}
	maxByKey := map[string]int64{}
	lastSchd := map[string]wireRec{}
	for _, r := range recs {
		if r.id == "" {
			continue // a dead letter: checked with the route records
		}
		if prev, ok := first[r.id]; ok {
			f.WireDuplicates++
			if prev != r.value {
				v.WrongDup = append(v.WrongDup, "event "+r.id+" sent twice with different content")
			}
			continue
		}
		first[r.id] = r.value
		if r.topic == "sis.schd" {
			lastSchd[r.key] = r
			continue
		}
		if r.topic != "sis.msg" {
			continue
		}
		f.EventsSeen++
		if _, ok := o.events[r.id]; !ok {
			v.Doubled = append(v.Doubled, "unexpected event "+r.id)
		}
		if r.msgID < maxByKey[r.key] {
			v.Order = append(v.Order, fmt.Sprintf("key %s: event of message %d after one of message %d", r.key, r.msgID, maxByKey[r.key]))
		}
		maxByKey[r.key] = max(maxByKey[r.key], r.msgID)
	}
	var missing []string
	for id := range o.events {
		if ids[id] == 0 {
			missing = append(missing, id)
		}
	}
	sort.Strings(missing)
	for _, id := range missing {
		v.Lost = append(v.Lost, "event "+id+" never on the wire")
	}
	f.EventsExpected = len(o.events)
	for flid, want := range o.flights {
		if r, ok := lastSchd[flid]; !ok || r.version != want.version {
			v.Lost = append(v.Lost, fmt.Sprintf("flight %s: newest state on sis.schd is version %s, the oracle's %d", flid, strconv.FormatInt(r.version, 10), want.version))
		}
	}
	return v, nil
}
