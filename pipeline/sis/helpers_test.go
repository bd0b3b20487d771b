package sis_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/pipeline/sis"
	"github.com/msgx/msgx/pipeline/sis/traffic"
	"github.com/msgx/msgx/store"
)

var t0 = time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)

// fixture returns a bundled real message.
func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := traffic.Read(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var seqnRE = regexp.MustCompile(`<SEQN>[^<]*</SEQN>`)

// withSeq gives a message another SEQN (a business identity of its own).
func withSeq(msg []byte, seq int64) []byte {
	return seqnRE.ReplaceAll(msg, []byte("<SEQN>"+strconv.FormatInt(seq, 10)+"</SEQN>"))
}

// replace replaces the first occurrence of old in msg.
func replace(t testing.TB, msg []byte, old, new string) []byte {
	t.Helper()
	if !strings.Contains(string(msg), old) {
		t.Fatalf("%q not in the message", old)
	}
	return []byte(strings.Replace(string(msg), old, new, 1))
}

// adft composes a SCHD ADFT that adds flights on 15 Dec 2003 (the day the
// FLOP fixtures of these FLIDs refer to).
func adft(seq int64, flids ...string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?><MSG><META><SNDR>AODB</SNDR><SEQN>%d</SEQN><DTTM>20031215080000</DTTM><TYPE>SCHD</TYPE><STYP>ADFT</STYP></META><SCHD><RECS>%d</RECS>`, seq, len(flids))
	for i, f := range flids {
		fmt.Fprintf(&b, `<FLTR><FLID>%s</FLID><ALCD>CA</ALCD><FLNO>CA%d</FLNO><MVIN>A</MVIN><SODT>15DEC031345</SODT><FLTY>W</FLTY><FLIN>D</FLIN></FLTR>`, f, 101+i)
	}
	b.WriteString(`</SCHD></MSG>`)
	return []byte(b.String())
}

// harness runs the processor on messages the way the inbox engine does: one
// transaction, the message inside a savepoint.
type harness struct {
	t    *testing.T
	db   *store.DB
	p    *sis.Processor
	next int64
}

func newHarness(t *testing.T, db *store.DB, cfg sis.Config) *harness {
	t.Helper()
	p, err := sis.NewProcessor(cfg, sis.WithLogger(testkit.Quiet()))
	if err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, db: db, p: p}
}

// process decodes and processes one message.
func (h *harness) process(payload []byte) (inbox.Outcome, error) {
	h.t.Helper()
	d, err := h.p.Decode(payload)
	if err != nil {
		return inbox.Outcome{}, err
	}
	h.next++
	msg := &inbox.Message{Stream: "sis", ID: h.next, Payload: payload, Attempt: 1,
		Identity: d.Identity, Kind: d.Kind, Decoded: d.Value, Now: t0}
	var out inbox.Outcome
	err = h.db.InTx(context.Background(), func(ctx context.Context, tx store.Tx) error {
		return tx.Savepoint(ctx, func(ctx context.Context) error {
			var err error
			out, err = h.p.Process(ctx, tx, msg, d.Value)
			return err
		})
	})
	return out, err
}

// ok processes a message that must succeed and returns its outcome.
func (h *harness) ok(payload []byte) inbox.Outcome {
	h.t.Helper()
	out, err := h.process(payload)
	if err != nil {
		h.t.Fatalf("process: %v", err)
	}
	return out
}

// fails processes a message that must fail with class c.
func (h *harness) fails(payload []byte, c inbox.Class) error {
	h.t.Helper()
	_, err := h.process(payload)
	if err == nil || inbox.ClassOf(err) != c {
		h.t.Fatalf("want a %s failure, got %v", c, err)
	}
	return err
}

// flight reads one flight from the tables (nil when not stored).
func (h *harness) flight(flid string) *sis.Flight {
	h.t.Helper()
	got, err := sis.Read(context.Background(), h.db, []string{flid})
	if err != nil {
		h.t.Fatal(err)
	}
	return got[flid]
}

// event is an outbox row.
type event struct {
	ID, Target, Topic, Key, Type string
	Payload                      []byte
}

// events returns the outbox rows in id order.
func (h *harness) events() []event {
	h.t.Helper()
	rows, err := h.db.Query(context.Background(), "SELECT event_id, target, topic, partition_key, event_type, payload FROM msgx_outbox ORDER BY id")
	if err != nil {
		h.t.Fatal(err)
	}
	defer rows.Close()
	var out []event
	for rows.Next() {
		var e event
		if err := rows.Scan(&e.ID, &e.Target, &e.Topic, &e.Key, &e.Type, &e.Payload); err != nil {
			h.t.Fatal(err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		h.t.Fatal(err)
	}
	return out
}

// eventIDs lists the ids of events.
func eventIDs(evs []event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.ID
	}
	return out
}

// schdState decodes a schd event.
func schdState(t testing.TB, e event) sis.SchdEvent {
	t.Helper()
	var s sis.SchdEvent
	if err := json.Unmarshal(e.Payload, &s); err != nil {
		t.Fatalf("schd payload %s: %v", e.Payload, err)
	}
	return s
}
