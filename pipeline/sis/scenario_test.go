package sis_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/pipeline/sis"
	"github.com/msgx/msgx/source/mailbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// pipe is the production shape: the mailbox table on MariaDB (uniquely
// named per test, dropped afterwards), the inbox, flight state and outbox in
// PostgreSQL, the real engine with the mailbox poller and backfill, and the
// SIS processor.
type pipe struct {
	t     *testing.T
	db    *store.DB
	raw   *sql.DB
	table *mailbox.Table
}

const stream = "sis"

func newPipe(t *testing.T, cfg sis.Config) *pipe {
	t.Helper()
	return newPipeWith(t, cfg, nil)
}

// newPipeWith runs the pipeline; prepare, when set, runs on the new mailbox
// table before the engine starts, and opts are added to the engine's.
func newPipeWith(t *testing.T, cfg sis.Config, prepare func(raw *sql.DB, table string), opts ...inbox.Option) *pipe {
	t.Helper()
	ctx := context.Background()
	raw := storetest.OpenMySQL(t)
	table, err := mailbox.NewMySQL(raw, mailbox.WithTable(storetest.UniqueName("t_sis_cminmsgs_")), mailbox.WithProcessedValue("DONE"))
	if err != nil {
		t.Fatal(err)
	}
	if err := table.Create(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := table.Drop(context.Background()); err != nil {
			t.Logf("drop %s: %v", table.Name(), err)
		}
	})
	if prepare != nil {
		prepare(raw, table.Name())
	}
	p := &pipe{t: t, db: storetest.NewPostgres(t, store.WithMigrate(sis.Schema())), raw: raw, table: table}
	proc, err := sis.NewProcessor(cfg, sis.WithLogger(testkit.Quiet()))
	if err != nil {
		t.Fatal(err)
	}
	eng, err := inbox.New(p.db, stream, inbox.Typed(proc), append([]inbox.Option{
		inbox.WithLogger(testkit.Quiet()),
		inbox.WithPollInterval(20 * time.Millisecond),
		inbox.WithSource(mailbox.NewPoller(table, p.db, stream, mailbox.WithStart(mailbox.FromBeginning()),
			mailbox.WithPollInterval(20*time.Millisecond), mailbox.WithPollerLogger(testkit.Quiet()))),
		inbox.WithBackfill(table)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- eng.Run(rctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && rctx.Err() == nil {
			t.Errorf("engine: %v", err)
		}
	})
	return p
}

// put writes messages into the mailbox, in order, and returns their ids.
func (p *pipe) put(msgs ...[]byte) []int64 {
	p.t.Helper()
	ids := make([]int64, len(msgs))
	for i, m := range msgs {
		id, err := p.table.Insert(context.Background(), m, time.Now(), mailbox.Meta{})
		if err != nil {
			p.t.Fatal(err)
		}
		ids[i] = id
	}
	return ids
}

// settle waits (bounded) until every id is terminal and backfilled, and
// returns their rows.
func (p *pipe) settle(ids ...int64) []inbox.Row {
	p.t.Helper()
	return waitTerminal(p.t, p.db, 60*time.Second, true, ids...)
}

// waitTerminal waits, up to timeout, until every id of the stream is
// terminal (and, with backfilled, has its processed mark written back), and
// returns their rows.
func waitTerminal(t testing.TB, db *store.DB, timeout time.Duration, backfilled bool, ids ...int64) []inbox.Row {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		rows := make([]inbox.Row, 0, len(ids))
		done := true
		for _, id := range ids {
			r, err := inbox.Get(context.Background(), db, stream, id)
			if err != nil && err != inbox.ErrNotFound {
				t.Fatal(err)
			}
			if err != nil || !r.Status.Terminal() || (backfilled && r.BackfilledAt == nil) {
				done = false
			}
			rows = append(rows, r)
		}
		if done {
			return rows
		}
		if time.Now().After(deadline) {
			t.Fatalf("messages not settled in time: %+v", rows)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// marks returns the processed marks of the mailbox rows.
func (p *pipe) marks(ids ...int64) []string {
	p.t.Helper()
	out := make([]string, len(ids))
	for i, id := range ids {
		var st sql.NullString
		if err := p.raw.QueryRow("SELECT CMINMSGS_STATUS FROM "+p.table.Name()+" WHERE CMINMSGS_ID = ?", id).Scan(&st); err != nil {
			p.t.Fatal(err)
		}
		out[i] = st.String
	}
	return out
}

func (p *pipe) harness() *harness { return &harness{t: p.t, db: p.db} }

// outcome is a message's final status and reason.
type outcome struct {
	Status inbox.Status
	Class  inbox.Class
	Reason string
}

func outcomes(rows []inbox.Row) []outcome {
	out := make([]outcome, len(rows))
	for i, r := range rows {
		out[i] = outcome{r.Status, r.ErrorClass, r.Reason}
	}
	return out
}

var succeeded = outcome{Status: inbox.Succeeded}

// TestScenarioScheduleGateCancelDelete: DNLD → FLOP GTDT → FLOP CNCL → FDEL
// for flight 15, from the MariaDB mailbox to flight state and events.
func TestScenarioScheduleGateCancelDelete(t *testing.T) {
	p := newPipe(t, sis.Config{})
	gtdt := replace(t, fixture(t, "FLOP_GTDT_1.xml"), "<FLID>121112312</FLID>", "<FLID>15</FLID>")
	ids := p.put(fixture(t, "SCHD_DNLD_1.xml"), gtdt, fixture(t, "FLOP_CNCL_1.xml"), fixture(t, "FLOP_FDEL_1.xml"))
	rows := p.settle(ids...)
	if got := outcomes(rows); !slices.Equal(got, []outcome{succeeded, succeeded, succeeded, succeeded}) {
		t.Fatalf("outcomes %+v", got)
	}
	if got := p.marks(ids...); !slices.Equal(got, []string{"DONE", "DONE", "DONE", "DONE"}) {
		t.Fatalf("processed marks %v", got)
	}
	h := p.harness()
	f := h.flight("15")
	if f.Status != sis.StatusDeleted || f.Version != 4 || f.LastMsgID != ids[3] || f.OperationDay != "2021-01-23" ||
		f.Fields["CNCL"] != "15DEC031722" || len(f.Collections["GTDT"]) != 3 || f.Fields["FLNO"] != "YG9028" {
		t.Fatalf("flight 15: %+v", f)
	}
	if f := h.flight("16"); f.Status != sis.StatusActive || f.Version != 1 {
		t.Fatalf("flight 16: %+v", f)
	}
	evs := h.events()
	type ev struct{ id, target, key, typ string }
	var got []ev
	for _, e := range evs {
		got = append(got, ev{e.ID, e.Target, e.Key, e.Type})
	}
	id := func(i int, what, flid string) string {
		return "sis:" + itoa(ids[i]) + ":" + what + ":" + flid
	}
	want := []ev{
		{id(0, "msg", "15"), sis.TargetMsg, "15", "UPSERT"}, {id(0, "schd", "15"), sis.TargetSchd, "15", "UPSERT"},
		{id(0, "msg", "16"), sis.TargetMsg, "16", "UPSERT"}, {id(0, "schd", "16"), sis.TargetSchd, "16", "UPSERT"},
		{id(1, "msg", "15"), sis.TargetMsg, "15", "UPSERT"}, {id(1, "schd", "15"), sis.TargetSchd, "15", "UPSERT"},
		{id(2, "msg", "15"), sis.TargetMsg, "15", "UPSERT"}, {id(2, "schd", "15"), sis.TargetSchd, "15", "UPSERT"},
		{id(3, "msg", "15"), sis.TargetMsg, "15", "UPSERT"}, {id(3, "schd", "15"), sis.TargetSchd, "15", "TOMBSTONE"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("events\n got %v\nwant %v", got, want)
	}
	// The schd state after CNCL, and the msg event of the FDEL.
	s := schdState(t, evs[7])
	if s.Schema != sis.SchemaSchd || s.StateVersion != 3 || s.Fields["CNCL"] != "15DEC031722" || len(s.Collections["GTDT"]) != 3 || s.Status != "ACTIVE" {
		t.Fatalf("schd after CNCL: %+v", s)
	}
	if evs[9].Payload != nil {
		t.Fatalf("tombstone with a payload: %s", evs[9].Payload)
	}
	var m sis.MsgEvent
	if err := json.Unmarshal(evs[8].Payload, &m); err != nil {
		t.Fatal(err)
	}
	if m.Schema != sis.SchemaMsg || m.Kind != "FLOP/FDEL" || m.Status != "DELETED" || m.StateVersion != 4 || m.Meta.SEQN != 1243 ||
		m.Identity != "AODB|FLOP|FDEL|1243" || m.Body["FLOP"].(map[string]any)["FFID"] != "CA-CA101-A-12DEC031345-D" {
		t.Fatalf("FDEL msg event: %+v", m)
	}
}

// TestScenarioEachMessageReadAhead: one message per pump transaction, all
// in the mailbox before the engine starts, so that each message is read,
// decoded and its flight read ahead while the one before commits. The
// flight is created by the first message and each later one sets another
// field: every message must start from the state the one before left (the
// read-ahead's read of the flight waits for that commit), and the first
// must find the flight whose creation had not committed when it was read
// ahead.
func TestScenarioEachMessageReadAhead(t *testing.T) {
	const flid = "9100"
	msgs := [][]byte{adft(81000, flid)}
	want := map[string]string{"CNCL": "15DEC031722", "REMC": "Bag loading Delay", "STND": "S209", "ACFT": "358", "RENO": "T5561", "RUNW": "02L", "TRML": "T3"}
	for i, name := range []string{"CNCL", "REMC", "STND", "ACFT", "RENO", "RUNW", "TRML"} {
		m := flidOf.ReplaceAll(fixture(t, "FLOP_"+name+"_1.xml"), []byte("<FLID>"+flid+"</FLID>"))
		msgs = append(msgs, withSeq(m, int64(81001+i)))
	}
	var ids []int64
	p := newPipeWith(t, sis.Config{}, func(raw *sql.DB, table string) {
		for _, m := range msgs {
			res, err := raw.Exec("INSERT INTO "+table+" (CMINMSGS_CLOB_MSG, CMINMSGS_DATE_RECEIVED) VALUES (?, NOW())", string(m))
			if err != nil {
				t.Fatal(err)
			}
			id, err := res.LastInsertId()
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
	}, inbox.WithGroupSize(1))
	for i, r := range p.settle(ids...) {
		if r.Status != inbox.Succeeded {
			t.Fatalf("message %d: %+v", i, r)
		}
	}
	f := p.harness().flight(flid)
	if f.Version != int64(len(msgs)) || f.LastMsgID != ids[len(ids)-1] {
		t.Fatalf("flight %s: version %d, last message %d; want %d and %d", flid, f.Version, f.LastMsgID, len(msgs), ids[len(ids)-1])
	}
	for k, v := range want {
		if f.Fields[k] != v {
			t.Errorf("flight %s: %s = %q, want %q (a change lost)", flid, k, f.Fields[k], v)
		}
	}
}

var flidOf = regexp.MustCompile(`<FLID>[^<]*</FLID>`)

// TestScenarioSameGateTwice: the same GTDT sent twice (two SEQNs) is one
// version and one pair of events.
func TestScenarioSameGateTwice(t *testing.T) {
	p := newPipe(t, sis.Config{})
	gtdt := replace(t, fixture(t, "FLOP_GTDT_1.xml"), "<FLID>121112312</FLID>", "<FLID>16</FLID>")
	ids := p.put(fixture(t, "SCHD_DNLD_1.xml"), withSeq(gtdt, 70001), withSeq(gtdt, 70002))
	if got := outcomes(p.settle(ids...)); !slices.Equal(got, []outcome{succeeded, succeeded, succeeded}) {
		t.Fatalf("outcomes %+v", got)
	}
	h := p.harness()
	if f := h.flight("16"); f.Version != 2 || f.LastMsgID != ids[1] {
		t.Fatalf("flight 16: %+v", f)
	}
	var fromGates []string
	for _, e := range h.events() {
		if !strings.HasPrefix(e.ID, "sis:"+itoa(ids[0])+":") {
			fromGates = append(fromGates, e.ID)
		}
	}
	if want := []string{"sis:" + itoa(ids[1]) + ":msg:16", "sis:" + itoa(ids[1]) + ":schd:16"}; !slices.Equal(fromGates, want) {
		t.Fatalf("events of the gates: %v", fromGates)
	}
}

// TestScenarioRejectedSchedules: a DNLD whose RECS disagrees and one that
// crosses operation days go DEAD(PROTOCOL), write nothing and do not block
// the stream.
func TestScenarioRejectedSchedules(t *testing.T) {
	p := newPipe(t, sis.Config{})
	dnld := fixture(t, "SCHD_DNLD_1.xml")
	ids := p.put(
		withSeq(replace(t, dnld, "<RECS>2</RECS>", "<RECS>1</RECS>"), 1),
		withSeq(replace(t, dnld, "<SODT>23JAN210325</SODT>", "<SODT>24JAN210325</SODT>"), 2),
		withSeq(dnld, 3),
		fixture(t, "FLOP_CNCL_1.xml"),
	)
	got := outcomes(p.settle(ids...))
	want := []outcome{
		{inbox.Dead, inbox.Protocol, "PROTOCOL: sis: SCHD/DNLD: RECS says 1 records, the packet carries 2 FLTR; nothing written"},
		{inbox.Dead, inbox.Protocol, "PROTOCOL: sis: SCHD/DNLD crosses operation days: FLID 15 is on 2021-01-23, FLID 16 on 2021-01-24; nothing written"},
		succeeded, succeeded,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("outcomes\n got %+v\nwant %+v", got, want)
	}
	h := p.harness()
	if f := h.flight("15"); f.Version != 2 || f.LastMsgID != ids[3] {
		t.Fatalf("flight 15: %+v", f)
	}
	if n := len(h.events()); n != 6 {
		t.Fatalf("%d events, want 6 (4 of the DNLD, 2 of the CNCL)", n)
	}
}

// TestScenarioDuplicatesAndReplays: a second message with the same SEQN
// (same identity) is SKIPPED as a duplicate; the SUCCEEDED DNLD sent again
// is a duplicate, and with a new SEQN an idempotent success that changes
// nothing; a SUCCEEDED message cannot be replayed; a FLOP for a flight
// nobody announced is SKIPPED(no-match).
func TestScenarioDuplicatesAndReplays(t *testing.T) {
	p := newPipe(t, sis.Config{})
	dnld := fixture(t, "SCHD_DNLD_1.xml")
	ids := p.put(
		dnld,
		fixture(t, "FLOP_APPT_1.xml"), // AODB|FLOP|APPT|1243
		fixture(t, "FLOP_APPT_2.xml"), // the same identity
		dnld,                          // the same identity
		withSeq(dnld, 99),             // the same snapshot, new identity
		fixture(t, "FLOP_CHOT_1.xml"), // FLID 121112312: not in the DNLD
	)
	got := outcomes(p.settle(ids...))
	want := []outcome{
		succeeded, succeeded,
		{inbox.Skipped, "", "duplicate-of:" + itoa(ids[1])},
		{inbox.Skipped, "", "duplicate-of:" + itoa(ids[0])},
		succeeded,
		{inbox.Skipped, "", "no-match:unknown FLID 121112312"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("outcomes\n got %+v\nwant %+v", got, want)
	}
	h := p.harness()
	if f := h.flight("15"); f.Version != 2 || f.Fields["APPT"] != "12DEC031350" {
		t.Fatalf("flight 15: %+v", f)
	}
	if n := len(h.events()); n != 6 {
		t.Fatalf("%d events, want 6", n)
	}
	res, err := inbox.Replay(context.Background(), p.db, stream, time.Now(), inbox.ReplayRequest{IDs: []int64{ids[0]}, Actor: "test", Reason: "replay a SUCCEEDED DNLD"})
	if err != nil || len(res.Replayed) > 0 || res.Refused[ids[0]] == "" {
		t.Fatalf("replaying a SUCCEEDED message: %+v %v", res, err)
	}
	if r := p.settle(ids[0]); r[0].Status != inbox.Succeeded {
		t.Fatalf("after the replay attempt: %+v", r[0])
	}
}

// TestScenarioGBKMessage: a message written in GBK into the legacy mailbox
// (its column is text, MEDIUMTEXT utf8mb4: the writer and the server
// transcoded it, and it still declares GBK) comes out as the same Chinese
// text in the flight state and the events.
func TestScenarioGBKMessage(t *testing.T) {
	p := newPipe(t, sis.Config{})
	msg := replace(t, fixture(t, "FLOP_SRVT_1.xml"), `encoding="UTF-8"`, `encoding="GBK"`)
	ids := p.put(fixture(t, "SCHD_DNLD_1.xml"), msg)
	if got := outcomes(p.settle(ids...)); !slices.Equal(got, []outcome{succeeded, succeeded}) {
		t.Fatalf("outcomes %+v", got)
	}
	h := p.harness()
	if s := h.flight("15").Collections["SRVT"]; len(s) != 1 || s[0]["SARR"] != "由于机器问题延误服务事务" {
		t.Fatalf("services %v", s)
	}
	evs := h.events()
	if !strings.Contains(string(evs[len(evs)-2].Payload), "由于机器问题延误服务事务") {
		t.Fatalf("msg event %s", evs[len(evs)-2].Payload)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
